package contexts

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rebuild examples/contexts/default from build_test.go")

// TestUpToDate rebuilds the default context in memory and compares it, file
// by file, with the embedded one. With -update it rewrites default/ instead.
func TestUpToDate(t *testing.T) {
	files, _, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.RemoveAll(Root); err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			dst := filepath.Join(Root, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %d files to %s; rebuild to embed them", len(files), Root)
		return
	}
	var want []string
	for name := range files {
		want = append(want, name)
	}
	sort.Strings(want)
	if d := cmp.Diff(want, Files()); d != "" {
		t.Fatalf("embedded files differ from the generator's (-generated +embedded); run go test ./examples/contexts -update:\n%s", d)
	}
	for _, name := range want {
		got, err := fs.ReadFile(Default(), name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(files[name]) {
			t.Errorf("%s is stale; run go test ./examples/contexts -update", name)
		}
	}
}

// TestDeterministic: building twice gives the same bytes, so -update is
// reproducible and TestUpToDate meaningful.
func TestDeterministic(t *testing.T) {
	a, _, err := build()
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := build()
	if err != nil {
		t.Fatal(err)
	}
	for name := range a {
		if string(a[name]) != string(b[name]) {
			t.Errorf("%s differs between two builds", name)
		}
	}
}
