package mscclpp

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// FuzzParse checks that Parse never panics and that its results agree: a
// program comes back exactly when no diagnostic is an error, every
// diagnostic has a documented code and every error a position, and a
// returned program is sound: one rank per gpu, positive ChunksPerBlock,
// every channel end paired both ways, every channel index an op names in
// range, and opcodes with their operands. Seeds: testdata/fuzz/FuzzParse
// (own small plans) and the f.Add calls.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sendRecv07))
	f.Add([]byte(allGather08))
	f.Add([]byte(`{"name":"x","collective":"allreduce","protocol":"LL","inplace":true,"gpus":[{"id":0,"input_chunks":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ds := Parse("f.json", data)
		for _, d := range ds {
			if d.Severity == diag.Error && d.File != "f.json" {
				t.Fatalf("error without position: %v", d)
			}
		}
		if !importtest.CheckResult(t, p, ds) {
			return
		}
		for r, rk := range p.Ranks {
			for c, ch := range rk.Channels {
				if ch.PeerChannel < 0 {
					continue // a lone end: the verifier's TS0103
				}
				back := p.Ranks[ch.Peer].Channels[ch.PeerChannel]
				if back.Peer != r || back.PeerChannel != c || back.Type != ch.Type {
					t.Fatalf("rank %d channel %d %+v pairs with %+v", r, c, ch, back)
				}
			}
			for tbi, tb := range rk.TBs {
				for i, op := range tb.Ops {
					for _, c := range op.Chans {
						if c < 0 || c >= len(rk.Channels) {
							t.Fatalf("rank %d tb %d op %d: channel %d of %d", r, tbi, i, c, len(rk.Channels))
						}
					}
					for _, ref := range append(append([]ir.Ref(nil), op.Srcs...), op.Dsts...) {
						if ref.Chan >= len(rk.Channels) {
							t.Fatalf("rank %d tb %d op %d: ref through channel %d of %d", r, tbi, i, ref.Chan, len(rk.Channels))
						}
					}
				}
			}
		}
	})
}
