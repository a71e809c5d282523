package abi

import "testing"

// ncclSend and ncclRecv are never armed for a launch from C: they run on
// the point-to-point engine (runP2P), whose plans are not replay records'
// entries, so the engine's ArmReplay is never asked for them, with or
// without a fallback NCCL. The C side's replay try for them therefore
// always misses, and the list of calls that can be launched from C
// (docs/ncclabi.md, "Launches from C") must not include them.
func TestReplayNeverArmsPointToPoint(t *testing.T) {
	for _, withFB := range []bool{false, true} {
		h := newHarness(t, "cuda", withFB)
		h.e.replay = true
		h.l.Replay = true
		hd := h.initWorld(1, Config{Blocking: 1})[0]
		c, _ := h.l.find(hd, "test")
		eng, _ := c.engine()
		rc := eng.(*replayComm)
		th := newThread()
		for _, op := range []*Op{
			{Coll: CollSend, Send: 0x1000, Count: 16, DataType: 7, Root: 0, Stream: 0x77},
			{Coll: CollRecv, Recv: 0x2000, Count: 16, DataType: 7, Root: 0, Stream: 0x77},
		} {
			for i := 0; i < 3; i++ { // repeats: the arming would come after a repeat
				if r := h.l.Coll(th, hd, op); r != Success {
					t.Errorf("%v (fallback %v): %v, want Success (the point-to-point engine)", op.Coll, withFB, r)
				}
				if op.Replay != 0 {
					t.Errorf("%v (fallback %v) was armed for a launch from C", op.Coll, withFB)
				}
			}
		}
		if arms, _ := rc.counts(); arms != 0 {
			t.Errorf("fallback %v: ArmReplay asked %d times for ncclSend/ncclRecv, want 0", withFB, arms)
		}
	}
}
