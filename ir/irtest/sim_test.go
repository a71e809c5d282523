package irtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
)

// oneRankAR is a 1-rank allreduce of chunksPerBlock chunks with scratch
// chunks of scratch, whose rank-0 builder the caller fills.
func oneRankAR(chunksPerBlock, scratch int64, proto ir.Protocol) (*Builder, *RankBuilder) {
	b := New(ir.AllReduce, 1, chunksPerBlock).Protocol(proto)
	return b, b.Rank(0).Chunks(chunksPerBlock, chunksPerBlock, scratch)
}

var schedules = []Schedule{RoundRobin, RandomBursts, RandomSteps}

// everySchedule runs p under every schedule and seeds 0..19 and returns the
// first error.
func everySchedule(p *ir.Program, opts SimOptions) error {
	for _, s := range schedules {
		for seed := range uint64(20) {
			opts.Schedule, opts.Seed = s, seed
			if _, err := Simulate(p, opts); err != nil {
				return fmt.Errorf("schedule %d seed %d: %w", s, seed, err)
			}
		}
	}
	return nil
}

// TestSimulateSync checks that the simulator honours each ordering
// primitive: with it the program is right under every interleaving tried,
// and without it some interleaving reads the scratch chunk too early.
func TestSimulateSync(t *testing.T) {
	cases := []struct {
		name string
		prog func(sync bool) *ir.Program
		opts SimOptions
	}{
		{"barrier", func(sync bool) *ir.Program {
			b, rb := oneRankAR(1, 1, ir.Simple)
			w, r := rb.PrimTB().Copy(1, I(0), S(0)), rb.PrimTB()
			if sync {
				w.Barrier(0, 2)
				r.Barrier(0, 2)
			}
			r.Copy(1, S(0), O(0))
			return b.Build()
		}, SimOptions{Launches: 2}},
		{"dependency", func(sync bool) *ir.Program {
			b, rb := oneRankAR(1, 1, ir.Simple)
			w := rb.PrimTB().Copy(1, I(0), S(0))
			r := rb.PrimTB().Copy(1, S(0), O(0))
			if sync {
				w.Publish()
				r.Dep(0, 0)
			}
			return b.Build()
		}, SimOptions{Launches: 2}},
		{"semaphore", func(sync bool) *ir.Program {
			b := New(ir.AllGather, 2, 1)
			a0, a1 := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
			for r, ch := range []int{a0, a1} {
				q := int64(1 - r)
				tb := b.Rank(r).Chunks(1, 2, 1).PrimTB().Copy(1, I(0), O(int64(r)), Remote(S(0), ch))
				if sync {
					tb.Signal(ch).Wait(ch)
				}
				tb.Copy(1, S(0), O(q))
				if sync {
					// The credit back, so the next slice cannot overwrite
					// the slot before it is read.
					tb.Signal(ch).Wait(ch)
				}
			}
			return b.Build()
		}, SimOptions{Slices: 2, Launches: 2}},
		{"packet", func(sync bool) *ir.Program {
			b, rb := oneRankAR(1, 1, ir.LL)
			dst := S(0)
			if sync {
				dst = Packet(dst)
			}
			rb.PrimTB().Copy(1, dst, O(0))
			rb.PrimTB().Copy(1, I(0), dst)
			return b.Build()
		}, SimOptions{Launches: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := everySchedule(c.prog(true), c.opts); err != nil {
				t.Errorf("synchronised: %v", err)
			}
			if err := everySchedule(c.prog(false), c.opts); err == nil {
				t.Error("unsynchronised: every interleaving passed")
			}
		})
	}
}

// TestSimulateTransfers runs a 3-rank chain broadcast through every
// transfer op that forwards, and checks the outputs exactly.
func TestSimulateTransfers(t *testing.T) {
	chain := func(sends ...int64) *ir.Program {
		b := New(ir.Broadcast, 3, 2)
		tb := b.Rank(0).TB(1, -1, 0)
		off := int64(0)
		for _, n := range sends {
			tb.Send(n, I(off))
			off += n
		}
		b.Rank(0).PrimTB().Copy(2, I(0), O(0))
		b.Rank(1).TB(2, 0, 0).RCS(1, O(0)).RCS(1, O(1))
		b.Rank(2).TB(-1, 1, 0).Recv(1, O(0)).Recv(1, O(1))
		return b.Build()
	}
	if _, err := Simulate(chain(2), SimOptions{}); err == nil || !strings.Contains(err.Error(), "rank 1 tb 0 step 0: received 2 chunks, want 1") {
		t.Errorf("count mismatch: got %v", err)
	}
	for _, s := range schedules {
		res, err := Simulate(chain(1, 1), SimOptions{Schedule: s, Seed: 3, Launches: 2})
		if err != nil {
			t.Fatalf("schedule %d: %v", s, err)
		}
		want := map[OutputKey]Value{}
		for r := range 3 {
			for l := range 2 {
				for j := range int64(2) {
					want[OutputKey{r, l, 0, j}] = Value{{Launch: l, Rank: 0, Chunk: j}: 1}
				}
			}
		}
		if d := cmp.Diff(want, res.Outputs); d != "" {
			t.Errorf("schedule %d outputs (-want +got):\n%s", s, d)
		}
	}
}

// TestSimulateRejects checks that each kind of broken program is reported,
// with the words a caller can look for.
func TestSimulateRejects(t *testing.T) {
	cases := []struct {
		name, want string
		prog       func() *ir.Program
		opts       SimOptions
	}{
		{"header", "bad header", func() *ir.Program {
			p := New(ir.AllReduce, 2, 1).Build()
			p.NRanks = 3
			return p
		}, SimOptions{}},
		{"chunk out of range", "rank 0 tb 0 step 0: i chunk 1 of rank 0 out of range (1 chunks)", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Copy(2, I(0), O(0))
			return b.Build()
		}, SimOptions{}},
		{"channel out of range", "channel 0 out of range", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Copy(1, I(0), O(0)).Signal(0)
			return b.Build()
		}, SimOptions{}},
		{"dependency out of range", "dependency on tb 4", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Copy(1, I(0), O(0)).Dep(4, 0)
			return b.Build()
		}, SimOptions{}},
		{"peer out of range", "send to rank 5", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.TB(5, -1, 0).Send(1, I(0))
			return b.Build()
		}, SimOptions{}},
		{"undefined read", "reads undefined o chunk 0 of rank 0", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Copy(1, O(0), O(0))
			return b.Build()
		}, SimOptions{}},
		{"undefined scratch", "reads undefined scratch chunk 0", func() *ir.Program {
			b, rb := oneRankAR(1, 1, ir.Simple)
			rb.PrimTB().Copy(1, S(0), O(0))
			return b.Build()
		}, SimOptions{}},
		{"packet written twice", "writes packet slot 0 of rank 0 twice in launch 0", func() *ir.Program {
			b, rb := oneRankAR(1, 1, ir.LL)
			rb.PrimTB().Copy(1, I(0), Packet(S(0))).Copy(1, I(0), Packet(S(0))).Copy(1, Packet(S(0)), O(0))
			return b.Build()
		}, SimOptions{}},
		{"deadlock", "stuck (deadlock): rank 0 tb 0 launch 0 slice 0 step 0 (wait)", func() *ir.Program {
			b := New(ir.AllReduce, 2, 1)
			b.Connect(0, 1, ir.MemoryChannel, 0, 0)
			for r := range 2 {
				b.Rank(r).PrimTB().Wait(0).Signal(0).Copy(1, I(0), O(0))
			}
			return b.Build()
		}, SimOptions{}},
		{"barrier short", "stuck", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Barrier(0, 2).Copy(1, I(0), O(0))
			return b.Build()
		}, SimOptions{}},
		{"barrier over", "2 threadblocks arrive at barrier 0 of 1", func() *ir.Program {
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Barrier(0, 1).Copy(1, I(0), O(0))
			rb.PrimTB().Barrier(0, 1)
			return b.Build()
		}, SimOptions{}},
		{"new launch waits for the rank", "stuck", func() *ir.Program {
			// tb 1 waits for a dependency that tb 0 publishes only in the
			// next launch, which cannot start before tb 1 ends.
			b, rb := oneRankAR(1, 0, ir.Simple)
			rb.PrimTB().Copy(1, I(0), O(0)).Nop().Publish()
			rb.PrimTB().Nop().Dep(0, 1).Nop().Dep(0, 1)
			p := b.Build()
			p.Ranks[0].TBs[1].Ops[1].Deps[0].Step = 3
			return p
		}, SimOptions{Launches: 2}},
		{"unreceived", "connection rank 0 -> rank 1 channel 0 has 1 unreceived transfers", func() *ir.Program {
			b := New(ir.AllGather, 2, 1)
			for r := range 2 {
				b.Rank(r).PrimTB().Copy(1, I(0), O(int64(r)))
			}
			b.Rank(0).TB(1, -1, 0).Send(1, I(0))
			b.Rank(1).PrimTB().Copy(1, I(0), O(0))
			return b.Build()
		}, SimOptions{}},
		{"unbalanced", "rank 1 channel 0 unbalanced: inbound 1, expected 0, init 0", func() *ir.Program {
			b := New(ir.AllReduce, 2, 1)
			b.Connect(0, 1, ir.MemoryChannel, 0, 0)
			b.Rank(0).PrimTB().Signal(0)
			for r := range 2 {
				b.Rank(r).PrimTB().Copy(1, I(0), O(0))
			}
			return b.Build()
		}, SimOptions{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Simulate(c.prog(), c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
			if errors.Is(err, ErrPostcondition) {
				t.Errorf("%v is not a postcondition error", err)
			}
		})
	}
}

// TestSimulatePostcondition checks a wrong output: the error wraps
// ErrPostcondition, names the chunk, and the outputs are still returned.
func TestSimulatePostcondition(t *testing.T) {
	b, rb := oneRankAR(2, 0, ir.Simple)
	rb.PrimTB().Copy(1, I(0), O(0)).Copy(1, I(0), O(1))
	res, err := Simulate(b.Build(), SimOptions{Slices: 2})
	if !errors.Is(err, ErrPostcondition) {
		t.Fatalf("got %v, want ErrPostcondition", err)
	}
	if want := "rank 0 launch 0 slice 1 output chunk 1: want {L0S1:r0.1}, got {L0S1:r0.0}"; !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
	got := res.Output(0, 0, 1, 3)
	want := []Value{{{Slice: 1, Chunk: 0}: 1}, {{Slice: 1, Chunk: 0}: 1}, nil}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("outputs (-want +got):\n%s", d)
	}
}

func TestValueString(t *testing.T) {
	v := Value{{Launch: 1, Slice: 0, Rank: 2, Chunk: 3}: 2, {Rank: 0, Chunk: 1}: 1}
	if got, want := v.String(), "{L0S0:r0.1 L1S0:r2.3x2}"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := Value(nil).String(); got != "<undefined>" {
		t.Errorf("nil String() = %q", got)
	}
}
