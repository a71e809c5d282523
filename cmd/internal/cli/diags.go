package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/diag"
)

// Dedupe removes repeated diagnostics (same code, severity, position,
// rank/threadblock/step and message), keeping the first, and sorts the
// rest by position (diag.Sort). A check run before and after a pass may
// report the same warning twice.
func Dedupe(ds []diag.Diagnostic) []diag.Diagnostic {
	type key struct {
		c                diag.Code
		s                diag.Severity
		f                string
		l, col, r, t, st int
		m                string
	}
	seen := make(map[key]bool, len(ds))
	out := ds[:0:0]
	for _, d := range ds {
		k := key{d.Code, d.Severity, d.File, d.Line, d.Col, d.Rank, d.TB, d.Step, d.Msg}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, d)
	}
	diag.Sort(out)
	return out
}

// CountErrors counts the diagnostics of severity Error.
func CountErrors(ds []diag.Diagnostic) int {
	n := 0
	for _, d := range ds {
		if d.Severity == diag.Error {
			n++
		}
	}
	return n
}

// PrintDiags writes one line per diagnostic (diag.Diagnostic.String) to w:
// what commands other than lint do with the diagnostics of their input,
// on standard error.
func PrintDiags(w io.Writer, ds []diag.Diagnostic) {
	for _, d := range ds {
		fmt.Fprintln(w, d.String())
	}
}

// AddMaxErrors registers --max-errors on cmd: the cap on error
// diagnostics reported (0: the compiler's default, diag.DefaultMax per
// check).
func AddMaxErrors(cmd *cobra.Command) *int {
	n := new(int)
	cmd.Flags().IntVar(n, "max-errors", 0, "report at most N errors (0: no cap beyond the verifier's default of 50 per check)")
	return n
}

// CheckMaxErrors rejects a negative --max-errors.
func CheckMaxErrors(n int) error {
	if n < 0 {
		return Usagef("--max-errors must be >= 0, got %d", n)
	}
	return nil
}
