package diag_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
)

var update = flag.Bool("update", false, "rewrite docs/diagnostics.md from diag.Codes")

const docPath = "../docs/diagnostics.md"

// groups name the code ranges, by their first two digits.
var groups = []struct{ prefix, title, text string }{
	{"TS00", "Frontends (parse and import)", "Reported by the schedule JSON parser, the MSCCL XML and MSCCL++ importers and the textual IR parser; `compiler/verify` reports TS0003, TS0005 and TS0012 for the same defects in a program built in memory."},
	{"TS01", "Structure", "Reported by `compiler/verify` (and by the passes that need the same facts): indices, chunk ranges, channel pairing, limits. See docs/verification.md."},
	{"TS02", "Synchronisation, ordering and semantics", "Reported by `compiler/verify`: transfer pairing, semaphores, dependencies, deadlock, races, the collective's postcondition; TS0212 by the policy type checker."},
	{"TS03", "Policy expressions", "Reported by the policy-expression frontend (parser, type checker, constant folder)."},
}

// generate renders docs/diagnostics.md from diag.Codes.
func generate() string {
	var b strings.Builder
	b.WriteString(`# Diagnostic codes

<!-- Generated from diag/codes.go by diag/doc_test.go; do not edit.
     Regenerate with: go test ./diag -run TestDiagnosticsDoc -update -->

Every error, warning and note of the schedule compiler carries one of these stable codes, a
position (file:line:col), the rank / threadblock / step it is about, a message and a one-line
hint. A code never changes meaning once released. ` + "`theseusc lint --json`" + ` prints the same fields.

| severity | meaning |
|---|---|
| error | the schedule must not be published or run |
| warning | the schedule runs, but something deserves attention (for example TS0206, TS0211) |
| note | information, such as how many diagnostics a limit left out |
`)
	for _, g := range groups {
		fmt.Fprintf(&b, "\n## %s (%sxx)\n\n%s\n\n| code | meaning | default hint |\n|---|---|---|\n", g.title, g.prefix, g.text)
		for _, ci := range diag.Codes {
			if strings.HasPrefix(string(ci.Code), g.prefix) {
				fmt.Fprintf(&b, "| %s | %s | %s |\n", ci.Code, cell(ci.Summary), cell(ci.Hint))
			}
		}
	}
	return b.String()
}

func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// TestDiagnosticsDoc fails when docs/diagnostics.md is not what diag.Codes
// generates (run with -update to regenerate it).
func TestDiagnosticsDoc(t *testing.T) {
	want := generate()
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatalf("%v (run go test ./diag -run TestDiagnosticsDoc -update)", err)
	}
	if d := cmp.Diff(want, string(got)); d != "" {
		t.Errorf("%s is stale; run go test ./diag -run TestDiagnosticsDoc -update\n(-want +got):\n%s", filepath.Clean(docPath), d)
	}
}

// TestCodesTable checks diag.Codes: unique, in code order, each in a
// documented group, each with a summary; Lookup finds each.
func TestCodesTable(t *testing.T) {
	for i, ci := range diag.Codes {
		if i > 0 && diag.Codes[i-1].Code >= ci.Code {
			t.Errorf("%s follows %s: Codes must be unique and in code order", ci.Code, diag.Codes[i-1].Code)
		}
		if ci.Summary == "" {
			t.Errorf("%s has no summary", ci.Code)
		}
		grouped := false
		for _, g := range groups {
			grouped = grouped || strings.HasPrefix(string(ci.Code), g.prefix)
		}
		if !grouped {
			t.Errorf("%s is in no group of docs/diagnostics.md", ci.Code)
		}
		if got, ok := diag.Lookup(ci.Code); !ok || got != ci {
			t.Errorf("Lookup(%s) = %v, %v", ci.Code, got, ok)
		}
	}
}
