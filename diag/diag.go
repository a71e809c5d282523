// Package diag holds the diagnostics that every frontend and pass of the
// schedule compiler reports: a stable code, a severity, a position
// (file:line:col), the rank/threadblock/step it concerns, a message and a
// one-line fix hint. Codes are listed once, in codes.go, and documented in
// docs/diagnostics.md.
package diag

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Severity orders diagnostics: errors fail lint and compilation, warnings
// do not.
type Severity uint8

const (
	Error Severity = iota
	Warning
	Note
)

func (s Severity) String() string {
	switch s {
	case Error:
		return "error"
	case Warning:
		return "warning"
	case Note:
		return "note"
	}
	return "unknown"
}

// MarshalJSON writes the severity as its name.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads the severity name.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var n string
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	switch n {
	case "error":
		*s = Error
	case "warning":
		*s = Warning
	case "note":
		*s = Note
	default:
		return fmt.Errorf("unknown severity %q", n)
	}
	return nil
}

// Diagnostic is one finding. Line and Col are 1-based; 0 means unknown.
// Rank, TB and Step are -1 when the finding is not about one of them.
type Diagnostic struct {
	Code     Code     `json:"code"`
	Severity Severity `json:"severity"`
	File     string   `json:"file,omitempty"`
	Line     int      `json:"line,omitempty"`
	Col      int      `json:"col,omitempty"`
	Rank     int      `json:"rank"`
	TB       int      `json:"tb"`
	Step     int      `json:"step"`
	Msg      string   `json:"message"`
	Hint     string   `json:"hint,omitempty"`
}

// Where formats file:line:col, omitting unknown parts.
func (d Diagnostic) Where() string {
	f := d.File
	if f == "" {
		f = "<input>"
	}
	if d.Line > 0 {
		if d.Col > 0 {
			return fmt.Sprintf("%s:%d:%d", f, d.Line, d.Col)
		}
		return fmt.Sprintf("%s:%d", f, d.Line)
	}
	return f
}

// Subject formats "rank R tb T step S", omitting unknown parts.
func (d Diagnostic) Subject() string {
	var parts []string
	if d.Rank >= 0 {
		parts = append(parts, fmt.Sprintf("rank %d", d.Rank))
	}
	if d.TB >= 0 {
		parts = append(parts, fmt.Sprintf("tb %d", d.TB))
	}
	if d.Step >= 0 {
		parts = append(parts, fmt.Sprintf("step %d", d.Step))
	}
	return strings.Join(parts, " ")
}

// String renders one line in the style of compilers:
//
//	file:line:col: error[code]: rank 0 tb 1 step 2: message (hint: ...)
func (d Diagnostic) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s[%s]: ", d.Where(), d.Severity, d.Code)
	if s := d.Subject(); s != "" {
		b.WriteString(s)
		b.WriteString(": ")
	}
	b.WriteString(d.Msg)
	if d.Hint != "" {
		fmt.Fprintf(&b, " (hint: %s)", d.Hint)
	}
	return b.String()
}

// Error makes a Diagnostic usable as an error.
func (d Diagnostic) Error() string { return d.String() }

// List is an ordered collection of diagnostics with a cap.
type List struct {
	Items []Diagnostic
	// Max caps the number of errors kept (0: DefaultMax). When the cap is
	// reached, one "too-many-errors" note is appended and later errors are
	// dropped.
	Max     int
	dropped int
}

// DefaultMax is the default cap on errors in a List.
const DefaultMax = 50

// Add appends d unless the cap on errors is reached.
func (l *List) Add(d Diagnostic) {
	max := l.Max
	if max == 0 {
		max = DefaultMax
	}
	if d.Severity == Error && l.NumErrors() >= max {
		l.dropped++
		return
	}
	l.Items = append(l.Items, d)
}

// Addf builds and appends a diagnostic with no rank/tb/step.
func (l *List) Addf(code Code, sev Severity, file string, line, col int, hint, format string, args ...any) {
	l.Add(Diagnostic{Code: code, Severity: sev, File: file, Line: line, Col: col, Rank: -1, TB: -1, Step: -1,
		Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// Append adds every diagnostic of other.
func (l *List) Append(other []Diagnostic) {
	for _, d := range other {
		l.Add(d)
	}
}

// Dropped is how many errors the cap dropped.
func (l *List) Dropped() int { return l.dropped }

// NumErrors counts the diagnostics of severity Error.
func (l *List) NumErrors() int {
	n := 0
	for _, d := range l.Items {
		if d.Severity == Error {
			n++
		}
	}
	return n
}

// HasErrors reports whether any diagnostic is an error.
func (l *List) HasErrors() bool { return l.NumErrors() > 0 }

// Sort orders diagnostics by file, line, column, then rank, tb, step, code.
func (l *List) Sort() { Sort(l.Items) }

// Sort orders diagnostics by file, line, column, then rank, tb, step, code.
func Sort(ds []Diagnostic) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i], ds[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Col != b.Col {
			return a.Col < b.Col
		}
		if a.Rank != b.Rank {
			return a.Rank < b.Rank
		}
		if a.TB != b.TB {
			return a.TB < b.TB
		}
		if a.Step != b.Step {
			return a.Step < b.Step
		}
		return a.Code < b.Code
	})
}

// Err returns nil when the list has no errors, and otherwise an error that
// wraps the list (errors.As(err, *ListError)).
func (l *List) Err() error {
	if !l.HasErrors() {
		return nil
	}
	return &ListError{Items: append([]Diagnostic(nil), l.Items...)}
}

// ListError is an error made of diagnostics.
type ListError struct{ Items []Diagnostic }

func (e *ListError) Error() string {
	var b strings.Builder
	for i, d := range e.Items {
		if d.Severity != Error {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		b.WriteString(d.String())
		if i > 20 {
			b.WriteString("\n...")
			break
		}
	}
	return b.String()
}
