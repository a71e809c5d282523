package comm

import (
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// Replay from C (runtime/replay; docs/design/cuda.md, "Replay from C").
//
// After a call that Collective served on its repeat path, ArmReplay lets
// a replay record launch the same call again from C, up to the selector's
// next epoch, each launch as the repeat path would have made it. Any later
// use of the communicator (a call, Finalize, Destroy, Split, Stats)
// disarms the record and counts its calls first, as if each had gone
// through Collective (replaySync); an asynchronous error, Destroy and
// Abort poison it from any goroutine, so that no call made from C follows
// them.

// ArmReplay arms r to repeat call, the call Collective has just served,
// whose C key is k: r is filled and armed when call took the repeat path
// (or set it up) and its next repeat would too, on a stream that can
// repeat launches from C (device.Replayer). It reports whether r was
// armed. r must be off with its count taken (a record used only through
// this communicator is: replaySync disarms and takes it). The caller must
// not call any other method of the communicator while r may be used,
// except AsyncError: each of them disarms it first.
func (c *Comm) ArmReplay(r *replay.Record, call *Call, k replay.Key) bool {
	if r == nil || call == nil || call.Stream == nil {
		return false
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	h := &c.hot
	if !h.ok || h.st != call.Stream ||
		h.call != (validated{call.Send, call.Recv, call.Count, call.Root, call.Coll, call.DataType, call.RedOp}) ||
		commState(c.state.Load()) != live || c.asyncErr.Load() != nil {
		return false
	}
	id, left := c.sel.RepeatBudget(h.key)
	if left < 1 || id != c.last.Schedule {
		return false
	}
	base, ok := c.exec.ArmReplay(h.tok, call.Stream, r)
	if !ok {
		return false
	}
	// The poison pointer first, then the checks again after arming: an
	// asynchronous error or an Abort either sees r (and poisons it after
	// Arm cleared the poison) or is seen here.
	c.replayPoison.Store(r)
	if !r.Arm(k, int64(left), base) {
		return false
	}
	c.replay = r
	if commState(c.state.Load()) != live || c.asyncErr.Load() != nil {
		r.Poison()
	}
	return true
}

// SyncReplay counts the calls a replay record made since the last call
// (ArmReplay), disarming it: for callers that read the counters (Stats
// does it itself).
func (c *Comm) SyncReplay() {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
}

// Replayed is the number of calls made from replay records and counted so
// far (SyncReplay counts the latest). Safe from any goroutine.
func (c *Comm) Replayed() uint64 { return c.replayed.Load() }

// replaySync disarms the armed record, if any, and counts its calls as
// Collective's repeat path would have counted them: the communicator's,
// the selector's and the executor's counters, and the last call's launch.
// The caller holds callMu.
func (c *Comm) replaySync() {
	r := c.replay
	if r == nil {
		return
	}
	c.replay = nil
	r.Disarm()
	n := r.Take()
	if n <= 0 {
		return
	}
	un := uint64(n)
	c.calls += un
	c.repeats += un
	c.sel.Repeated(int(n))
	c.exec.Replayed(un)
	c.last.Launch = c.exec.LaunchCounter()
	c.replayed.Add(un)
}

// poisonReplay poisons the last record armed: no call made from C after
// this returns (a call in progress may finish its launch).
func (c *Comm) poisonReplay() {
	if r := c.replayPoison.Load(); r != nil {
		r.Poison()
	}
}
