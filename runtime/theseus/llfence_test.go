//go:build linux

package theseus

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// TestLLBackToBack: many back-to-back LL launches on 4 ranks, each with its
// own buffers and nothing waiting between them, must all complete with the
// right values, fenced exactly as the executor's rule says
// (docs/executor.md, "Fences"). A direct LL broadcast gives its root no
// back-pressure: without the launch fence the root runs two launches ahead
// and overwrites the scratch half a slow reader still polls (a hang until
// the timeout), so every repeated launch is fenced. The one-shot
// allreduce and the direct allgather read a packet from every peer they
// write to (verify.SelfFencedLL), so their repeated launches are not
// fenced unless THESEUS_LL_FENCE=1; a ring of 4 is not proved (each rank
// hears only from its predecessor) and stays fenced.
func TestLLBackToBack(t *testing.T) {
	const n = 4
	cases := []struct {
		algo    string
		coll    ir.Collective
		llFence bool // THESEUS_LL_FENCE=1
		fenced  bool // every repeated launch
	}{
		{"direct", ir.Broadcast, false, true},
		{"oneshot", ir.AllReduce, false, false},
		{"oneshot", ir.AllReduce, true, true},
		{"direct", ir.AllGather, false, false},
		{"ring", ir.AllReduce, false, true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_%v_llfence=%v", tc.algo, tc.coll, tc.llFence), func(t *testing.T) {
			if tc.llFence {
				t.Setenv("THESEUS_LL_FENCE", "1")
				env.Reset()
				t.Cleanup(env.Reset)
			}
			dir := t.TempDir()
			if err := commtest.Write(dir, n, commtest.DefaultAttrs, []commtest.Sched{
				{Algo: tc.algo, Coll: tc.coll, Protocol: ir.LL, Replaces: -1},
			}); err != nil {
				t.Fatal(err)
			}
			llBackToBack(t, commsIn(t, n, dir, nil), tc.coll, tc.fenced)
		})
	}
}

// llBackToBack runs 40 launches of coll (count 64 int32 per rank's
// block) on every rank's own stream without waiting between them, after
// one that makes its schedule the last launched, checks every output and
// the fences every rank's executor counted over the 40: all or none. The
// schedules must be LL ones.
func llBackToBack(t *testing.T, comms []*Comm, coll ir.Collective, fenced bool) {
	t.Helper()
	n := len(comms)
	const count, launches = 64, 40
	// val is rank r's input element i at launch l.
	val := func(l, r, i int) uint32 { return uint32(100000*l + 1000*r + i) }
	want := func(l, r, i int) uint32 {
		switch coll {
		case ir.Broadcast:
			return val(l, 0, i)
		case ir.AllReduce:
			s := uint32(0)
			for q := range n {
				s += val(l, q, i)
			}
			return s
		default: // allgather: block q of the output is rank q's input
			return val(l, i/count, i%count)
		}
	}
	outCount := count
	if coll == ir.AllGather {
		outCount = n * count
	}
	before := make([]uint64, n)
	res := onEach(comms, func(c *Comm) error {
		r := c.Rank()
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		recv := make([][]byte, launches)
		sp := make([]Ptr, launches)
		rp := make([]Ptr, launches)
		for l := range launches {
			var err error
			if sp[l], err = c.MemAlloc(4 * count); err != nil {
				return err
			}
			if rp[l], err = c.MemAlloc(4 * int64(outCount)); err != nil {
				return err
			}
			send, _ := c.HostBytes(sp[l], 4*count)
			recv[l], _ = c.HostBytes(rp[l], 4*int64(outCount))
			for i := range count {
				binary.LittleEndian.PutUint32(send[4*i:], val(l, r, i))
			}
		}
		// Launch -1 (launch 0's buffers, rewritten by launch 0) makes the
		// schedule the last one launched: launch 0 is then a repeat.
		for i := -1; i < launches; i++ {
			if i == 0 {
				if err := s.Synchronize(); err != nil {
					return err
				}
				before[r] = c.Stats().Executor.Fences
			}
			l := max(i, 0)
			var err error
			switch coll {
			case ir.Broadcast:
				err = c.Broadcast(sp[l], rp[l], count, Int32, 0, s)
			case ir.AllReduce:
				err = c.AllReduce(sp[l], rp[l], count, Int32, Sum, s)
			default:
				err = c.AllGather(sp[l], rp[l], count, Int32, s)
			}
			if err != nil {
				return err
			}
			if name := c.LastCall().Name; !strings.Contains(name, "_ll") {
				return fmt.Errorf("schedule %s is not an LL one", name)
			} else if i == 0 && r == 0 {
				t.Logf("schedule %s", name)
			}
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		for l := range launches {
			for i := range outCount {
				if got := binary.LittleEndian.Uint32(recv[l][4*i:]); got != want(l, r, i) {
					return fmt.Errorf("launch %d element %d = %d, want %d", l, i, got, want(l, r, i))
				}
			}
		}
		return nil
	})
	for r, err := range res {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, c := range comms {
		got := c.Stats().Executor.Fences - before[r]
		wantFences := uint64(0)
		if fenced {
			wantFences = launches
		}
		if got != wantFences {
			t.Errorf("rank %d: %d fenced launches of %d, want %d", r, got, launches, wantFences)
		}
	}
}

// TestLLBackToBackAcrossNodes: the same on 2 simulated nodes of 2 ranks
// (UCX over TCP between them), on the default context: the small
// allreduce and allgather it picks read a packet from every peer they write
// to, across nodes through the proxies too, so their repeated launches are
// not fenced: no fence round trip through both proxies before each
// launch's data (docs/known-issues.md §25).
func TestLLBackToBackAcrossNodes(t *testing.T) {
	needUCX(t)
	comms := nodeComms(t, 2, 2, "")
	for _, coll := range []ir.Collective{ir.AllReduce, ir.AllGather} {
		t.Run(coll.String(), func(t *testing.T) {
			llBackToBack(t, comms, coll, false)
		})
	}
}
