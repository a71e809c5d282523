package msccl

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
	"github.com/theseus-ccl/theseus/diag"
)

// FuzzParse checks that Parse never panics and that its two results agree:
// a program comes back exactly when no diagnostic is an error, every
// diagnostic carries a documented code and the file name, every error has a
// position, and a returned program is structurally sound (one rank per
// gpu, positive ChunksPerBlock, valid opcodes, positions on every op).
// Seeds: testdata/fuzz/FuzzParse (own small files) and the f.Add calls.
func FuzzParse(f *testing.F) {
	f.Add([]byte(twoRankAllReduce))
	f.Add([]byte(algo("", tb(0, -1, -1, st(0, "re", "s", 0, "o", 0, 1, -1, -1, 0), st(1, "re", "s", 1, "o", 0, 1, -1, -1, 1)))))
	f.Add([]byte(`<algo name="x" proto="LL128" nchannels="1" nchunksperloop="4" ngpus="2" coll="allgather" inplace="1"><gpu id="1"/></algo>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, ds := Parse("f.xml", data)
		for i, d := range ds {
			if d.File != "f.xml" && d.Code != diag.ImportNote {
				t.Fatalf("diagnostic without file: %v", d)
			}
			if i > 0 && ds[i-1].Line > d.Line && ds[i-1].File == d.File {
				t.Fatalf("diagnostics not sorted: %v before %v", ds[i-1], d)
			}
		}
		if !importtest.CheckResult(t, p, ds) {
			return
		}
		for r, rk := range p.Ranks {
			for tbi, tb := range rk.TBs {
				for i, op := range tb.Ops {
					if info := op.Code.Info(); len(op.Dsts) < info.MinDsts {
						t.Fatalf("rank %d tb %d op %d: %v with %d srcs %d dsts", r, tbi, i, op.Code, len(op.Srcs), len(op.Dsts))
					}
				}
			}
		}
	})
}
