package cuda

import (
	"fmt"
	"os"
	"strings"

	"github.com/theseus-ccl/theseus/compiler/frontends/msccl"
	"github.com/theseus-ccl/theseus/compiler/frontends/mscclpp"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// importFile imports one foreign schedule (MSCCL XML or an MSCCL++ plan).
func importFile(path string) (*ir.Program, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p *ir.Program
	var ds []diag.Diagnostic
	if strings.HasSuffix(path, ".xml") {
		p, ds = msccl.Parse(path, data)
	} else {
		p, ds = mscclpp.Parse(path, data)
	}
	for _, d := range ds {
		if d.Severity == diag.Error {
			return nil, fmt.Errorf("%v", d)
		}
	}
	if p == nil {
		return nil, fmt.Errorf("no program")
	}
	return p, nil
}
