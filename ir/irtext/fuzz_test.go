package irtext_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

// fuzzMaxBytes bounds the work of one fuzz input: the fuzzer's mutations
// grow inputs, and its minimizer's cost grows faster than their length.
// Longer sources are parsed by the unit tests (TestRoundTripFiles).
const fuzzMaxBytes = 1 << 10

// FuzzParse checks that Parse never panics, that a failed parse reports
// error diagnostics with a code, and that every program it accepts
// round-trips: print → parse gives an equal program that prints the same
// text. Seeds: small programs (the committed corpus in
// testdata/fuzz/FuzzParse and the inline ones below; ir/testdata/*.tir is
// TestRoundTripFiles'), so that each input costs tens of microseconds and
// the fuzzer runs thousands of them a second. Inputs over fuzzMaxBytes are
// skipped.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"program \"x\" allreduce nranks=1 chunks=1\n",
		"program \"x\" allgather nranks=2 chunks=1 rank 0 { tb 0 { send i[0+-1]/pkt deps=(0,0) } } rank 1 {}",
		"program \"\\xff\\u00e9\" custom nranks=1 chunks=1 meta \"\" = \"\\x00\"",
		"program \"x\" reduce nranks=65536 chunks=1099511627776 rank 0 { channel 0 peer=-1.-1 sm init=-9223372036854775808 }",
	} {
		f.Add([]byte(s))
	}
	// Two small whole programs (about 320 bytes each).
	f.Add([]byte(irtest.RingAllReduce(2, ir.LL).String()))
	f.Add([]byte(irtest.AllGatherRing(2).String()))
	f.Fuzz(func(t *testing.T, src []byte) {
		if len(src) > fuzzMaxBytes {
			return
		}
		p, ds := irtext.Parse("fuzz.tir", src)
		if p == nil {
			if len(ds) == 0 {
				t.Fatal("Parse returned neither a program nor diagnostics")
			}
			for _, d := range ds {
				if _, ok := diag.Lookup(d.Code); !ok || d.Severity != diag.Error {
					t.Fatalf("bad diagnostic %v", d)
				}
			}
			return
		}
		if len(ds) != 0 {
			t.Fatalf("Parse returned a program and diagnostics %v", ds)
		}
		var b bytes.Buffer
		if err := ir.Print(&b, p); err != nil {
			t.Fatalf("Print of a parsed program: %v", err)
		}
		text := b.String()
		q, ds := irtext.Parse("printed.tir", []byte(text))
		if q == nil {
			t.Fatalf("printed text does not parse: %v\n%s", ds, text)
		}
		// cmp.Equal first: the diff's report costs milliseconds, and is
		// only needed when the programs differ.
		if !cmp.Equal(p, q, irtest.CmpOpts...) {
			t.Fatalf("parse(print(p)) != p (-want +got):\n%s\n%s", irtest.Diff(p, q), text)
		}
		if again := q.String(); again != text {
			t.Fatalf("print is not idempotent:\n%s\nthen\n%s", text, again)
		}
	})
}
