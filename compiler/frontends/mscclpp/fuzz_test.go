package mscclpp

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/diag"
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
		errs := 0
		for _, d := range ds {
			if _, ok := diag.Lookup(d.Code); !ok {
				t.Fatalf("undocumented code %q: %v", d.Code, d)
			}
			if d.Severity == diag.Error {
				errs++
				if d.Line < 1 || d.Col < 1 || d.File != "f.json" {
					t.Fatalf("error without position: %v", d)
				}
			}
		}
		if (p == nil) != (errs > 0) {
			t.Fatalf("program %v with %d errors: %v", p != nil, errs, ds)
		}
		if p == nil {
			return
		}
		if len(p.Ranks) != p.NRanks || p.NRanks < 1 || p.ChunksPerBlock < 1 {
			t.Fatalf("bad program shape: nranks %d ranks %d C %d", p.NRanks, len(p.Ranks), p.ChunksPerBlock)
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
					if !op.Code.Valid() || !op.Pos.IsValid() {
						t.Fatalf("rank %d tb %d op %d: %+v", r, tbi, i, op)
					}
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
					if len(op.Srcs) < op.Code.Info().MinSrcs {
						t.Fatalf("rank %d tb %d op %d: %v with %d srcs", r, tbi, i, op.Code, len(op.Srcs))
					}
				}
			}
		}
	})
}
