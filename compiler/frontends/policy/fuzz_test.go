package policy

import (
	"testing"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/diag"
)

// FuzzCompile: no input makes the frontend panic or hang; every diagnostic
// has a policy code, a position and a hint; every program it returns
// verifies and survives the binary round trip.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"msgsize <= 65536 && slow_rank != 2",
		"100 - log2(msgsize) + (slow_rank >= 0 ? bw[slow_rank] : 0) * load",
		"clamp(maxof(bw) - minof(bw), 0, 10) + abs(-3) + min(1, msgsize, 7)",
		"!contains([0, 3, 5], slow_rank) || degraded == false",
		"floor(load) % 0", "-9223372036854775808 / -1", "1e309", "((1)", "a ? b : c ? d : e",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		for _, want := range []Want{WantAny, WantBool, WantNumber} {
			p, ds := Compile(src, testAttrs, Options{Want: want, File: "f", Line: 1, Col: 1})
			for _, d := range ds {
				if d.Line < 1 || d.Col < 1 || d.Hint == "" || d.Code[:4] != "TS03" && d.Code != diag.RankLocalPolicy {
					t.Fatalf("bad diagnostic for %q: %+v", src, d)
				}
			}
			if p == nil {
				continue
			}
			if err := bc.Verify(p); err != nil {
				t.Fatalf("%q compiled to an unverifiable program: %v", src, err)
			}
			if _, err := bc.Unmarshal(bc.Marshal(p)); err != nil {
				t.Fatalf("%q: binary round trip: %v", src, err)
			}
		}
	})
}
