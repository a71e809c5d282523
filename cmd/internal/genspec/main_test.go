package main

import (
	"archive/zip"
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/runtime/speckernels"
)

func archiveOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for n, c := range files {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(c))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCompare: -check names every entry that differs, is missing from the
// file or is in the file only, and nothing for equal archives (whatever
// their order); a file that is not a zip is reported.
func TestCompare(t *testing.T) {
	file := archiveOf(t, map[string]string{"index.json": "{}", "a/r0-float32.ptx": "x", "a/r1-float32.ptx": "y", "old.ptx": "z"})
	built := archiveOf(t, map[string]string{"index.json": "{}", "a/r0-float32.ptx": "x2", "a/r1-float32.ptx": "y", "new.ptx": "w"})
	want := []string{"a/r0-float32.ptx: differs", "new.ptx: missing from the file", "old.ptx: in the file, not built"}
	if d := cmp.Diff(want, compare(file, built)); d != "" {
		t.Errorf("compare (-want +got):\n%s", d)
	}
	same := archiveOf(t, map[string]string{"a/r1-float32.ptx": "y", "index.json": "{}"})
	if d := compare(same, archiveOf(t, map[string]string{"index.json": "{}", "a/r1-float32.ptx": "y"})); len(d) != 0 {
		t.Errorf("equal archives: %v", d)
	}
	if d := compare([]byte("not a zip"), same); len(d) != 1 {
		t.Errorf("a file that is not a zip: %v", d)
	}
}

// TestArchiveInputsCurrent: the embedded archive was built from today's
// kernel sources, clang flags and translation units (no clang needed): a
// kernel source changed without go generate ./runtime/speckernels fails
// here, in go test ./..., not only in .ci/run's -check.
func TestArchiveInputsCurrent(t *testing.T) {
	idx, err := speckernels.EmbeddedIndex()
	if err != nil {
		t.Fatal(err)
	}
	all, err := tables()
	if err != nil {
		t.Fatal(err)
	}
	want, err := inputs(all)
	if err != nil {
		t.Fatal(err)
	}
	if idx.Inputs != want {
		t.Errorf("runtime/speckernels/kernels.zip was built from other inputs (%q) than today's (%q): run go generate ./runtime/speckernels", idx.Inputs, want)
	}
}
