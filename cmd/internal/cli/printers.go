package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/theseus-ccl/theseus/compiler/diff"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

// This file holds every printer of the tools, one registry per kind of
// result, each with a text and a JSON format (golden tests in
// printers_test.go and in cmd/theseusc).

// writeJSON writes v as indented JSON (two spaces) and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Report is what a check of a set of files found: lint's result.
type Report struct {
	Files       []FileInfo        `json:"files"`
	Diagnostics []diag.Diagnostic `json:"diagnostics"`
	Errors      int               `json:"errors"`
	Warnings    int               `json:"warnings"`
	Notes       int               `json:"notes"`
	// Dropped counts the errors left out because of MaxErrors.
	Dropped   int `json:"dropped"`
	MaxErrors int `json:"max_errors,omitempty"`
}

// FileInfo is one checked file.
type FileInfo struct {
	File     string `json:"file"`
	Format   Kind   `json:"format"`
	Errors   int    `json:"errors"`
	Warnings int    `json:"warnings"`
}

// Add appends a file's diagnostics, keeping at most MaxErrors errors in the
// whole report (0: no cap).
func (r *Report) Add(file string, k Kind, ds []diag.Diagnostic) {
	fi := FileInfo{File: file, Format: k}
	for _, d := range ds {
		switch d.Severity {
		case diag.Error:
			fi.Errors++
			if r.MaxErrors > 0 && r.Errors >= r.MaxErrors {
				r.Dropped++
				continue
			}
			r.Errors++
		case diag.Warning:
			fi.Warnings++
			r.Warnings++
		default:
			r.Notes++
		}
		r.Diagnostics = append(r.Diagnostics, d)
	}
	r.Files = append(r.Files, fi)
}

// DiagnosticPrinters prints a Report.
//
//   - text: one line per diagnostic (diag.Diagnostic.String:
//     "file:line:col: severity[code]: rank r tb t step s: msg (hint: ...)"),
//     then, when errors were left out, one line saying how many;
//   - json: the Report object.
var DiagnosticPrinters = NewPrinters[*Report]().
	Register(FormatText, "file:line:col: severity[code]: ... per line", func(w io.Writer, r *Report) error {
		var b strings.Builder
		for _, d := range r.Diagnostics {
			b.WriteString(d.String())
			b.WriteByte('\n')
		}
		if r.Dropped > 0 {
			fmt.Fprintf(&b, "%d more error(s) not shown (--max-errors=%d)\n", r.Dropped, r.MaxErrors)
		}
		_, err := io.WriteString(w, b.String())
		return err
	}).
	Register(FormatJSON, "one JSON object", func(w io.Writer, r *Report) error {
		c := *r
		if c.Files == nil {
			c.Files = []FileInfo{}
		}
		if c.Diagnostics == nil {
			c.Diagnostics = []diag.Diagnostic{}
		}
		return writeJSON(w, &c)
	})

// DiffPrinters prints a schedule delta (compiler/diff): text is
// Delta.WriteText, json Delta.WriteJSON; both hold the same content.
var DiffPrinters = NewPrinters[*diff.Delta]().
	Register(FormatText, "kept/added/removed per resource class", func(w io.Writer, d *diff.Delta) error { return d.WriteText(w) }).
	Register(FormatJSON, "the delta with its cost", func(w io.Writer, d *diff.Delta) error { return d.WriteJSON(w) })

// ExplainPrinters prints a selection explanation (runtime/selector):
// text is Explanation.String, json the struct with its tags.
var ExplainPrinters = NewPrinters[*selector.Explanation]().
	Register(FormatText, "chosen schedule, attributes, one row per candidate", func(w io.Writer, e *selector.Explanation) error {
		s := e.String()
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		_, err := io.WriteString(w, s)
		return err
	}).
	Register(FormatJSON, "the explanation object", func(w io.Writer, e *selector.Explanation) error { return writeJSON(w, e) })

// SimReport is the result of simulating one schedule.
type SimReport struct {
	File  string
	Name  string
	Cases []interp.CaseResult
}

// Failed counts the cases with wrong elements or an error.
func (r *SimReport) Failed() int {
	n := 0
	for _, c := range r.Cases {
		if !c.OK() {
			n++
		}
	}
	return n
}

type simCaseJSON struct {
	Collective string `json:"collective"`
	DataType   string `json:"datatype"`
	RedOp      string `json:"redop,omitempty"`
	InPlace    bool   `json:"inplace"`
	Count      int64  `json:"count"`
	Slices     int64  `json:"slices"`
	Protocol   string `json:"protocol"`
	PacketType string `json:"packet_type,omitempty"`
	Root       int    `json:"root"`
	Checked    int64  `json:"checked"`
	Wrong      int64  `json:"wrong"`
	ElapsedNS  int64  `json:"elapsed_ns"`
	OK         bool   `json:"ok"`
	Error      string `json:"error,omitempty"`
}

// SimPrinters prints a SimReport.
//
//   - text: one line per case (interp.CaseResult.String: data type, redop,
//     arrangement, count, slices, packet type, root, #wrong, time);
//   - json: {"file", "name", "cases": [...], "passed", "failed"}.
var SimPrinters = NewPrinters[*SimReport]().
	Register(FormatText, "one line per case", func(w io.Writer, r *SimReport) error {
		var b strings.Builder
		for _, c := range r.Cases {
			b.WriteString(c.String())
			b.WriteByte('\n')
		}
		_, err := io.WriteString(w, b.String())
		return err
	}).
	Register(FormatJSON, "one JSON object with every case", func(w io.Writer, r *SimReport) error {
		out := struct {
			File   string        `json:"file"`
			Name   string        `json:"name"`
			Cases  []simCaseJSON `json:"cases"`
			Passed int           `json:"passed"`
			Failed int           `json:"failed"`
		}{File: r.File, Name: r.Name, Cases: []simCaseJSON{}}
		for _, c := range r.Cases {
			j := simCaseJSON{Collective: c.Collective.String(), DataType: c.DataType.String(), InPlace: c.InPlace,
				Count: c.Count, Slices: c.Slices, Protocol: c.Protocol.String(), Root: c.Root,
				Checked: c.Checked, Wrong: c.Wrong, ElapsedNS: c.Elapsed.Nanoseconds(), OK: c.OK()}
			if c.Reduces {
				j.RedOp = c.RedOp.String()
			}
			if c.Protocol == ir.LL {
				j.PacketType = c.PacketType.String()
			}
			if c.Err != nil {
				j.Error = c.Err.Error()
			}
			out.Cases = append(out.Cases, j)
		}
		out.Failed = r.Failed()
		out.Passed = len(r.Cases) - out.Failed
		return writeJSON(w, &out)
	})

type algoJSON struct {
	Name        string   `json:"name"`
	Aliases     []string `json:"aliases"`
	Collectives []string `json:"collectives"`
	Level       string   `json:"level"`
	UsesOrder   bool     `json:"uses_order"`
	UsesAvoid   bool     `json:"uses_avoid"`
	Summary     string   `json:"summary"`
	Constraints string   `json:"constraints,omitempty"`
}

// AlgorithmPrinters prints the generator list (compiler/gen.Algorithms):
// text is a table (name, aliases, collectives, level, summary), json an
// array of objects.
var AlgorithmPrinters = NewPrinters[[]gen.Algorithm]().
	Register(FormatText, "a table", func(w io.Writer, as []gen.Algorithm) error {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "NAME\tALIASES\tCOLLECTIVES\tLEVEL\tSUMMARY\n")
		for _, a := range as {
			al := strings.Join(a.Aliases, ",")
			if al == "" {
				al = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Name, al, collNames(a), a.Level, a.Summary)
		}
		return tw.Flush()
	}).
	Register(FormatJSON, "an array of objects", func(w io.Writer, as []gen.Algorithm) error {
		out := []algoJSON{}
		for _, a := range as {
			j := algoJSON{Name: a.Name, Aliases: append([]string{}, a.Aliases...), Level: a.Level.String(),
				UsesOrder: a.UsesOrder, UsesAvoid: a.UsesAvoid, Summary: a.Summary, Constraints: a.Constraints,
				Collectives: []string{}}
			for _, c := range a.Collectives {
				j.Collectives = append(j.Collectives, c.String())
			}
			out = append(out, j)
		}
		return writeJSON(w, out)
	})

func collNames(a gen.Algorithm) string {
	var s []string
	for _, c := range a.Collectives {
		s = append(s, c.String())
	}
	return strings.Join(s, ",")
}
