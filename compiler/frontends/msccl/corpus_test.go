package msccl

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
)

// TestCorpus imports every MSCCL XML file of the shared corpus and compares
// its summary with testdata/golden/<file>.json (go test -update rewrites
// them). Every file must import without errors, or be rejected with the
// diagnostics its golden file lists.
func TestCorpus(t *testing.T) {
	importtest.Corpus(t, importtest.CorpusTest{
		Parse:   Parse,
		Pattern: filepath.Join("msccl-xml", "*.xml"),
		Golden: func(path string) string {
			return filepath.Join("testdata", "golden", strings.TrimSuffix(filepath.Base(path), ".xml")+".json")
		},
		Adjust: func(s *importtest.Summary) { s.Meta = nil }, // the MSCCL goldens do not pin Meta
	})
}
