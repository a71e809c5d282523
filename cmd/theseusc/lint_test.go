package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/diag"
)

func TestMain(m *testing.M) {
	// The selection context's valid_after and the printed cut are read in
	// local time; pin it so that goldens do not depend on the machine.
	time.Local = time.UTC
	os.Exit(m.Run())
}

// TestLintBad lints every testdata/bad/*.json and checks that the first
// error carries the code and line:col of its .expect file ("CODE L:C").
func TestLintBad(t *testing.T) {
	files := glob(t, filepath.Join(badDir, "*.json"))
	if len(files) == 0 {
		t.Fatal("no testdata/bad files")
	}
	codes := map[string]string{} // each bad case has its own code
	for _, f := range files {
		exp, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".expect")
		if err != nil {
			t.Fatal(err)
		}
		code, _, _ := strings.Cut(string(exp), " ")
		if other, dup := codes[code]; dup {
			t.Errorf("%s and %s expect the same code %s", other, f, code)
		}
		codes[code] = f
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			exp, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".expect")
			if err != nil {
				t.Fatal(err)
			}
			fields := strings.Fields(string(exp))
			if len(fields) != 2 {
				t.Fatalf("%s.expect: want \"CODE LINE:COL\", got %q", f, exp)
			}
			r := theseusc(t, "lint", "--json", f).want(t, cli.ExitFindings)
			var rep cli.Report
			if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
				t.Fatalf("lint --json: %v\n%s", err, r.out)
			}
			var first *diag.Diagnostic
			for i := range rep.Diagnostics {
				if rep.Diagnostics[i].Severity == diag.Error {
					first = &rep.Diagnostics[i]
					break
				}
			}
			if first == nil {
				t.Fatalf("no error reported:\n%s", r.out)
			}
			got := string(first.Code) + " " + strings.TrimPrefix(first.Where(), f+":")
			if want := fields[0] + " " + fields[1]; got != want {
				t.Errorf("first error %q, want %q (%s)", got, want, first)
			}
			if first.File != f || first.Hint == "" {
				t.Errorf("diagnostic without file or hint: %+v", first)
			}
			// The text form prints the same diagnostic as its first line.
			txt := theseusc(t, "lint", f).want(t, cli.ExitFindings)
			if !strings.HasPrefix(txt.out, first.String()+"\n") {
				t.Errorf("text output does not start with %q:\n%s", first.String(), txt.out)
			}
			if !strings.Contains(txt.err, "lint: ") {
				t.Errorf("no summary on stderr: %q", txt.err)
			}
		})
	}
}

// TestLintBadGolden pins the whole text and JSON output of lint on every
// bad file.
func TestLintBadGolden(t *testing.T) {
	files := glob(t, filepath.Join(badDir, "*.json"))
	r := theseusc(t, append([]string{"lint"}, files...)...).want(t, cli.ExitFindings)
	golden(t, "lint_bad.txt", r.out)
	j := theseusc(t, append([]string{"lint", "--json"}, files...)...).want(t, cli.ExitFindings)
	golden(t, "lint_bad.json", j.out)
	if r.err != j.err {
		t.Errorf("stderr differs between text and JSON: %q vs %q", r.err, j.err)
	}
}

// TestLintExamples: every hand-written example is clean.
func TestLintExamples(t *testing.T) {
	files := glob(t, filepath.Join(examplesDir, "*.json"))
	if len(files) < 4 {
		t.Fatalf("only %d examples", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := theseusc(t, "lint", f).want(t, cli.ExitOK)
			if r.out != "" || r.err != "" {
				t.Errorf("clean example printed something:\nstdout: %s\nstderr: %s", r.out, r.err)
			}
		})
	}
	r := theseusc(t, append([]string{"lint", "--json"}, files...)...).want(t, cli.ExitOK)
	var rep cli.Report
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Files) != len(files) || rep.Errors != 0 || len(rep.Diagnostics) != 0 {
		t.Errorf("report: %+v", rep)
	}
	for _, fi := range rep.Files {
		if fi.Format != cli.KindTheseus {
			t.Errorf("%s detected as %v", fi.File, fi.Format)
		}
	}
}

// TestLintFormats lints the same schedule in every input format.
func TestLintFormats(t *testing.T) {
	dir := t.TempDir()
	tsb := filepath.Join(dir, "ring2.tsb")
	bare := filepath.Join(dir, "ring2_bare.tsb")
	theseusc(t, "compile", "testdata/ring2.xml", "-o", tsb).want(t, cli.ExitOK)
	theseusc(t, "compile", "--embed-source=false", "testdata/ring2.xml", "-o", bare).want(t, cli.ExitOK)
	js := filepath.Join(dir, "ring2.json")
	theseusc(t, "import", "testdata/ring2.xml", "-o", js).want(t, cli.ExitOK)
	for _, tc := range []struct {
		file string
		kind cli.Kind
		out  string
	}{
		{"testdata/ring2.xml", cli.KindMSCCL, ""},
		{"testdata/ring2.tir", cli.KindIRText, ""},
		{js, cli.KindTheseus, ""},
		{tsb, cli.KindBundle, ""},
		{bare, cli.KindBundle, bare + ": note[TS0009]: the bundle carries no source: only its tables were checked (hint: compile with --embed-source to lint the schedule too)\n"},
	} {
		r := theseusc(t, "lint", "--json", tc.file).want(t, cli.ExitOK)
		var rep cli.Report
		if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Files) != 1 || rep.Files[0].Format != tc.kind {
			t.Errorf("%s: files %+v, want format %v", tc.file, rep.Files, tc.kind)
		}
		if txt := theseusc(t, "lint", tc.file).want(t, cli.ExitOK); txt.out != tc.out {
			t.Errorf("%s: lint printed %q, want %q", tc.file, txt.out, tc.out)
		}
	}
	// Standard input, detected by content.
	data, err := os.ReadFile("testdata/ring2.xml")
	if err != nil {
		t.Fatal(err)
	}
	theseuscIn(t, string(data), "lint", "-").want(t, cli.ExitOK)
}

// TestLintCorruptBundle: a bundle with a flipped byte is an error at the
// file, not a crash.
func TestLintCorruptBundle(t *testing.T) {
	dir := t.TempDir()
	tsb := filepath.Join(dir, "ring2.tsb")
	theseusc(t, "compile", "testdata/ring2.xml", "-o", tsb).want(t, cli.ExitOK)
	data, err := os.ReadFile(tsb)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(tsb, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := theseusc(t, "lint", tsb).want(t, cli.ExitFindings)
	if !strings.HasPrefix(r.out, tsb+": error[TS0001]: bundle: ") {
		t.Errorf("lint of a corrupt bundle: %q", r.out)
	}
}

// TestLintMaxErrors caps the errors of the report.
func TestLintMaxErrors(t *testing.T) {
	files := glob(t, filepath.Join(badDir, "*.json"))
	r := theseusc(t, append([]string{"lint", "--max-errors=2"}, files...)...).want(t, cli.ExitFindings)
	lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[2], "more error(s) not shown (--max-errors=2)") {
		t.Errorf("--max-errors=2 printed:\n%s", r.out)
	}
	j := theseusc(t, append([]string{"lint", "--json", "--max-errors=2"}, files...)...).want(t, cli.ExitFindings)
	var rep cli.Report
	if err := json.Unmarshal([]byte(j.out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 2 || rep.Dropped != 6 || len(rep.Files) != len(files) {
		t.Errorf("report: errors %d dropped %d files %d", rep.Errors, rep.Dropped, len(rep.Files))
	}
	theseusc(t, "lint", "--max-errors=-1", files[0]).want(t, cli.ExitUsage)
}
