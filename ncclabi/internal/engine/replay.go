package engine

import (
	"strconv"

	"github.com/theseus-ccl/theseus/cuda"
	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// ArmReplay implements abi.Replayer on the CUDA backend: the
// communicator's record (one per communicator, made at the first call)
// armed by runtime/comm to repeat op from its launch plan, which Run has just served on the
// stream it used. It returns the record's address, or 0 when the
// communicator did not arm it (comm.Comm.ArmReplay's reasons) or the
// backend is not cuda.
func (c *Comm) ArmReplay(op *abi.Op, k replay.Key) uintptr {
	if c.e.name != "cuda" {
		return 0
	}
	coll, ok := op.Coll.IR()
	ref := c.lastSt.Load()
	if !ok || ref == nil || ref.value != op.Stream {
		c.streamMisses.Add(1)
		return 0
	}
	r := c.rec.Load()
	if r == nil {
		if r = replay.New(); r == nil {
			return 0
		}
		if !c.rec.CompareAndSwap(nil, r) {
			r = c.rec.Load() // another thread's (records are never freed)
		}
	}
	call := callOf(op, coll, ref.st)
	if !c.c.ArmReplay(r, &call, k) {
		return 0
	}
	return r.Addr()
}

// ReplayMisses implements abi.Replayer: the communicator's refusals
// (comm.Comm.ReplayRefusals), the calls whose stream was not the one the
// engine served last, and the armed record's misses and declines
// (replay.Record.Misses).
func (c *Comm) ReplayMisses() string {
	if c.e.name != "cuda" {
		return ""
	}
	s := c.c.ReplayRefusals()
	add := func(what string, n int64) {
		if n > 0 {
			if s != "" {
				s += ", "
			}
			s += what + " " + strconv.FormatInt(n, 10)
		}
	}
	add("another stream", c.streamMisses.Load())
	if r := c.rec.Load(); r != nil {
		c.c.SyncReplay()
		m, d := r.Misses()
		add("no entry", m)
		add("declined", d)
	}
	return s
}

// DisarmReplay implements abi.Replayer.
func (c *Comm) DisarmReplay() {
	if r := c.rec.Load(); r != nil {
		r.Disarm()
	}
}

// SyncReplay implements abi.Replayer.
func (c *Comm) SyncReplay() uint64 {
	if c.rec.Load() == nil {
		return 0
	}
	c.c.SyncReplay()
	return c.c.Replayed()
}

// LaunchTime implements abi.LaunchTimer: the launches of this
// communicator's calls on the CUDA backend that were timed
// (THESEUS_TIME_LAUNCHES=1) and the time spent inside cuLaunchKernel for
// them, those made from C included.
func (c *Comm) LaunchTime() (launches, ns int64) {
	if c.e.name != "cuda" {
		return 0, 0
	}
	c.e.mu.Lock()
	for k, st := range c.e.streams {
		if cs, ok := st.(*cuda.Stream); ok && k.family == c.wrap {
			n, d := cs.LaunchTime()
			launches += n
			ns += int64(d)
		}
	}
	c.e.mu.Unlock()
	if r := c.rec.Load(); r != nil {
		c.c.SyncReplay()
		n, d := r.LaunchTime()
		launches += n
		ns += d
	}
	return launches, ns
}
