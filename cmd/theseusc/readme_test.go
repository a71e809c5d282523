package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

// TestREADMECommands runs README.md's theseusc commands as written, from
// the repository root (a fresh clone has nothing else): each must exit 0,
// except the lint of testdata/bad/race.json, which finds the race (1).
// What they write goes to /tmp, here a temporary directory; nothing is
// written into the repository. sim runs one datatype and reduction of its
// matrix (the whole matrix, 1,200 cases, is TestSimExamples' with
// -sim.full).
func TestREADMECommands(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Chdir(root)
	before, _ := os.ReadDir(root)
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "go run ./cmd/theseusc ")
		if !ok {
			continue
		}
		line, _, _ = strings.Cut(line, "#")
		var args []string
		for _, f := range strings.Fields(line) {
			f = strings.ReplaceAll(f, "/tmp/", tmp+"/")
			if strings.Contains(f, "*") {
				m, _ := filepath.Glob(f)
				if len(m) == 0 {
					t.Fatalf("%q matches nothing", f)
				}
				args = append(args, m...)
				continue
			}
			args = append(args, f)
		}
		if args[0] == "sim" {
			args = append(args, "--dtype", "float32", "--redop", "sum")
		}
		want := cli.ExitOK
		if args[0] == "lint" && strings.Contains(line, "testdata/bad/race.json") {
			want = cli.ExitFindings
		}
		r := theseusc(t, args...)
		if r.code != want {
			t.Errorf("theseusc %s: exit %d, want %d\n%s", line, r.code, want, clip(r.err))
		}
		n++
	}
	if n < 8 {
		t.Fatalf("found %d theseusc commands in README.md", n)
	}
	after, _ := os.ReadDir(root)
	if len(after) != len(before) {
		t.Errorf("the commands left files in the repository root: %d entries before, %d after", len(before), len(after))
	}
}
