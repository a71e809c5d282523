package gen

import (
	"flag"
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// genCase is one generator configuration of a sweep.
type genCase struct {
	algo string
	opts Options
}

func (c genCase) String() string {
	o := c.opts
	s := fmt.Sprintf("%s/%v/n%d/k%d/%v", c.algo, o.Collective, o.NRanks, max(o.Channels, 1), o.Protocol)
	if o.NLocalRanks > 0 {
		s += fmt.Sprintf("/l%d", o.NLocalRanks)
	}
	if o.Collective.Rooted() {
		s += fmt.Sprintf("/root%d", o.Root)
	}
	return s
}

// cases lists every (algorithm, collective) for each n in ns, with the
// given channel counts and both protocols; hier gets every nlocalranks
// dividing n; rooted collectives get root 0 and root n-1.
func cases(ns, ks []int) []genCase {
	var out []genCase
	for _, a := range Algorithms() {
		for _, c := range a.Collectives {
			for _, n := range ns {
				for _, k := range ks {
					for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
						if proto == ir.LL && a.SimpleOnly {
							continue
						}
						base := Options{Collective: c, NRanks: n, Channels: k, Protocol: proto}
						var ls []int
						if a.Name == "hier" {
							for l := 1; l <= n; l++ {
								if n%l == 0 {
									ls = append(ls, l)
								}
							}
						} else {
							ls = []int{0}
						}
						roots := []int{0}
						if c.Rooted() && n > 1 {
							roots = append(roots, n-1)
						}
						for _, l := range ls {
							for _, root := range roots {
								o := base
								o.NLocalRanks = l
								o.Root = root
								out = append(out, genCase{a.Name, o})
							}
						}
					}
				}
			}
		}
	}
	return out
}

// simCheck legalises p and simulates it in every arrangement it declares.
func simCheck(t *testing.T, c genCase, p *ir.Program, seeds int) {
	t.Helper()
	lp, ds := legalize.Legalize(p)
	if lp == nil {
		t.Fatalf("%v: legalize failed: %v", c, ds)
	}
	for _, inPlace := range irtest.Arrangements(p) {
		for seed := 0; seed < seeds; seed++ {
			if _, err := irtest.Simulate(lp, irtest.SimOptions{InPlace: inPlace, Slices: 2, Launches: 2, Schedule: irtest.RandomBursts, Seed: uint64(seed)}); err != nil {
				t.Fatalf("%v inplace=%v seed %d: %v", c, inPlace, seed, err)
			}
		}
	}
}

// TestSimulateSmall legalises and symbolically executes every generator on
// small communicators (quick; always on).
func TestSimulateSmall(t *testing.T) {
	ns := []int{1, 2, 3, 4, 5, 6, 8}
	if testing.Short() {
		ns = []int{2, 3, 5}
	}
	for _, c := range cases(ns, []int{1, 2}) {
		p, err := Generate(c.algo, c.opts)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		simCheck(t, c, p, 2)
	}
}

var full = flag.Bool("gen.full", false, "run the full generator acceptance sweep: every generator, nranks 2..64, every nlocalranks for hier")

var simMax = flag.Int("gen.simmax", 16, "largest nranks the full sweep also runs through the test's symbolic executor")

// TestSweepFull is the acceptance sweep over nranks 2..64 (behind
// -gen.full: it takes minutes on two cores).
func TestSweepFull(t *testing.T) {
	if !*full {
		t.Skip("run with -gen.full")
	}
	ns := make([]int, 0, 63)
	for n := 2; n <= 64; n++ {
		ns = append(ns, n)
	}
	for _, c := range cases(ns, []int{1}) {
		t.Run(c.String(), func(t *testing.T) {
			p, err := Generate(c.algo, c.opts)
			if err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			if err := checkStructure(p); err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			verifyCheck(t, c, p)
			interpCheck(t, c, p, c.opts.NRanks <= 8)
			if c.opts.NRanks <= *simMax {
				simCheck(t, c, p, 1)
			}
		})
	}
}
