package comm

import (
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/replay"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

// Replay from C (runtime/replay; docs/design/cuda.md, "Replay from C").
//
// After a call that Collective served on its repeat path (or set up for
// it), ArmReplay adds it to a replay record's entries, which already hold
// up to replay.Entries-1 earlier such calls on the same stream, and arms
// the record: C code may then launch any of them again, up to the
// selector's next epoch, each launch as the repeat path would have made
// it. Any later use of the communicator (a call, Finalize, Destroy, Split,
// Stats) disarms the record and counts its calls first, as if each had
// gone through Collective, and makes the last of them the communicator's
// last call (replaySync); an asynchronous error, Destroy and Abort poison
// it from any goroutine, so that no call made from C follows them.
//
// An entry is kept while its call would still take the same path: its
// executor entries not dropped and its schedule (L1 entry) the last call's
// (executor.ReplayUsable: a switch between schedules rebases semaphores,
// which only the Go path does), the selector's cached answer for it
// unchanged, and the calls on the same stream.

// replayState is a communicator's record and its entries, in the
// record's order (callMu).
type replayState struct {
	rec  *replay.Record
	st   device.Stream
	ents []replayEntry
	gen  uint64 // the selector's CacheGen when the entries were last checked
	cur  int    // the entry of the communicator's last call
	next int    // the entry the next new call replaces when all are in use
}

// replayEntry is one entry: the call's C key, its selector key and
// answer, and its executor entries.
type replayEntry struct {
	key   replay.Key
	skey  selector.Key
	info  CallInfo
	sched *executor.Schedule
	exec  executor.ReplayEntry
}

// ArmReplay adds call, the call Collective has just served, whose C key
// is k, to r's entries and arms r: call is added when it took the repeat
// path (or set it up) and its next repeat would too, on a stream that can
// repeat launches from C (device.Replayer). It reports whether r was
// armed. A communicator uses one record: r replaces the previous one's
// entries. The caller must not call any other method of the communicator
// while r may be used, except AsyncError: each of them disarms it first.
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
	rs := &c.rp
	if rs.rec != r || rs.st != call.Stream {
		*rs = replayState{rec: r, st: call.Stream, ents: rs.ents[:0], gen: c.sel.CacheGen()}
	}
	c.replayKeep()
	i := -1
	for j := range rs.ents {
		if rs.ents[j].key == k {
			i = j
			break
		}
	}
	if i < 0 {
		if len(rs.ents) < replay.Entries {
			i = len(rs.ents)
			rs.ents = append(rs.ents, replayEntry{})
		} else {
			i = rs.next % replay.Entries
			rs.next = i + 1
		}
	}
	re, ok := c.exec.ArmReplay(h.tok, call.Stream, r, i)
	if !ok {
		// Entry i is lost (a new one, or a call that now takes another
		// path): the record stays off until a call can be armed.
		c.replayDrop(i)
		return false
	}
	rs.ents[i] = replayEntry{key: k, skey: h.key, info: CallInfo{Schedule: id, Name: c.last.Name}, sched: c.lastSched, exec: re}
	rs.cur = i
	// Layout ids: an entry's is the first entry's index with its layout.
	lastSig := int32(-1)
	for j := range rs.ents {
		sig := int32(j)
		for q := range j {
			if rs.ents[q].exec.SameLayout(rs.ents[j].exec) {
				sig = int32(q)
				break
			}
		}
		r.SetEntryKey(j, rs.ents[j].key, sig, rs.ents[j].exec.FenceAll())
		if lastSig < 0 && c.exec.LastLayout(rs.ents[j].exec) {
			lastSig = sig
		}
	}
	// The backend cleared the poison when it filled r (SetLaunch); from
	// here on an asynchronous error or an Abort sees r and poisons it (Arm
	// then refuses it, or a C call declines it), or happened before the
	// check after arming, which poisons it.
	c.replayPoison.Store(r)
	if !r.Arm(len(rs.ents), int64(left), c.exec.LaunchCounter(), lastSig) {
		return false
	}
	c.hot.armed = true
	if commState(c.state.Load()) != live || c.asyncErr.Load() != nil {
		r.Poison()
	}
	return true
}

// replayKeep drops the entries whose calls would no longer take the path
// their launches were made for, moving the others up in the record. The
// record is off.
func (c *Comm) replayKeep() {
	rs := &c.rp
	gen := c.sel.CacheGen()
	keep := rs.ents[:0]
	for j, e := range rs.ents {
		if !c.exec.ReplayUsable(e.exec) {
			continue
		}
		if gen != rs.gen {
			if id, ok := c.sel.Cached(e.skey); !ok || id != e.info.Schedule {
				continue
			}
		}
		if n := len(keep); n != j {
			rs.rec.CopyEntry(n, j)
		}
		keep = append(keep, e)
	}
	clear(rs.ents[len(keep):])
	rs.ents, rs.gen = keep, gen
}

// replayDrop removes entry i, moving the last entry into its place.
func (c *Comm) replayDrop(i int) {
	rs := &c.rp
	last := len(rs.ents) - 1
	if i < 0 || i > last {
		return
	}
	if i != last {
		rs.rec.CopyEntry(i, last)
		rs.ents[i] = rs.ents[last]
	}
	rs.ents[last] = replayEntry{}
	rs.ents = rs.ents[:last]
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
// Collective would have counted them (the communicator's, the selector's
// and the executor's counters), with the last of them the last call. The
// caller holds callMu.
func (c *Comm) replaySync() {
	if !c.hot.armed {
		return
	}
	c.hot.armed = false
	r := c.rp.rec
	r.Disarm()
	t := r.Take()
	if t.Calls <= 0 {
		return
	}
	n := uint64(t.Calls)
	c.calls += n
	c.repeats += n
	c.sel.Repeated(int(n))
	rs := &c.rp
	var last *executor.ReplayEntry
	if t.Last >= 0 && t.Last < len(rs.ents) {
		e := &rs.ents[t.Last]
		last = &e.exec
		if t.Last != rs.cur {
			// Another entry's call was the last: the repeat path is for
			// the communicator's own last call only.
			c.hot.ok = false
			c.last, c.lastSched = e.info, e.sched
			rs.cur = t.Last
		}
	}
	c.exec.Replayed(n, uint64(t.Fenced), last)
	c.last.Launch = c.exec.LaunchCounter()
	c.replayed.Add(n)
}

// poisonReplay poisons the last record armed: no call made from C after
// this returns (a call in progress may finish its launch).
func (c *Comm) poisonReplay() {
	if r := c.replayPoison.Load(); r != nil {
		r.Poison()
	}
}
