package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

// fewThreadsProgram is a verified one-rank program whose one threadblock
// of threads threads runs nops copies (or two-source reduces into the
// output) issued from the last chunk to the first, so that no op continues
// the one before it: nops runs of shared work.
func fewThreadsProgram(t testing.TB, threads, nops int, reduce bool) *ir.Program {
	t.Helper()
	p := &ir.Program{Name: "few-threads", Collective: ir.AllReduce, NRanks: 1, Root: -1, Protocol: ir.Simple,
		ChunksPerBlock: int64(nops), OutOfPlace: true, NumThreads: threads}
	tb := ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1}
	for c := int64(nops - 1); c >= 0; c-- {
		op := ir.Op{Code: ir.OpCopy, Count: 1,
			Srcs: []ir.Ref{{Buf: ir.Input, Off: c, Chan: -1}}, Dsts: []ir.Ref{{Buf: ir.Output, Off: c, Chan: -1}}}
		if reduce {
			op.Code = ir.OpReduce
			op.Srcs = append(op.Srcs, ir.Ref{Buf: ir.Output, Off: c, Chan: -1})
		}
		tb.Ops = append(tb.Ops, op)
	}
	p.Ranks = []ir.Rank{{TBs: []ir.Threadblock{tb}}}
	// The copies verify; the reduces (o[c] += i[c], as bwProgram's) read an
	// output chunk nothing wrote, which the verifier refuses (TS0210) but
	// the kernel and the interpreter run alike.
	if ds := verify.Verify(p, verify.Options{}); !reduce && verify.HasErrors(ds) {
		t.Fatalf("program does not verify: %v", ds)
	}
	return p
}

// TestSharedUnitsFewThreads (host): a verified program may ask for any
// block size (verify.MaxThreads), so shared work can have more runs than
// its blocks have threads; the kernel stages the runs with a block-stride
// loop and units_other's pointers from one thread (found in review: run k
// was staged by thread k only, so runs past the block size were never
// staged). This checks that the scenario TestSharedUnitsFewThreadsGPU runs
// does have more runs than threads.
func TestSharedUnitsFewThreads(t *testing.T) {
	const threads, nops = 8, 12
	p := fewThreadsProgram(t, threads, nops, false)
	u := unitsOf(t, p, nops*1024, false, 1, ir.Sum)
	if u == nil {
		t.Fatal("no shared work: the scenario needs it")
	}
	if nruns, _ := runCounts(u); nruns != nops {
		t.Errorf("%d runs, want %d (one per op)", nruns, nops)
	}
}

// TestSharedUnitsFewThreadsGPU runs shared work of more runs than threads
// per block (1, 2 and 8 threads; 12 runs) on the GPU, copies and reduces,
// in three datatypes, and compares every output byte with the host
// interpreter.
func TestSharedUnitsFewThreadsGPU(t *testing.T) {
	gputest.Require(t)
	const nops = 12
	for _, reduce := range []bool{false, true} {
		for _, threads := range []int{1, 2, 8} {
			t.Run(fmt.Sprintf("reduce=%v/threads=%d", reduce, threads), func(t *testing.T) {
				tables, err := optable.LowerAll(fewThreadsProgram(t, threads, nops, reduce))
				if err != nil {
					t.Fatal(err)
				}
				gw, err := NewWorld(0, tables)
				if err != nil {
					t.Fatal(err)
				}
				defer gw.Close()
				hw, err := interp.NewWorld(tables)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(7, uint64(threads)))
				for _, dt := range []ir.DataType{ir.Float32, ir.Bfloat16, ir.Int8} {
					for _, count := range []int64{nops * 1000, nops*4096 + 5} {
						req := interp.Request{Count: count, DataType: dt, RedOp: ir.Sum, Timeout: 5 * time.Second}
						h, bad, msg := diffHost(rng, tables, hw, gw, req)
						if !bad {
							bad, msg = diffGPU(gw, h)
						}
						if bad {
							t.Errorf("%v count %d: %s", dt, count, msg)
						}
					}
				}
			})
		}
	}
}
