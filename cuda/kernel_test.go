package cuda

import (
	"bytes"
	"io/fs"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// TestKernelModules: one embedded PTX module per datatype, each with the
// kernel's entry point, all different, and nothing else embedded (no GPU
// needed).
func TestKernelModules(t *testing.T) {
	seen := map[string]ir.DataType{}
	for _, dt := range ir.AllDataTypes() {
		ptx, err := PTX(dt)
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if !bytes.Contains(ptx, []byte(".entry "+KernelName+"(")) || !bytes.Contains(ptx, []byte(".target sm_80")) {
			t.Errorf("%v: no sm_80 entry %s", dt, KernelName)
		}
		if prev, dup := seen[string(ptx)]; dup {
			t.Errorf("%v and %v have the same module", prev, dt)
		}
		seen[string(ptx)] = dt
	}
	files, err := fs.Glob(ptxFS, "kernel/ptx/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != int(ir.NumDataTypes) {
		t.Errorf("%d embedded modules %v, want %d", len(files), files, ir.NumDataTypes)
	}
	if _, err := PTX(ir.DataType(ir.NumDataTypes)); err == nil {
		t.Error("a module for an invalid datatype")
	}
}
