package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/specialize"
	"github.com/theseus-ccl/theseus/ir"
)

// TestCompileSpecialize: compile --specialize puts one checked kernel per
// rank and datatype into the bundle; a schedule past the limits is a
// finding, and the specialize flags alone a usage error.
func TestCompileSpecialize(t *testing.T) {
	dir := t.TempDir()
	ll := filepath.Join(dir, "ll.json")
	theseusc(t, "gen", "oneshot", "--coll", "allreduce", "--nranks", "2", "--protocol", "ll", "-o", ll).want(t, cli.ExitOK)
	out := filepath.Join(dir, "ll.tsb")
	theseusc(t, "compile", ll, "--specialize-dtypes", "float32", "-o", out).want(t, cli.ExitUsage)
	if _, err := exec.LookPath("clang-14"); err != nil {
		t.Skip("clang-14 is not installed (.ci/run installs it): compile --specialize cannot run")
	}
	r := theseusc(t, "compile", ll, "--specialize", "--specialize-dtypes", "float32", "-o", out).want(t, cli.ExitOK)
	if !strings.Contains(r.err, "specialised 2 ranks x 1 datatypes") {
		t.Errorf("stderr: %s", r.err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Kernels) != 2 {
		t.Fatalf("%d kernels, want 2", len(b.Kernels))
	}
	for r, k := range b.Kernels {
		if k.Rank != r || k.DataType != ir.Float32 {
			t.Errorf("kernel %d: rank %d %v", r, k.Rank, k.DataType)
		}
		if err := specialize.Check(k.PTX); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	big := filepath.Join(dir, "ring.json")
	theseusc(t, "gen", "ring", "--coll", "allreduce", "--nranks", "2", "--channels", "16", "-o", big).want(t, cli.ExitOK)
	r = theseusc(t, "compile", big, "--specialize", "--specialize-dtypes", "float32", "-o", filepath.Join(dir, "ring.tsb")).want(t, cli.ExitFindings)
	if !strings.Contains(r.err, "too large") {
		t.Errorf("a 16-channel ring: %s", r.err)
	}
}
