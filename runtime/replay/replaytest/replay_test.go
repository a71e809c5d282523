package replaytest

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

func TestLayout(t *testing.T) {
	if d := cmp.Diff(Offsets(), replay.Layout()); d != "" {
		t.Fatalf("struct th_replay and th_replay_entry (C) against runtime/replay's mirror (Go), -C +Go:\n%s", d)
	}
}

// entryLaunch is a launch image with the fake launch function, a 64-byte
// argument whose counter is at byte 16 and fence count at byte 24.
func entryLaunch(nfence int32) device.LaunchImage {
	arg := make([]byte, 64)
	for i := range arg {
		arg[i] = byte(i)
	}
	return device.LaunchImage{Fn: Fn(), Ctx: 1, Queue: 2, Err: ErrWord(), Func: 3, Grid: 4, Threads: 512, NFence: nfence,
		Arg: arg, OffLaunch: 16, OffNFence: 24}
}

type ent struct {
	k        replay.Key
	sig      int32
	fenceAll bool
}

// armed returns a record armed with ents (entry i's fence count is i+1),
// left calls, launch base base and last layout lastSig.
func armed(t *testing.T, ents []ent, left int64, base uint64, lastSig int32) *replay.Record {
	t.Helper()
	r := replay.New()
	if r == nil {
		t.Fatal("New: nil")
	}
	for i, e := range ents {
		if !r.SetEntry(i, entryLaunch(int32(i+1))) {
			t.Fatalf("SetEntry(%d) refused", i)
		}
		r.SetEntryKey(i, e.k, e.sig, e.fenceAll)
	}
	if !r.Arm(len(ents), left, base, lastSig) {
		t.Fatal("Arm refused")
	}
	return r
}

func key(w ...uint64) replay.Key {
	var k replay.Key
	copy(k[:], w)
	return k
}

// Calls launch the entry whose key they carry, with consecutive launch
// counters, fenced when the entry's layout differs from the last launch's
// or it fences every launch, until the budget is spent.
func TestCalls(t *testing.T) {
	Reset(replay.Launched)
	SetErr(0)
	a, b, c := key(0, 0x1000), key(0, 0x2000), key(0, 0x3000)
	r := armed(t, []ent{{a, 0, false}, {b, 1, false}, {c, 0, true}}, 7, 100, 0)
	var got []bool
	for _, k := range []replay.Key{a, a, b, b, a, c, key(0, 0x4000), c, a} {
		got = append(got, Call(r, k))
	}
	if d := cmp.Diff([]bool{true, true, true, true, true, true, false, true, false}, got); d != "" {
		t.Errorf("calls launched (-want +got):\n%s", d)
	}
	want := []Launch{
		{r.Addr(), 0, 101, 0, 0x0706050403020100}, // same layout as the last launch: no fence
		{r.Addr(), 0, 102, 0, 0x0706050403020100},
		{r.Addr(), 1, 103, 2, 0x0706050403020100}, // another layout: fenced (entry 1's count 2)
		{r.Addr(), 1, 104, 0, 0x0706050403020100},
		{r.Addr(), 0, 105, 1, 0x0706050403020100}, // back: fenced
		{r.Addr(), 2, 106, 3, 0x0706050403020100}, // fences every launch
		{r.Addr(), 2, 107, 3, 0x0706050403020100},
	}
	if d := cmp.Diff(want, Launches()); d != "" {
		t.Errorf("launches (-want +got):\n%s", d)
	}
	r.Disarm()
	if d := cmp.Diff(replay.Taken{Calls: 7, Fenced: 4, Last: 2}, r.Take()); d != "" {
		t.Errorf("Take (-want +got):\n%s", d)
	}
	if d := cmp.Diff(replay.Taken{Last: -1}, r.Take()); d != "" {
		t.Errorf("second Take (-want +got):\n%s", d)
	}
	if Call(r, a) {
		t.Error("a disarmed record launched")
	}
	// Armed again: the counters continue from the new base; the last
	// layout is what Arm says.
	if !r.Arm(2, 5, 200, 1) {
		t.Fatal("re-Arm refused")
	}
	Call(r, b)
	if l := Launches(); l[len(l)-1] != (Launch{r.Addr(), 1, 201, 0, 0x0706050403020100}) {
		t.Errorf("after re-arming, %+v", l[len(l)-1])
	}
	Call(r, c) // entry 2 is beyond the 2 armed
	if n := len(Launches()); n != 8 {
		t.Errorf("%d launches, want 8 (entry 2 is not armed)", n)
	}
}

func TestDeclines(t *testing.T) {
	k := key(1, 2, 3, 4, 5, 6, 7, 8)
	for _, c := range []struct {
		name             string
		setup            func(r *replay.Record)
		result           int
		key              replay.Key
		misses, declines int64 // what Misses counts
	}{
		{name: "another key", key: key(1, 2, 3, 4, 5, 6, 7, 9), misses: 1},
		{name: "poisoned", setup: func(r *replay.Record) { r.Poison() }},
		{name: "stream failure recorded", setup: func(*replay.Record) { SetErr(1) }},
		{name: "launch declined", result: replay.Declined, declines: 1},
		{name: "launch failed", result: replay.Failed},
	} {
		t.Run(c.name, func(t *testing.T) {
			Reset(c.result)
			SetErr(0)
			defer SetErr(0)
			r := armed(t, []ent{{k, 0, false}}, 5, 0, 0)
			if c.setup != nil {
				c.setup(r)
			}
			kk := k
			if c.key != (replay.Key{}) {
				kk = c.key
			}
			if Call(r, kk) {
				t.Fatal("launched")
			}
			if n := len(Launches()); n != 0 {
				t.Errorf("%d launches recorded", n)
			}
			r.Disarm()
			if tk := r.Take(); tk.Calls != 0 || tk.Last != -1 {
				t.Errorf("Take = %+v after a declined call", tk)
			}
			if m, d := r.Misses(); m != c.misses || d != c.declines {
				t.Errorf("Misses = %d, %d; want %d, %d", m, d, c.misses, c.declines)
			}
		})
	}
}

func TestArmRefuses(t *testing.T) {
	k := key(1)
	r := replay.New()
	if r.Arm(1, 1, 0, -1) {
		t.Error("armed without a launch part")
	}
	for _, c := range []struct {
		name string
		i    int
		l    func(l *device.LaunchImage)
	}{
		{"no launch function", 0, func(l *device.LaunchImage) { l.Fn = 0 }},
		{"no failure word", 0, func(l *device.LaunchImage) { l.Err = 0 }},
		{"entry -1", -1, func(*device.LaunchImage) {}},
		{"entry 16", replay.Entries, func(*device.LaunchImage) {}},
		{"argument too large", 0, func(l *device.LaunchImage) { l.Arg = make([]byte, replay.ArgBytes+1) }},
		{"counter past the argument", 0, func(l *device.LaunchImage) { l.OffLaunch = 60 }},
		{"fence count past the argument", 0, func(l *device.LaunchImage) { l.OffNFence = 62 }},
		{"negative offset", 0, func(l *device.LaunchImage) { l.OffLaunch = -1 }},
	} {
		l := entryLaunch(1)
		c.l(&l)
		if r.SetEntry(c.i, l) {
			t.Errorf("SetEntry accepted %s", c.name)
		}
	}
	if !r.SetEntry(0, entryLaunch(1)) {
		t.Fatal("a valid launch refused")
	}
	r.SetEntryKey(0, k, 0, false)
	for _, c := range []struct {
		n    int
		left int64
	}{{0, 1}, {replay.Entries + 1, 1}, {1, 0}} {
		if r.Arm(c.n, c.left, 0, -1) {
			t.Errorf("armed %d entries with %d calls left", c.n, c.left)
		}
	}
	Reset(replay.Launched)
	SetErr(0)
	if !r.Arm(1, 2, 0, -1) {
		t.Fatal("Arm refused")
	}
	if r.Arm(1, 2, 0, -1) {
		t.Error("armed an armed record")
	}
	if r.SetEntry(0, entryLaunch(1)) {
		t.Error("changed an armed record")
	}
	Call(r, k)
	r.Disarm()
	if r.Arm(1, 2, 0, -1) {
		t.Error("armed with a count not taken")
	}
	r.Take()
	if !r.Arm(1, 2, 0, -1) {
		t.Error("Arm refused after Take")
	}
	// A stopped (poisoned) record stays refused until it is cleared.
	r.Stop()
	r.Take()
	if r.Arm(1, 1, 0, -1) {
		t.Error("armed a stopped record")
	}
	if !r.SetEntry(0, entryLaunch(1)) || !r.Poisoned() {
		t.Error("filling a stopped record cleared its poison")
	}
	r.Clear()
	if r.Poisoned() {
		t.Error("Clear did not clear the poison")
	}
	if !r.Arm(1, 1, 0, -1) {
		t.Error("Arm refused after Clear")
	}
}

// TestDisarmRace: calls from several goroutines while another disarms;
// after Disarm returns no call launches, and Take counts every launch.
func TestDisarmRace(t *testing.T) {
	Reset(replay.Launched)
	SetErr(0)
	k := key(3)
	r := armed(t, []ent{{key(9), 0, false}, {k, 0, false}}, 1<<40, 0, 0)
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
	for LaunchCount() < 1000 {
	}
	r.Disarm()
	after := LaunchCount()
	for range 1000 {
		if Call(r, k) {
			t.Fatal("a call launched after Disarm returned")
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := LaunchCount(); n != after {
		t.Errorf("%d launches after Disarm returned", n-after)
	}
	if tk := r.Take(); tk.Calls != int64(after) || tk.Calls != launched.Load() || tk.Last != 1 {
		t.Errorf("Take = %+v, launches recorded %d, calls that reported a launch %d", tk, after, launched.Load())
	}
	seen := map[uint64]bool{}
	for _, l := range Launches() {
		if seen[l.Launch] || l.Launch < 1 || l.Launch > uint64(after) {
			t.Fatalf("launch counter %d repeated or out of 1..%d", l.Launch, after)
		}
		seen[l.Launch] = true
	}
}
