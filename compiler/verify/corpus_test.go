package verify_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/frontends/msccl"
	"github.com/theseus-ccl/theseus/compiler/frontends/mscclpp"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// corpusFindings lists the codes the verifier reports on the real
// third-party schedules that are not clean. Every other file that imports
// verifies clean.
var corpusFindings = map[string][]diag.Code{
	// Two threadblocks of rank 2 receive from rank 6 on channel 0 (and
	// likewise on ranks 3, 6, 7): one FIFO with two readers.
	"msccl-tools_experiments_ar_multi_ar_1.xml": {diag.SharedChannel},
	// The plan puts into the peer's scratch chunk and never waits for the
	// reader before the next slice puts there again.
	"mscclpp-v0.7.0_sendrecv.json": {diag.RaceAcrossLaunch},
}

// TestCorpus verifies every schedule of the shared corpus that the MSCCL
// and MSCCL++ importers accept.
func TestCorpus(t *testing.T) {
	xml, _ := filepath.Glob(filepath.Join(*corpusDir, "msccl-xml", "*.xml"))
	plans, _ := filepath.Glob(filepath.Join(*corpusDir, "mscclpp-json", "*", "*.json"))
	if len(xml)+len(plans) == 0 {
		t.Skipf("no corpus under %s", *corpusDir)
	}
	for _, f := range append(xml, plans...) {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var p *ir.Program
			if strings.HasSuffix(f, ".xml") {
				p, _ = msccl.Parse(f, data)
			} else {
				p, _ = mscclpp.Parse(f, data)
			}
			if p == nil {
				t.Skip("the importer rejects it")
			}
			var codes []diag.Code
			for _, d := range verify.Verify(p, verify.Options{}) {
				if !slices.Contains(codes, d.Code) {
					codes = append(codes, d.Code)
				}
			}
			if d := cmp.Diff(corpusFindings[name], codes); d != "" {
				t.Errorf("codes (-want +got):\n%s", d)
			}
		})
	}
}
