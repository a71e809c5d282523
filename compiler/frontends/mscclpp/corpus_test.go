package mscclpp

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
)

// TestCorpus imports every MSCCL++ plan of the shared corpus (v0.7 and v0.8plus) and compares
// its summary with testdata/golden/<file>.json (go test -update rewrites
// them). Every file must import without errors, or be rejected with the
// diagnostics its golden file lists.
func TestCorpus(t *testing.T) {
	dir := filepath.Join(importtest.CorpusDir(t), "mscclpp-json")
	files, err := filepath.Glob(filepath.Join(dir, "*", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in %s: %v", dir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		base := filepath.Base(f)
		dialectDir := filepath.Base(filepath.Dir(f))
		t.Run(base, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, ds := Parse(base, data)
			got := importtest.Summarize(p, ds)
			golden := filepath.Join("testdata", "golden", dialectDir, base)
			importtest.Golden(t, golden, got)
			// The dialect directory and the detected dialect agree.
			if p != nil && (dialectDir == "v0.7") != (p.Meta["mscclpp.dialect"] == "v0.7") {
				t.Errorf("file in %s detected as %s", dialectDir, p.Meta["mscclpp.dialect"])
			}
		})
	}
}
