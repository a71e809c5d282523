package mscclpp

import (
	"path/filepath"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
	"github.com/theseus-ccl/theseus/ir"
)

// TestCorpus imports every MSCCL++ plan of the shared corpus (v0.7 and
// v0.8plus) and compares its summary with
// testdata/golden/<dialect>/<file>.json (go test -update rewrites them).
// Every file must import without errors, or be rejected with the
// diagnostics its golden file lists.
func TestCorpus(t *testing.T) {
	dialectDir := func(path string) string { return filepath.Base(filepath.Dir(path)) }
	importtest.Corpus(t, importtest.CorpusTest{
		Parse:   Parse,
		Pattern: filepath.Join("mscclpp-json", "*", "*.json"),
		Golden: func(path string) string {
			return filepath.Join("testdata", "golden", dialectDir(path), filepath.Base(path))
		},
		Check: func(t *testing.T, path string, p *ir.Program) {
			// The dialect directory and the detected dialect agree.
			if d := dialectDir(path); p != nil && (d == "v0.7") != (p.Meta["mscclpp.dialect"] == "v0.7") {
				t.Errorf("file in %s detected as %s", d, p.Meta["mscclpp.dialect"])
			}
		},
	})
}
