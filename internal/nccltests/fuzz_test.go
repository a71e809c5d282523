package nccltests

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// render writes rows back in nccl-tests' layout (with the column header
// their fields need), for the round trip in FuzzParse; nil when the rows
// mix layouts (concatenated runs of different flags).
func render(rows []Row) []byte {
	var b bytes.Buffer
	perIter, trailer := rows[0].OutOfPlace.Iter != nil, ""
	for _, r := range rows {
		if (r.OutOfPlace.Iter != nil) != perIter || (r.InPlace.Iter != nil) != perIter {
			return nil
		}
		t := ""
		switch {
		case r.Schedule != "":
			t = "schedule"
		case r.Timestamp != "":
			t = "timestamp"
		}
		if t != "" && trailer != "" && t != trailer {
			return nil
		}
		if t != "" {
			trailer = t
		}
	}
	b.WriteString("# Collective test starting: all_reduce_perf\n# size count type redop root")
	for range 2 {
		b.WriteString(" time algbw busbw #wrong")
		if perIter {
			b.WriteString(" i_min i_max i_p99 i_cv%")
		}
	}
	b.WriteString(" " + trailer + "\n")
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, r := range rows {
		fmt.Fprintf(&b, "%d %d %s %s %d", r.Bytes, r.Count, r.Type, r.RedOp, r.Root)
		for _, x := range []Result{r.OutOfPlace, r.InPlace} {
			w := "N/A"
			if x.Wrong != nil {
				w = strconv.FormatInt(*x.Wrong, 10)
			}
			fmt.Fprintf(&b, " %s %s %s %s", g(x.TimeUS), g(x.AlgBW), g(x.BusBW), w)
			if perIter {
				s := x.Iter
				if s == nil {
					s = &IterStats{}
				}
				fmt.Fprintf(&b, " %s %s %s %s", g(s.MinUS), g(s.MaxUS), g(s.P99US), g(s.CVPct))
			}
		}
		b.WriteString(" " + r.Schedule + r.Timestamp + "\n")
	}
	return b.Bytes()
}

// FuzzParse: Parse never panics; errors carry a position inside the
// input; the rows it accepts are sane, and written back in nccl-tests'
// layout they parse to the same values. The committed corpus
// (testdata/fuzz/FuzzParse) holds real nccl-tests and theseus-bench
// outputs and the variants of TestVariants.
func FuzzParse(f *testing.F) {
	f.Add([]byte(hdr + cols + "           8             2     float     sum      -1    10.00    0.00    0.00       0    11.00    0.00    0.00     N/A\n"))
	f.Add([]byte("# theseus-bench: 4 ranks (in-process, 1 node(s) of 4), backend host\n" +
		"#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong  schedule\n" +
		"# allreduce\n           8             2     float     sum      -1    12.35    0.00    0.00       0    11.50    0.00    0.00       0  a / b!\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Parse("fuzz.txt", data)
		if out == nil {
			t.Fatal("nil output")
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		if err != nil {
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 || len(l) > MaxErrors+1 {
				t.Fatalf("error %T %v: want an ErrorList of 1..%d", err, err, MaxErrors+1)
			}
			for _, e := range l {
				if e.Line < 1 || e.Line > lines || e.Col < 1 || e.Msg == "" || !strings.HasPrefix(e.Error(), "fuzz.txt:") {
					t.Fatalf("bad error %+v (input of %d lines)", e, lines)
				}
			}
		}
		for _, r := range out.Rows {
			if r.Line < 1 || r.Line > lines || r.Bytes < 0 || r.Count < 0 || r.Root < -1 || r.Type == "" || r.RedOp == "" {
				t.Fatalf("bad row %+v", r)
			}
			for _, x := range []Result{r.OutOfPlace, r.InPlace} {
				if x.Wrong != nil && *x.Wrong < 0 {
					t.Fatalf("negative #wrong in %+v", r)
				}
			}
		}
		if err != nil || len(out.Rows) == 0 {
			return
		}
		text := render(out.Rows)
		if text == nil {
			return
		}
		again, err := Parse("render.txt", text)
		if err != nil {
			t.Fatalf("rendered rows do not parse: %v\n%s", err, text)
		}
		opts := []cmp.Option{cmpopts.EquateNaNs(), cmpopts.IgnoreFields(Row{}, "Line", "Collective")}
		if d := cmp.Diff(out.Rows, again.Rows, opts...); d != "" {
			t.Fatalf("round trip: -parsed +reparsed:\n%s", d)
		}
	})
}
