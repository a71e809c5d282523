package optable

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
)

// viaTables is the careful way: LowerAll, then MarshalBinary per rank.
func viaTables(p *ir.Program) ([][]byte, error) {
	ts, err := LowerAll(p)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(ts))
	for r, t := range ts {
		if out[r], err = t.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sameLowering requires LowerAllBinary to give exactly what viaTables
// gives: the same bytes for every rank, or the same error (the same
// diag.Diagnostic, position, rank, tb, step and message), sequentially and
// on several goroutines.
func sameLowering(t *testing.T, name string, p *ir.Program) error {
	t.Helper()
	want, wantErr := viaTables(p)
	for _, par := range []int{1 << 62, 0} {
		saved := parallelOps
		parallelOps = par
		got, err := LowerAllBinary(p)
		parallelOps = saved
		if !reflect.DeepEqual(err, wantErr) {
			t.Fatalf("%s (parallel from %d ops): error\n%v\nwant\n%v", name, par, err, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d tables, want %d", name, len(got), len(want))
		}
		for r := range want {
			if !bytes.Equal(got[r], want[r]) {
				t.Fatalf("%s: rank %d's bytes differ (%d vs %d bytes)", name, r, len(got[r]), len(want[r]))
			}
		}
	}
	return wantErr
}

// legalised are the primitive-level programs of the generators (transfer
// generators legalised) for every collective, Simple and LL, 2 channels.
func legalised(t *testing.T, nranks []int) map[string]*ir.Program {
	t.Helper()
	out := map[string]*ir.Program{}
	for _, a := range gen.Algorithms() {
		for _, coll := range a.Collectives {
			for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
				for _, n := range nranks {
					opts := gen.Options{Collective: coll, NRanks: n, Protocol: proto, Channels: 2}
					if a.Name == "hier" {
						if n%2 != 0 {
							continue
						}
						opts.NLocalRanks = 2
					}
					p, err := gen.Generate(a.Name, opts)
					if err != nil {
						continue
					}
					if p.Level() == ir.LevelTransfer {
						q, ds := legalize.Legalize(p)
						if q == nil {
							t.Fatalf("%s: %v", a.Name, ds)
						}
						p = q
					}
					out[fmt.Sprintf("%s/%v/%v/n=%d", a.Name, coll, proto, n)] = p
				}
			}
		}
	}
	return out
}

// TestLowerAllBinaryMatches: on the test programs and every generator's
// legalised programs, LowerAllBinary writes exactly MarshalBinary's bytes.
func TestLowerAllBinaryMatches(t *testing.T) {
	progs := legalised(t, []int{1, 2, 3, 5})
	for name, p := range testPrograms() {
		progs["test/"+name] = p
	}
	for name, p := range progs {
		if err := sameLowering(t, name, p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	t.Logf("%d programs", len(progs))
}

// mutate breaks one field of one op, channel or rank of p at random, in
// ways Lower must notice (or not): offsets, counts, channels, dependencies,
// publish flags, opcodes, barriers, peer channels, buffer sizes.
func mutate(rng *rand.Rand, p *ir.Program) {
	r := rng.IntN(len(p.Ranks))
	rk := &p.Ranks[r]
	small := func() int { return rng.IntN(6) - 1 }
	switch rng.IntN(10) {
	case 0:
		rk.Chunks[rng.IntN(3)] += int64(rng.IntN(3) - 1)
		return
	case 1:
		if len(rk.Channels) > 0 {
			ch := &rk.Channels[rng.IntN(len(rk.Channels))]
			ch.PeerChannel, ch.Init = small(), int64(small())
		}
		return
	}
	if len(rk.TBs) == 0 {
		return
	}
	tb := &rk.TBs[rng.IntN(len(rk.TBs))]
	if len(tb.Ops) == 0 {
		return
	}
	op := &tb.Ops[rng.IntN(len(tb.Ops))]
	refs := append(append([]ir.Ref(nil), op.Srcs...), op.Dsts...)
	switch rng.IntN(8) {
	case 0:
		op.Count = int64(small())
	case 1:
		op.Code = ir.Opcode(rng.IntN(int(ir.NumOpcodes) + 1))
	case 2:
		op.Publish = !op.Publish
	case 3:
		op.Deps = append(op.Deps, ir.Dep{TB: small(), Step: small()})
	case 4:
		op.Chans = append(op.Chans, small())
	case 5:
		op.Barrier, op.BarrierTBs = small(), small()
	default:
		if len(refs) > 0 {
			i := rng.IntN(len(refs))
			refs[i].Off += int64(rng.IntN(5) - 2)
			refs[i].Chan = small()
			refs[i].Packet = rng.IntN(4) == 0
			refs[i].Buf = ir.BufKind(rng.IntN(int(ir.NumBufKinds) + 1))
		}
		op.Srcs, op.Dsts = refs[:len(op.Srcs):len(op.Srcs)], refs[len(op.Srcs):]
	}
}

// TestLowerAllBinaryErrors: on broken programs (every TestLowerErrors case
// and random mutations), LowerAllBinary fails exactly as LowerAll does, or
// writes exactly its bytes.
func TestLowerAllBinaryErrors(t *testing.T) {
	progs := legalised(t, []int{3})
	for name, p := range testPrograms() {
		progs["test/"+name] = p
	}
	rng := rand.New(rand.NewPCG(3, 4))
	n := 3000
	if testing.Short() {
		n = 500
	}
	names := make([]string, 0, len(progs))
	for name := range progs {
		names = append(names, name)
	}
	failed := map[string]int{}
	for i := range n {
		name := names[i%len(names)]
		p := progs[name].Clone()
		for range 1 + rng.IntN(2) {
			mutate(rng, p)
		}
		if err := sameLowering(t, fmt.Sprintf("%s mutant %d", name, i), p); err != nil {
			failed[errCode(err)]++
		}
	}
	t.Logf("%d mutants; errors by code: %v", n, failed)
	if len(failed) < 5 {
		t.Errorf("the mutations reach only %d error codes: %v", len(failed), failed)
	}
}

// errCode is the diagnostic code in err's text ("TS0102"), or the text.
func errCode(err error) string {
	s := err.Error()
	if i := strings.Index(s, "[TS"); i >= 0 && i+8 <= len(s) {
		return s[i+1 : i+7]
	}
	return s
}

// BenchmarkLowerRing lowers and encodes every rank of the legalised ring
// allreduce (Simple, 1 channel; 3·(2n−1) primitives per rank), through
// Tables (LowerAll + MarshalBinary, as compiler/passes did) and straight to
// the wire format (LowerAllBinary).
func BenchmarkLowerRing(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		if n > 64 && testing.Short() {
			continue
		}
		p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
		if err != nil {
			b.Fatal(err)
		}
		q, ds := legalize.Legalize(p)
		if q == nil {
			b.Fatal(ds)
		}
		for _, way := range []struct {
			name string
			f    func(*ir.Program) ([][]byte, error)
		}{{"tables", viaTables}, {"binary", LowerAllBinary}} {
			b.Run(fmt.Sprintf("n=%d/%s", n, way.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := way.f(q); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestForEachRank: every rank below the first failure is done, and a panic
// in a worker comes back on the caller's goroutine.
func TestForEachRank(t *testing.T) {
	saved := parallelOps
	parallelOps = 0
	defer func() { parallelOps = saved }()
	p := legalised(t, []int{5})["ring/allreduce/simple/n=5"]
	if p == nil {
		t.Fatal("no ring")
	}
	p.Ranks = append(p.Ranks, p.Ranks...)
	var done [10]atomicBool
	forEachRank(p, func(r int) bool {
		done[r].set()
		return r != 6
	})
	for r := 0; r <= 6; r++ {
		if !done[r].get() {
			t.Errorf("rank %d below the failing rank 6 was skipped", r)
		}
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want the worker's panic", v)
			}
		}()
		forEachRank(p, func(r int) bool {
			if r == 3 {
				panic("boom")
			}
			return true
		})
		t.Error("no panic")
	}()
}

type atomicBool struct{ v atomic.Bool }

func (b *atomicBool) set()      { b.v.Store(true) }
func (b *atomicBool) get() bool { return b.v.Load() }
