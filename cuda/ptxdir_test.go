package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// TestPTXDir: THESEUS_PTX_DIR (docs/env.md) loads
// <dir>/theseus_<datatype>.ptx instead of the embedded module; a datatype
// missing there is an error that names the variable and the file it
// looked for. No GPU needed: modulePTX only reads files.
func TestPTXDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "theseus_float32.ptx"), []byte("// variant\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	restore := env.SetLookupForTest(func(k string) (string, bool) {
		if k == "THESEUS_PTX_DIR" {
			return dir, true
		}
		return "", false
	})
	defer restore()
	got, err := modulePTX(moduleExec, ir.Float32)
	if err != nil || string(got) != "// variant\n" {
		t.Errorf("float32: %q, %v; want the variant", got, err)
	}
	_, err = modulePTX(moduleExec, ir.Bfloat16)
	want := filepath.Join(dir, "theseus_bfloat16.ptx")
	if err == nil || !strings.Contains(err.Error(), "THESEUS_PTX_DIR") || !strings.Contains(err.Error(), want) {
		t.Errorf("bfloat16: error %v, want one naming THESEUS_PTX_DIR and %s", err, want)
	}
}
