package abi

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// replayComm is a fakeComm that is a Replayer: it arms every call
// (returning a fake address) and counts what the library asks of it.
type replayComm struct {
	*fakeComm
	rmu      sync.Mutex
	armed    []replay.Key
	disarms  int
	replayed uint64 // what SyncReplay reports
}

func (c *replayComm) ArmReplay(op *Op, k replay.Key) uintptr {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.armed = append(c.armed, k)
	return 0xabc0
}

func (c *replayComm) DisarmReplay() {
	c.rmu.Lock()
	c.disarms++
	c.rmu.Unlock()
}

func (c *replayComm) SyncReplay() uint64 {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.replayed
}

func (c *replayComm) ReplayMisses() string { return "no entry 3" }

func (c *replayComm) counts() (arms, disarms int) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return len(c.armed), c.disarms
}

func replayHarness(t *testing.T) (*harness, uintptr, *replayComm) {
	h := newHarness(t, "cuda", false)
	h.e.replay = true
	h.l.Replay = true
	hd := h.initWorld(1, Config{Blocking: 1})[0]
	c, _ := h.l.find(hd, "test")
	eng, _ := c.engine()
	return h, hd, eng.(*replayComm)
}

// A data call served natively outside a group arms the engine's record
// with the call's key (Op.ReplayKey) and hands its address back in
// Op.Replay; in a group, with a counts matrix, with THESEUS_REPLAY off or
// while INFO COLL lines are logged, nothing is armed.
func TestReplayArmed(t *testing.T) {
	h, hd, rc := replayHarness(t)
	th := newThread()
	op := allReduce(256)
	op.Stream = 0x77
	if r := h.l.Coll(th, hd, op); r != Success {
		t.Fatalf("Coll: %v", r)
	}
	if op.Replay != 0xabc0 {
		t.Errorf("Op.Replay = %#x, want the engine's record 0xabc0", op.Replay)
	}
	want := replay.Key{uint64(CollAllReduce), 0x1000, 0x2000, 256, 7, 0, ^uint64(0), 0x77}
	if d := cmp.Diff([]replay.Key{want}, rc.armed); d != "" {
		t.Errorf("keys armed (-want +got):\n%s", d)
	}

	// In a group.
	h.l.GroupStart(th)
	g := allReduce(256)
	if r := h.l.Coll(th, hd, g); r != Success {
		t.Fatalf("Coll in a group: %v", r)
	}
	if r := h.l.GroupEnd(th); r != Success {
		t.Fatalf("GroupEnd: %v", r)
	}
	if g.Replay != 0 {
		t.Error("a call in a group was armed")
	}
	// Off.
	h.l.Replay = false
	off := allReduce(256)
	h.l.Coll(th, hd, off)
	if off.Replay != 0 {
		t.Error("armed with Library.Replay off")
	}
	h.l.Replay = true
	// INFO COLL logged.
	var discard strings.Builder
	log.SetOutput(&discard)
	log.SetLevel(log.Info, log.Coll)
	logged := allReduce(256)
	h.l.Coll(th, hd, logged)
	log.SetLevel(log.Warn, log.Init)
	log.SetOutput(os.Stderr)
	if logged.Replay != 0 {
		t.Error("armed a call whose INFO COLL line is logged")
	}
	if arms, _ := rc.counts(); arms != 1 {
		t.Errorf("%d calls armed, want 1", arms)
	}
}

// Every call on the communicator disarms the record first, except the
// queries a client polls from other threads (ncclCommGetAsyncError,
// ncclCommCount, ncclCommCuDevice, ncclCommUserRank); theseusCommStats
// counts the calls made from C as native.
func TestReplayDisarmed(t *testing.T) {
	h, hd, rc := replayHarness(t)
	_, before := rc.counts()
	h.l.GetAsyncError(hd)
	h.l.Count(hd)
	h.l.CuDevice(hd)
	h.l.UserRank(hd)
	if _, d := rc.counts(); d != before {
		t.Errorf("the queries disarmed the record %d times", d-before)
	}
	h.l.Coll(newThread(), hd, allReduce(16))
	if _, d := rc.counts(); d != before+1 {
		t.Errorf("a data call disarmed the record %d times, want 1", d-before)
	}
	rc.rmu.Lock()
	rc.replayed = 40
	rc.rmu.Unlock()
	s, r := h.l.CommStats(hd)
	if r != Success || s.Native != 41 {
		t.Errorf("CommStats: %+v %v, want 41 native (1 through Go, 40 from C)", s, r)
	}
	// theseusStreamSynchronize keeps the record (a loop that synchronises
	// after every call still launches from C).
	_, before = rc.counts()
	h.l.StreamSync(hd, 0)
	if _, d := rc.counts(); d != before {
		t.Errorf("StreamSync disarmed the record %d times", d-before)
	}
	// ncclResetDebugInit's DisarmReplays stops every communicator's.
	h.l.DisarmReplays()
	if _, d := rc.counts(); d != before+1 {
		t.Errorf("DisarmReplays disarmed the record %d times, want 1", d-before)
	}
	_, before = rc.counts()
	h.l.RedOpDestroy(hd, 5)
	h.l.Finalize(hd)
	if _, d := rc.counts(); d < before+2 {
		t.Errorf("RedOpDestroy and Finalize disarmed the record %d times, want at least 2", d-before)
	}
}
