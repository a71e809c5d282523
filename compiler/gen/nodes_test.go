package gen

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
)

// TestAcrossNodes: for several nodes (NLocalRanks below NRanks) every
// generator either refuses (the ones that read peers' memory:
// ErrUnsupported) or writes a program that records the node shape, joins
// ranks of different nodes with port channels only (rooted collectives:
// every pair, since the root rotation moves ranks between nodes), and puts through them
// only as a port channel can (the verifier's TS0116 and TS0117 are clean,
// before and after legalisation); the program computes its collective
// (the symbolic executor, and the interpreter for a sample).
func TestAcrossNodes(t *testing.T) {
	shapes := [][2]int{{4, 2}, {6, 3}, {6, 2}, {8, 2}}
	if testing.Short() {
		shapes = shapes[:2]
	}
	ran := map[string]bool{}
	n := 0
	for i, sh := range shapes {
		for _, c := range cases([]int{sh[0]}, []int{1}) {
			if c.opts.NLocalRanks != 0 && c.opts.NLocalRanks != sh[1] {
				continue // hier's other shapes
			}
			c.opts.NLocalRanks = sh[1]
			p, err := Generate(c.algo, c.opts)
			if err != nil {
				if errors.Is(err, ErrUnsupported) && (c.algo == "pull" || c.algo == "oneshot" && c.opts.Protocol == ir.Simple) {
					continue
				}
				t.Fatalf("%v: %v", c, err)
			}
			if p.NLocalRanks != sh[1] {
				t.Fatalf("%v: the program records %d ranks per node", c, p.NLocalRanks)
			}
			verifyCheck(t, c, p)
			lp, ds := legalize.Legalize(p)
			if lp == nil {
				t.Fatalf("%v: %v", c, ds)
			}
			ports := 0
			for r, rk := range lp.Ranks {
				for ch, e := range rk.Channels {
					// Rooted collectives: every channel (the root rotation
					// may move any pair across nodes).
					if far := r/sh[1] != e.Peer/sh[1] || c.opts.Collective.Rooted(); far != (e.Type == ir.PortChannel) {
						t.Fatalf("%v: rank %d channel %d to rank %d is a %v channel", c, r, ch, e.Peer, e.Type)
					} else if far {
						ports++
					}
				}
			}
			if ports == 0 {
				t.Fatalf("%v: no port channel between nodes", c)
			}
			simCheck(t, c, p, 1)
			if i == 0 {
				interpCheck(t, c, p, false)
			}
			ran[c.algo] = true
			n++
		}
	}
	t.Logf("%d programs across nodes", n)
	for _, a := range Algorithms() {
		if !ran[a.Name] && a.Name != "pull" {
			t.Errorf("no case of %s ran across nodes", a.Name)
		}
	}
}
