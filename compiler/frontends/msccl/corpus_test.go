package msccl

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
)

// TestCorpus imports every MSCCL XML file of the shared corpus and compares
// its summary with testdata/golden/<file>.json (go test -update rewrites
// them). Every file must import without errors, or be rejected with the
// diagnostics its golden file lists.
func TestCorpus(t *testing.T) {
	dir := filepath.Join(importtest.CorpusDir(t), "msccl-xml")
	files, err := filepath.Glob(filepath.Join(dir, "*.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in %s: %v", dir, err)
	}
	sort.Strings(files)
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, ds := Parse(base, data)
			got := importtest.Summarize(p, ds)
			got.Meta = nil // the MSCCL goldens do not pin Meta
			golden := filepath.Join("testdata", "golden", strings.TrimSuffix(base, ".xml")+".json")
			importtest.Golden(t, golden, got)
		})
	}
}
