package gen

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// FuzzGenerate feeds arbitrary options to Generate: it must never panic,
// must fail only with its documented errors, and every program it returns
// must pass the structural checks.
func FuzzGenerate(f *testing.F) {
	f.Add("ring", uint8(0), 8, 0, uint8(0), 1, 0, []byte{}, []byte{})
	f.Add("tree", uint8(0), 9, 0, uint8(1), 2, 0, []byte{3, 1, 2, 0, 4, 5, 6, 7, 8}, []byte{2})
	f.Add("hier", uint8(2), 12, 4, uint8(0), 1, 0, []byte{}, []byte{})
	f.Add("chain", uint8(3), 5, 0, uint8(0), 1, 4, []byte{}, []byte{1})
	f.Add("direct", uint8(5), 7, 0, uint8(1), 3, 0, []byte{}, []byte{0, 1})
	f.Add("push", uint8(3), 20, 4, uint8(0), 2, 0, []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, algo string, coll uint8, n, l int, proto uint8, k, root int, order, avoid []byte) {
		// Keep programs small enough to generate quickly; Generate itself
		// refuses the absurd ones.
		if n > 200 || n < -1 {
			n %= 200
		}
		o := Options{Collective: ir.Collective(coll % uint8(ir.NumCollectives+1)), NRanks: n, NLocalRanks: l,
			Protocol: ir.Protocol(proto % 3), Channels: k, Root: root}
		if len(order) > 0 {
			o.Order = make([]int, len(order))
			for i, b := range order {
				o.Order[i] = int(b)
			}
		}
		for _, b := range avoid {
			o.Avoid = append(o.Avoid, int(b))
		}
		p, err := Generate(algo, o)
		if err != nil {
			if p != nil {
				t.Fatalf("program and error: %v", err)
			}
			for _, e := range []error{ErrUnknownAlgorithm, ErrUnsupported, ErrOptions, ErrAvoid} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("undocumented error: %v", err)
		}
		if err := checkStructure(p); err != nil {
			t.Fatalf("%s %+v: %v", algo, o, err)
		}
	})
}
