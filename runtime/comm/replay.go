package comm

import (
	"strconv"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// The C launcher of plans (runtime/replay; docs/design/runtime.md,
// "Launchers"; docs/ncclabi.md, "Launches from C").
//
// After a call that Collective served from a kept plan (or whose full path
// has just kept one), ArmReplay adds the plan's launch to a replay
// record's entries, which already hold up to replay.Entries-1 earlier such
// plans on the same stream, and arms the record: C code may then launch
// any of them again, up to the selector's next epoch, each launch as
// executor.Launch would have made it. Any later use of the communicator (a
// call, Finalize, Destroy, Split, Stats) disarms the record and counts its
// calls first, as launches of those plans (replaySync: the communicator's
// calls, the selector's requests, the executor's plan launches), and makes
// the last of them the communicator's last call; an asynchronous error,
// Destroy and Abort poison it from any goroutine, so that no call made
// from C follows them.
//
// An entry is kept while its plan would still serve its call from C: the
// executor says a launcher outside Go may repeat it on the record's stream
// (executor.Repeatable: the plan valid, its schedule the running one, no
// peer's buffers to check, the stream the last launch's), and the
// selector's cache generation is the plan's.

// replayState is a communicator's record and its entries, in the
// record's order (callMu).
type replayState struct {
	rec  *replay.Record
	st   device.Stream
	ents []replayEntry
	next int // the entry the next new call replaces when all are in use
}

// replayEntry is one entry: the call's C key and its kept plan.
type replayEntry struct {
	key replay.Key
	planEntry
}

// ArmReplay adds call, the call Collective has just served, whose C key
// is k, to r's entries and arms r: call is added when a kept plan served
// it (or its full path has just kept one) and a launcher outside Go may
// repeat that plan on call.Stream (executor.Repeatable), a stream whose
// launches can be described to C (device.ImageExporter). It reports
// whether r was armed. A communicator uses one record: r replaces the
// previous one's entries. The caller must not call any other method of
// the communicator while r may be used, except AsyncError: each of them
// disarms it first.
func (c *Comm) ArmReplay(r *replay.Record, call *Call, k replay.Key) bool {
	if r == nil || call == nil || call.Stream == nil {
		return false
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	why := c.armRefusal(call)
	if why != refusedNone {
		c.refusals[why]++
		return false
	}
	pe := c.plans[c.cur]
	left := c.sel.Budget()
	ie := call.Stream.(device.ImageExporter)
	rs := &c.rp
	if rs.rec != r || rs.st != call.Stream {
		*rs = replayState{rec: r, st: call.Stream, ents: rs.ents[:0]}
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
	// Cleared before the stream registers r to stop it: a Stop from then
	// on (the stream closed, ranks sharing the context) sticks, and Arm
	// refuses r.
	r.Clear()
	im, ok := ie.LaunchImage(pe.plan.Prepared(), r)
	if !ok || !r.SetEntry(i, im) {
		// Entry i is lost (a new one, or a call that now takes another
		// path): the record stays off until a call can be armed.
		c.replayDrop(i)
		c.refusals[refusedImage]++
		return false
	}
	rs.ents[i] = replayEntry{key: k, planEntry: pe}
	// Layout ids: an entry's is the first entry's index with its layout.
	lastSig := int32(-1)
	for j := range rs.ents {
		sig := int32(j)
		for q := range j {
			if rs.ents[q].plan.SameLayout(rs.ents[j].plan) {
				sig = int32(q)
				break
			}
		}
		r.SetEntryKey(j, rs.ents[j].key, sig, c.exec.FenceEvery(rs.ents[j].plan))
		if lastSig < 0 && c.exec.LastLayout(rs.ents[j].plan) {
			lastSig = sig
		}
	}
	// From here on an asynchronous error or an Abort sees r and poisons it
	// (Arm then refuses it, or a C call declines it), or happened before
	// the check after arming, which poisons it.
	c.replayPoison.Store(r)
	if !r.Arm(len(rs.ents), int64(left), c.exec.LaunchCounter(), lastSig) {
		c.refusals[refusedArm]++
		return false
	}
	c.armed = true
	if commState(c.state.Load()) != live || c.asyncErr.Load() != nil {
		r.Poison()
	}
	return true
}

// Why ArmReplay did not arm a record (ReplayRefusals).
const (
	refusedNone   = iota
	refusedTraced // the communicator is traced: every call comes through Go with its spans (trace.go)
	refusedNoPlan // the call kept no plan (served by a walk that keeps none)
	refusedState  // finalized, destroyed, aborted or revoked, or an asynchronous error
	refusedStream // the stream cannot describe its launches to C (not a device.ImageExporter)
	refusedEpoch  // the selector's next epoch is due, or its cache generation moved
	refusedPeers  // the plan reaches peers' buffers, whose identity only Go checks
	refusedStale  // the plan is no longer valid
	refusedPath   // not the stream's plain launch path (another stream, a capture's layout)
	refusedImage  // the stream gave no launch image (staging copies, shared context, closed)
	refusedArm    // the record was stopped meanwhile
	numRefusals
)

var refusalNames = [numRefusals]string{"", "traced", "no plan", "state", "stream", "epoch", "peers' buffers",
	"stale plan", "not the plain path", "no launch image", "stopped"}

// armRefusal is the reason ArmReplay must not arm a record for call
// (refusedNone when it may go on).
func (c *Comm) armRefusal(call *Call) int {
	switch {
	case c.traced:
		return refusedTraced
	case c.cur < 0 || !c.curCall.matches(call):
		return refusedNoPlan
	case commState(c.state.Load()) != live || c.asyncErr.Load() != nil:
		return refusedState
	}
	if _, ok := call.Stream.(device.ImageExporter); !ok {
		return refusedStream
	}
	pe := c.plans[c.cur]
	switch {
	case c.sel.Budget() < 1 || pe.selGen != c.sel.CacheGen():
		return refusedEpoch
	case pe.plan.ReachesPeers():
		return refusedPeers
	case !c.exec.Valid(pe.plan):
		return refusedStale
	case !c.exec.Repeatable(pe.plan, call.Stream):
		return refusedPath
	}
	return refusedNone
}

// ReplayRefusals describes why calls of this communicator were not made
// repeatable from C (ArmReplay's refusals, by reason, in a fixed order:
// "traced 12, no plan 3"); "" when none was refused.
func (c *Comm) ReplayRefusals() string {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	var b []byte
	for i := refusedNone + 1; i < numRefusals; i++ {
		if n := c.refusals[i]; n > 0 {
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = append(b, refusalNames[i]...)
			b = append(b, ' ')
			b = strconv.AppendUint(b, n, 10)
		}
	}
	return string(b)
}

// replayKeep drops the entries whose plans would no longer serve their
// calls from C, moving the others up in the record. The record is off.
func (c *Comm) replayKeep() {
	rs := &c.rp
	gen := c.sel.CacheGen()
	keep := rs.ents[:0]
	for j, e := range rs.ents {
		if e.selGen != gen || !c.exec.Repeatable(e.plan, rs.st) {
			continue
		}
		if n := len(keep); n != j {
			rs.rec.CopyEntry(n, j)
		}
		keep = append(keep, e)
	}
	clear(rs.ents[len(keep):])
	rs.ents = keep
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
// launches of their plans (the communicator's calls, the selector's
// requests, the executor's plan launches), with the last of them the last
// call. The caller holds callMu.
func (c *Comm) replaySync() {
	if !c.armed {
		return
	}
	c.armed = false
	r := c.rp.rec
	r.Disarm()
	t := r.Take()
	if t.Calls <= 0 {
		return
	}
	n := uint64(t.Calls)
	c.calls += n
	c.sel.Served(int(n))
	var last *executor.Plan
	if rs := &c.rp; t.Last >= 0 && t.Last < len(rs.ents) {
		e := &rs.ents[t.Last]
		last = e.plan
		c.last, c.lastSched = e.info, e.plan.Schedule()
		if c.cur < 0 || c.curPlan != e.plan {
			cur := -1
			for i := range c.plans {
				if c.plans[i].plan == e.plan {
					cur = i
					break
				}
			}
			c.setCur(cur, true)
		}
	}
	c.exec.PlansLaunched(n, uint64(t.Fenced), last)
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
