package replaytest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

func TestLayout(t *testing.T) {
	if d := cmp.Diff(Offsets(), replay.Layout()); d != "" {
		t.Fatalf("struct th_replay (C) against runtime/replay's record (Go), -C +Go:\n%s", d)
	}
}

// launch is a launch part with the fake launch function and a 64-byte
// argument whose counter is at byte 16.
func launch() replay.Launch {
	arg := make([]byte, 64)
	for i := range arg {
		arg[i] = byte(i)
	}
	return replay.Launch{Fn: Fn(), Ctx: 1, Stream: 2, Func: 3, Grid: 4, Threads: 512, Err: ErrWord(), Arg: arg, OffLaunch: 16}
}

func armed(t *testing.T, k replay.Key, left int64, base uint64) *replay.Record {
	t.Helper()
	r := replay.New()
	if r == nil {
		t.Fatal("New: nil")
	}
	if !r.SetLaunch(launch()) {
		t.Fatal("SetLaunch refused a valid launch")
	}
	if !r.Arm(k, left, base) {
		t.Fatal("Arm refused")
	}
	return r
}

func TestCallsUntilBudget(t *testing.T) {
	Reset(replay.Launched)
	SetErr(0)
	k := replay.Key{0, 0x1000, 0x2000, 256, 7, 0, ^uint64(0), 0x55}
	r := armed(t, k, 3, 100)
	var got []bool
	for range 4 {
		got = append(got, Call(r, k))
	}
	if d := cmp.Diff([]bool{true, true, true, false}, got); d != "" {
		t.Errorf("calls launched (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]uint64{101, 102, 103}, Launches()); d != "" {
		t.Errorf("launch counters (-want +got):\n%s", d)
	}
	if !r.Armed() {
		t.Error("a call that found no budget left disarmed the record")
	}
	r.Disarm()
	if r.Armed() {
		t.Error("armed after Disarm")
	}
	if n := r.Take(); n != 3 {
		t.Errorf("Take = %d, want 3", n)
	}
	if n := r.Take(); n != 0 {
		t.Errorf("second Take = %d, want 0", n)
	}
	if Call(r, k) {
		t.Error("a disarmed record launched")
	}
	// Armed again: the counters continue from the new base.
	if !r.Arm(k, 2, 200) {
		t.Fatal("re-Arm refused")
	}
	Call(r, k)
	if l := Launches(); l[len(l)-1] != 201 {
		t.Errorf("after re-arming, launch %d, want 201", l[len(l)-1])
	}
}

func TestDeclines(t *testing.T) {
	k := replay.Key{1, 2, 3, 4, 5, 6, 7, 8}
	for _, c := range []struct {
		name   string
		setup  func(r *replay.Record)
		result int
		key    replay.Key
	}{
		{name: "another key", key: replay.Key{1, 2, 3, 4, 5, 6, 7, 9}},
		{name: "poisoned", setup: func(r *replay.Record) { r.Poison() }},
		{name: "stream failure recorded", setup: func(*replay.Record) { SetErr(1) }},
		{name: "launch declined", result: replay.Declined},
		{name: "launch failed", result: replay.Failed},
	} {
		t.Run(c.name, func(t *testing.T) {
			Reset(c.result)
			SetErr(0)
			defer SetErr(0)
			r := armed(t, k, 5, 0)
			if c.setup != nil {
				c.setup(r)
			}
			key := k
			if c.key != (replay.Key{}) {
				key = c.key
			}
			if Call(r, key) {
				t.Fatal("launched")
			}
			if n := len(Launches()); n != 0 {
				t.Errorf("%d launches recorded", n)
			}
			r.Disarm()
			if n := r.Take(); n != 0 {
				t.Errorf("Take = %d after a declined call", n)
			}
		})
	}
}

func TestArmRefuses(t *testing.T) {
	k := replay.Key{1}
	r := replay.New()
	if r.Arm(k, 1, 0) {
		t.Error("armed without a launch part")
	}
	for _, c := range []struct {
		name string
		l    func(l *replay.Launch)
	}{
		{"no function", func(l *replay.Launch) { l.Fn = 0 }},
		{"no failure record", func(l *replay.Launch) { l.Err = 0 }},
		{"argument too large", func(l *replay.Launch) { l.Arg = make([]byte, replay.ArgBytes+1) }},
		{"counter past the argument", func(l *replay.Launch) { l.OffLaunch = 60 }},
		{"negative offset", func(l *replay.Launch) { l.OffLaunch = -1 }},
	} {
		l := launch()
		c.l(&l)
		if r.SetLaunch(l) {
			t.Errorf("SetLaunch accepted a launch with %s", c.name)
		}
	}
	if !r.SetLaunch(launch()) {
		t.Fatal("SetLaunch refused")
	}
	if r.Arm(k, 0, 0) {
		t.Error("armed with no calls left")
	}
	Reset(replay.Launched)
	SetErr(0)
	if !r.Arm(k, 2, 0) {
		t.Fatal("Arm refused")
	}
	if r.Arm(k, 2, 0) {
		t.Error("armed an armed record")
	}
	if r.SetLaunch(launch()) {
		t.Error("SetLaunch changed an armed record")
	}
	Call(r, k)
	r.Disarm()
	if r.Arm(k, 2, 0) {
		t.Error("armed with a count not taken")
	}
	r.Take()
	if !r.Arm(k, 2, 0) {
		t.Error("Arm refused after Take")
	}
	r.Poison()
	r.Disarm()
	r.Take()
	if !r.Arm(k, 1, 0) || r.Poisoned() {
		t.Error("Arm did not clear the poison")
	}
}

// TestDisarmRace: calls from several goroutines while another disarms;
// after Disarm returns no call launches, and Take counts every launch.
func TestDisarmRace(t *testing.T) {
	Reset(replay.Launched)
	SetErr(0)
	k := replay.Key{3}
	r := armed(t, k, 1<<40, 0)
	var wg sync.WaitGroup
	var stop atomic.Bool
	var launched atomic.Int64
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if Call(r, k) {
					launched.Add(1)
				}
			}
		}()
	}
	for len(Launches()) < 1000 {
	}
	r.Disarm()
	after := len(Launches())
	for range 1000 {
		if Call(r, k) {
			t.Fatal("a call launched after Disarm returned")
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := len(Launches()); n != after {
		t.Errorf("%d launches after Disarm returned", n-after)
	}
	if n := r.Take(); n != int64(after) || n != launched.Load() {
		t.Errorf("Take = %d, launches recorded %d, calls that reported a launch %d", n, after, launched.Load())
	}
	// Each launch had its own counter, 1..n.
	seen := map[uint64]bool{}
	for _, c := range Launches() {
		if seen[c] || c < 1 || c > uint64(after) {
			t.Fatalf("launch counter %d repeated or out of 1..%d", c, after)
		}
		seen[c] = true
	}
}
