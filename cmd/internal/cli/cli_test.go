package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/diag"
)

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       Kind
	}{
		{"a.json", `{"version": 1, "name": "x"}`, KindTheseus},
		{"a.json", `{"name": "x", "gpus": [], "version": 1}`, KindTheseus},
		{"a.json", `{"name": "x", "collective": "allreduce", "gpus": [{"id": 0}]}`, KindMSCCLPP},
		{"a.json", `{"name": "x"}`, KindTheseus},                             // no version, no gpus: Theseus, whose parser says what is missing
		{"a.json", `{"name": "x", "gpus": [{"id": 0`, KindMSCCLPP},           // truncated plan
		{"a.json", `{"version": 1, "ranks": [{"rank": 0`, KindTheseus},       // truncated Theseus file
		{"a.json", `{"ranks": [{"rank": 0, "x": "\"version\""`, KindTheseus}, // undecidable: raw bytes
		{"a.JSON", `[1, 2]`, KindTheseus},
		{"a.json", ``, KindTheseus},
		{"a.xml", `anything`, KindMSCCL},
		{"a.tir", `{`, KindIRText},
		{"a.tsb", `x`, KindBundle},
		{"-", bundle.Magic + "...", KindBundle},
		{"-", "  \n<algo name=\"x\">", KindMSCCL},
		{"-", "\ufeff{\"version\": 1}", KindTheseus},
		{"-", `{"gpus": []}`, KindMSCCLPP},
		{"-", "# comment\nprogram \"x\" allreduce", KindIRText},
		{"noext", "program \"x\"", KindIRText},
		{"-", "", KindUnknown},
		{"-", "\x00\x01", KindUnknown},
		{"-", "   ", KindUnknown},
	} {
		if got := Detect(tc.name, []byte(tc.data)); got != tc.want {
			t.Errorf("Detect(%q, %q) = %v, want %v", tc.name, tc.data, got, tc.want)
		}
	}
}

func TestKindText(t *testing.T) {
	for k := KindUnknown; k <= KindContext; k++ {
		b, _ := k.MarshalText()
		var back Kind
		if err := back.UnmarshalText(b); err != nil || back != k {
			t.Errorf("%v: round trip gives %v, %v", k, back, err)
		}
	}
	var k Kind
	if err := k.UnmarshalText([]byte("yaml")); err == nil {
		t.Error("unknown kind accepted")
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load("no/such/file.json", nil); CodeOf(err) != ExitUsage {
		t.Errorf("missing file: %v (%v)", err, CodeOf(err))
	}
	if _, err := Load("-", nil); CodeOf(err) != ExitUsage {
		t.Errorf("no stdin: %v", err)
	}
	if _, err := Load("-", strings.NewReader("\x00")); CodeOf(err) != ExitUsage || !strings.Contains(err.Error(), "cannot tell the format") {
		t.Errorf("binary stdin: %v", err)
	}
	s, err := Load("-", strings.NewReader(bundle.Magic+"\x02"))
	if err != nil || s.Kind != KindBundle || s.Bundle != nil || len(s.Diags) != 1 || s.Diags[0].Code != diag.Syntax {
		t.Errorf("truncated bundle: %+v, %v", s, err)
	}
}

func TestExitCodes(t *testing.T) {
	if CodeOf(nil) != ExitOK || CodeOf(errors.New("x")) != ExitInternal {
		t.Error("nil or plain error")
	}
	wrapped := fmt.Errorf("context: %w", Usagef("bad %s", "flag"))
	if CodeOf(wrapped) != ExitUsage || !strings.Contains(wrapped.Error(), "bad flag") {
		t.Errorf("wrapped usage error: %v", wrapped)
	}
	if CodeOf(Findings()) != ExitFindings || CodeOf(Findingsf("x")) != ExitFindings || CodeOf(Internal(io.EOF)) != ExitInternal {
		t.Error("constructors")
	}
	if Usage(nil) != nil || Internal(nil) != nil {
		t.Error("nil must stay nil")
	}
	if !errors.Is(Internal(io.EOF), io.EOF) {
		t.Error("Internal does not unwrap")
	}
	for c, want := range map[ExitCode]string{ExitOK: "ok", ExitFindings: "findings", ExitUsage: "usage error", ExitInternal: "internal failure", 9: "exit code 9"} {
		if c.String() != want {
			t.Errorf("%d: %q", int(c), c.String())
		}
	}
}

// TestExecute checks how errors become exit codes and messages.
func TestExecute(t *testing.T) {
	newRoot := func(runErr error) *cobra.Command {
		root := &cobra.Command{Use: "tool"}
		sub := &cobra.Command{Use: "sub", Args: ExactArgs(1, "one FILE"), RunE: RunE(func(*cobra.Command, []string) error { return runErr })}
		sub.Flags().Int("n", 0, "")
		root.AddCommand(sub)
		return root
	}
	for _, tc := range []struct {
		err  error
		args []string
		code ExitCode
		msg  string
	}{
		{nil, []string{"sub", "x"}, ExitOK, ""},
		{errors.New("boom"), []string{"sub", "x"}, ExitInternal, "tool sub: boom\n"},
		{Findings(), []string{"sub", "x"}, ExitFindings, ""},
		{Findingsf("2 wrong"), []string{"sub", "x"}, ExitFindings, "tool sub: 2 wrong\n"},
		{Usagef("bad"), []string{"sub", "x"}, ExitUsage, "tool sub: bad\nRun 'tool sub --help' for usage.\n"},
		{nil, []string{"sub"}, ExitUsage, "tool sub: want one FILE, got 0 argument(s)\nRun 'tool sub --help' for usage.\n"},
		{nil, []string{"sub", "--n=x", "a"}, ExitUsage, "tool sub: invalid argument \"x\" for \"--n\" flag: strconv.ParseInt: parsing \"x\": invalid syntax\nRun 'tool sub --help' for usage.\n"},
		{nil, []string{"nope"}, ExitUsage, "tool: unknown command \"nope\" for \"tool\"\nRun 'tool --help' for usage.\n"},
	} {
		var out, errb bytes.Buffer
		code := Execute(newRoot(tc.err), tc.args, Streams{Out: &out, Err: &errb})
		if code != tc.code || errb.String() != tc.msg {
			t.Errorf("%v: exit %d, stderr %q; want %d, %q", tc.args, code, errb.String(), tc.code, tc.msg)
		}
	}
}

func TestPrinters(t *testing.T) {
	reg := NewPrinters[int]().
		Register("a", "first", func(w io.Writer, v int) error { _, err := fmt.Fprintf(w, "a%d", v); return err }).
		Register("b", "second", func(w io.Writer, v int) error { _, err := fmt.Fprintf(w, "b%d", v); return err })
	if d := cmp.Diff([]string{"a", "b"}, reg.Names()); d != "" {
		t.Error(d)
	}
	if reg.Help() != "a (first), b (second)" {
		t.Errorf("help %q", reg.Help())
	}
	if _, err := reg.Lookup("c"); CodeOf(err) != ExitUsage || !strings.Contains(err.Error(), "formats: a, b") {
		t.Errorf("lookup c: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a name twice did not panic")
		}
	}()
	reg.Register("a", "", nil)
}

func TestOutputFlags(t *testing.T) {
	for _, tc := range []struct {
		format string
		json   bool
		want   string
		code   ExitCode
	}{
		{"text", false, "text", ExitOK},
		{"json", false, "json", ExitOK},
		{"text", true, "json", ExitOK},
		{"json", true, "json", ExitOK},
		{"yaml", true, "", ExitUsage},
	} {
		o := OutputFlags{Format: tc.format, JSON: tc.json}
		got, err := o.Name()
		if got != tc.want || CodeOf(err) != tc.code {
			t.Errorf("%+v: %q, %v", o, got, err)
		}
	}
	cmd := &cobra.Command{Use: "x"}
	o := AddOutputFlags(cmd, DiagnosticPrinters)
	if err := cmd.ParseFlags([]string{"--json"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(o, DiagnosticPrinters); err != nil || !o.JSON {
		t.Errorf("--json: %v", err)
	}
}

func d(code diag.Code, sev diag.Severity, line int) diag.Diagnostic {
	return diag.Diagnostic{Code: code, Severity: sev, File: "f", Line: line, Col: 1, Rank: -1, TB: -1, Step: -1, Msg: "m"}
}

func TestReport(t *testing.T) {
	r := &Report{MaxErrors: 2}
	r.Add("f", KindTheseus, []diag.Diagnostic{d("TS0001", diag.Error, 1), d("TS0002", diag.Warning, 2), d("TS0003", diag.Error, 3)})
	r.Add("g", KindMSCCL, []diag.Diagnostic{d("TS0004", diag.Error, 4), d("TS0009", diag.Note, 5)})
	if r.Errors != 2 || r.Dropped != 1 || r.Warnings != 1 || r.Notes != 1 || len(r.Diagnostics) != 4 {
		t.Errorf("report %+v", r)
	}
	want := []FileInfo{{"f", KindTheseus, 2, 1}, {"g", KindMSCCL, 1, 0}}
	if diff := cmp.Diff(want, r.Files); diff != "" {
		t.Error(diff)
	}
	var b strings.Builder
	if err := DiagnosticPrinters.m[FormatText](&b, r); err != nil {
		t.Fatal(err)
	}
	wantText := "f:1:1: error[TS0001]: m\nf:2:1: warning[TS0002]: m\nf:3:1: error[TS0003]: m\nf:5:1: note[TS0009]: m\n1 more error(s) not shown (--max-errors=2)\n"
	if b.String() != wantText {
		t.Errorf("text:\n%s", b.String())
	}
	b.Reset()
	if err := DiagnosticPrinters.m[FormatJSON](&b, &Report{}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"files\": [],\n  \"diagnostics\": [],\n  \"errors\": 0,\n  \"warnings\": 0,\n  \"notes\": 0,\n  \"dropped\": 0\n}\n"; b.String() != want {
		t.Errorf("empty JSON report:\n%s", b.String())
	}
}

func TestDedupe(t *testing.T) {
	in := []diag.Diagnostic{d("TS0002", diag.Warning, 2), d("TS0001", diag.Error, 1), d("TS0002", diag.Warning, 2)}
	got := Dedupe(in)
	want := []diag.Diagnostic{d("TS0001", diag.Error, 1), d("TS0002", diag.Warning, 2)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
	if in[0].Code != "TS0002" {
		t.Error("Dedupe changed its input")
	}
}
