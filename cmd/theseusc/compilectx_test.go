package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// TestCompileContext: compile --context writes both programs into every
// schedule entry of a hand-written context, keeps every line in place, and
// --check tells a context whose programs are missing or stale from one
// whose programs are current; lint accepts the result.
func TestCompileContext(t *testing.T) {
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	sf := filepath.Join(dir, manifest.ScheduleManifest)
	before, _ := os.ReadFile(sf)
	if r := theseuscIn(t, "", "compile", "--context", dir, "--check"); r.code != cli.ExitFindings || !strings.Contains(r.err, "missing or stale") {
		t.Fatalf("--check before: exit %d\n%s", r.code, r.err)
	}
	if r := theseuscIn(t, "", "compile", "--context", dir); r.code != cli.ExitOK || !strings.Contains(r.err, "precompiled") {
		t.Fatalf("compile --context: exit %d\n%s", r.code, r.err)
	}
	after, _ := os.ReadFile(sf)
	bl, al := strings.Split(string(before), "\n"), strings.Split(string(after), "\n")
	if len(bl) != len(al) {
		t.Fatalf("%d lines became %d", len(bl), len(al))
	}
	for i := range bl {
		if bl[i] == "" {
			continue
		}
		if !strings.HasPrefix(al[i], strings.TrimSuffix(bl[i], "}")) || !strings.Contains(al[i], `"usable_program":"`) || !strings.Contains(al[i], `"preference_program":"`) {
			t.Fatalf("line %d:\n%s\nbecame\n%s", i+1, bl[i], al[i])
		}
	}
	if r := theseuscIn(t, "", "compile", "--context", dir, "--check"); r.code != cli.ExitOK {
		t.Fatalf("--check after: exit %d\n%s", r.code, r.err)
	}
	if r := theseuscIn(t, "", "lint", dir); r.code != cli.ExitOK {
		t.Fatalf("lint of the compiled context: exit %d\n%s%s", r.code, r.out, r.err)
	}
	// Editing an expression makes its program stale.
	edited := strings.Replace(string(after), `"preference":"`, `"preference":"1 + `, 1)
	if edited == string(after) {
		t.Fatal("no preference to edit in the default context")
	}
	os.WriteFile(sf, []byte(edited), 0o644)
	if r := theseuscIn(t, "", "compile", "--context", dir, "--check"); r.code != cli.ExitFindings || !strings.Contains(r.err, "was compiled from") {
		t.Fatalf("--check after an edit: exit %d\n%s", r.code, r.err)
	}
	// An expression with an error: reported, nothing written.
	os.WriteFile(sf, []byte(edited+`{"file":"x.json","collective":"allreduce","nranks":2,"usable":"nosuch"}`+"\n"), 0o644)
	broken, _ := os.ReadFile(sf)
	if r := theseuscIn(t, "", "compile", "--context", dir); r.code != cli.ExitFindings || !strings.Contains(r.err, "nothing written") {
		t.Fatalf("compile with an error: exit %d\n%s", r.code, r.err)
	}
	if now, _ := os.ReadFile(sf); string(now) != string(broken) {
		t.Fatal("the manifest was written despite an error")
	}
	if r := theseuscIn(t, "", "compile", "--context", dir, "x.json"); r.code != cli.ExitUsage {
		t.Fatalf("--context with a FILE: exit %d", r.code)
	}
}
