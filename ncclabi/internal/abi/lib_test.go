package abi

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type harness struct {
	t    *testing.T
	l    *Library
	e    *fakeEngine
	fb   *fakeFallback
	next uintptr
	last []string
	mu   sync.Mutex
}

func newHarness(t *testing.T, backend string, withFB bool) *harness {
	h := &harness{t: t, e: newFakeEngine(backend), next: 0x100000}
	h.l = &Library{Eng: h.e, FBReason: "THESEUS_NCCL_LIB_PATH is not set"}
	h.l.SetLastError = func(s string) { h.mu.Lock(); h.last = append(h.last, s); h.mu.Unlock() }
	if withFB {
		h.fb = &fakeFallback{}
		h.l.FB = h.fb
	}
	return h
}

func (h *harness) handle() uintptr {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.next += 0x20
	return h.next
}

func (h *harness) lastError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.last) == 0 {
		return ""
	}
	return h.last[len(h.last)-1]
}

func newThread() Thread {
	d := new(int32)
	return Thread{Key: uintptr(len("x")) + uintptr(rand64()), Depth: d}
}

var threadSeq uint64
var threadMu sync.Mutex

func rand64() uint64 {
	threadMu.Lock()
	defer threadMu.Unlock()
	threadSeq++
	return threadSeq << 4
}

// initWorld creates nranks blocking communicators of one id, each rank on
// its own goroutine and thread key, and returns their handles.
func (h *harness) initWorld(nranks int, cfg Config) []uintptr {
	h.t.Helper()
	id, r := h.l.GetUniqueID()
	if r != Success {
		h.t.Fatalf("GetUniqueID: %v", r)
	}
	hs := make([]uintptr, nranks)
	rs := make([]Result, nranks)
	var wg sync.WaitGroup
	for i := range hs {
		hs[i] = h.handle()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, rs[i] = h.l.InitRank(newThread(), hs[i], id, nranks, i, cfg, "ncclCommInitRank")
		}(i)
	}
	wg.Wait()
	for i, r := range rs {
		if cfg.Blocking == 0 && r == InProgress {
			c, _ := h.l.lookup(hs[i], "test")
			c.drain()
			if st, _ := h.l.GetAsyncError(hs[i]); st != Success {
				h.t.Fatalf("rank %d non-blocking init: %v (%s)", i, st, h.lastError())
			}
			continue
		}
		if r != Success {
			h.t.Fatalf("rank %d init: %v (%s)", i, r, h.lastError())
		}
	}
	return hs
}

func (h *harness) engComm(hd uintptr) *fakeComm {
	c, e := h.l.lookup(hd, "test")
	if e != nil {
		h.t.Fatalf("lookup: %v", e)
	}
	eng, _ := c.engine()
	return eng.(*fakeComm)
}

func allReduce(count uint64) *Op {
	return &Op{Coll: CollAllReduce, Send: 0x1000, Recv: 0x2000, Count: count, DataType: 7, RedOp: 0, Root: -1}
}

func TestBlockingInitAndCollective(t *testing.T) {
	h := newHarness(t, "host", false)
	hs := h.initWorld(2, DefaultConfig())
	th := newThread()
	if r := h.l.Coll(th, hs[0], allReduce(10)); r != Success {
		t.Fatalf("AllReduce: %v", r)
	}
	got := h.engComm(hs[0]).opsRun()
	if len(got) != 1 || got[0].Count != 10 || got[0].Coll != CollAllReduce {
		t.Fatalf("ops run: %+v", got)
	}
	n, r := h.l.Count(hs[1])
	rk, r2 := h.l.UserRank(hs[1])
	if n != 2 || rk != 1 || r != Success || r2 != Success {
		t.Fatalf("count %d rank %d (%v %v)", n, rk, r, r2)
	}
	st, r := h.l.GetAsyncError(hs[0])
	if st != Success || r != Success {
		t.Fatalf("GetAsyncError = %v, %v", st, r)
	}
	s, _ := h.l.CommStats(hs[0])
	if diff := cmp.Diff(Stats{Native: 1}, s); diff != "" {
		t.Fatalf("stats (-want +got):\n%s", diff)
	}
}

func TestGroupDefersCollectivesToOutermostEnd(t *testing.T) {
	h := newHarness(t, "host", false)
	hs := h.initWorld(1, DefaultConfig())
	th := newThread()
	fc := h.engComm(hs[0])
	for _, r := range []Result{h.l.GroupStart(th), h.l.GroupStart(th)} {
		if r != Success {
			t.Fatal(r)
		}
	}
	for i := uint64(1); i <= 3; i++ {
		if r := h.l.Coll(th, hs[0], allReduce(i)); r != Success {
			t.Fatalf("op %d: %v", i, r)
		}
	}
	if len(fc.opsRun()) != 0 {
		t.Fatal("ops ran before ncclGroupEnd")
	}
	if r := h.l.GroupEnd(th); r != Success || len(fc.opsRun()) != 0 {
		t.Fatalf("inner GroupEnd: %v, %d ops ran", r, len(fc.opsRun()))
	}
	if r := h.l.GroupEnd(th); r != Success {
		t.Fatalf("outer GroupEnd: %v", r)
	}
	var counts []uint64
	for _, o := range fc.opsRun() {
		counts = append(counts, o.Count)
	}
	if diff := cmp.Diff([]uint64{1, 2, 3}, counts); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}
	if r := h.l.GroupEnd(th); r != InvalidUsage {
		t.Fatalf("GroupEnd without GroupStart = %v, want ncclInvalidUsage", r)
	}
	if !strings.Contains(h.lastError(), "no group is open") {
		t.Fatalf("last error %q", h.lastError())
	}
}

func TestGroupedInitOfSeveralCommsFromOneThread(t *testing.T) {
	h := newHarness(t, "host", false)
	id, _ := h.l.GetUniqueID()
	th := newThread()
	h.l.GroupStart(th)
	hs := make([]uintptr, 4)
	for i := range hs {
		hs[i] = h.handle()
		keep, r := h.l.InitRank(th, hs[i], id, 4, i, DefaultConfig(), "ncclCommInitRank")
		if !keep || r != Success {
			t.Fatalf("rank %d: keep %v %v", i, keep, r)
		}
	}
	// Collectives on all four in the same group, as nccl-tests -g 4 does.
	h.l.GroupEnd(th)
	h.l.GroupStart(th)
	for i := range hs {
		if r := h.l.Coll(th, hs[i], allReduce(5)); r != Success {
			t.Fatal(r)
		}
	}
	if r := h.l.GroupEnd(th); r != Success {
		t.Fatalf("GroupEnd: %v (%s)", r, h.lastError())
	}
	for i := range hs {
		if n := len(h.engComm(hs[i]).opsRun()); n != 1 {
			t.Fatalf("rank %d ran %d ops", i, n)
		}
		if rk, _ := h.l.UserRank(hs[i]); rk != i {
			t.Fatalf("rank %d reports %d", i, rk)
		}
	}
}

func TestNonBlockingInitReportsInProgressUntilDone(t *testing.T) {
	h := newHarness(t, "host", false)
	h.e.gate = make(chan struct{})
	id, _ := h.l.GetUniqueID()
	cfg := DefaultConfig()
	cfg.Blocking = 0
	hd := h.handle()
	keep, r := h.l.InitRank(newThread(), hd, id, 1, 0, cfg, "ncclCommInitRankConfig")
	if !keep || r != InProgress {
		t.Fatalf("non-blocking init = %v, want ncclInProgress", r)
	}
	if st, r := h.l.GetAsyncError(hd); st != InProgress || r != Success {
		t.Fatalf("GetAsyncError during init = %v, %v", st, r)
	}
	// A collective while init is pending is queued behind it.
	if r := h.l.Coll(newThread(), hd, allReduce(3)); r != InProgress {
		t.Fatalf("collective during init = %v, want ncclInProgress", r)
	}
	close(h.e.gate)
	c, _ := h.l.lookup(hd, "t")
	c.drain()
	if st, r := h.l.GetAsyncError(hd); st != Success || r != Success {
		t.Fatalf("GetAsyncError after init = %v, %v", st, r)
	}
	if n := len(h.engComm(hd).opsRun()); n != 1 {
		t.Fatalf("queued collective ran %d times", n)
	}
	if r := h.l.Finalize(hd); r != InProgress {
		t.Fatalf("non-blocking finalize = %v", r)
	}
	c.drain()
	if r := h.l.Destroy(hd); r != Success {
		t.Fatalf("destroy: %v", r)
	}
}

func TestBlockingCommNeverReportsInProgress(t *testing.T) {
	h := newHarness(t, "host", false)
	hs := h.initWorld(1, DefaultConfig())
	if st, _ := h.l.GetAsyncError(hs[0]); st != Success {
		t.Fatalf("idle blocking comm: %v", st)
	}
	h.engComm(hs[0]).setAsync(errors.New("peer 3 lost"))
	st, r := h.l.GetAsyncError(hs[0])
	if st != RemoteError || r != Success {
		t.Fatalf("after a lost peer: %v, %v; want ncclRemoteError", st, r)
	}
	if st2, _ := h.l.GetAsyncError(hs[0]); st2 != st {
		t.Fatalf("async error not sticky: %v then %v", st, st2)
	}
}

func TestBadCalls(t *testing.T) {
	h := newHarness(t, "cuda", false)
	hs := h.initWorld(2, DefaultConfig())
	th := newThread()
	cases := []struct {
		name string
		h    uintptr
		op   Op
		want Result
		msg  string
	}{
		{"null comm", 0, *allReduce(1), InvalidArgument, "comm is NULL"},
		{"unknown comm", 0xdead0, *allReduce(1), InvalidArgument, "not a communicator"},
		{"bad dtype", hs[0], Op{Coll: CollAllReduce, Send: 1, Recv: 2, Count: 1, DataType: 12, Root: -1}, InvalidArgument, "invalid datatype 12"},
		{"negative dtype", hs[0], Op{Coll: CollAllReduce, Send: 1, Recv: 2, Count: 1, DataType: -1, Root: -1}, InvalidArgument, "invalid datatype"},
		{"bad op", hs[0], Op{Coll: CollAllReduce, Send: 1, Recv: 2, Count: 1, DataType: 7, RedOp: 5, Root: -1}, InvalidArgument, "invalid reduction operation 5"},
		{"count overflow", hs[0], Op{Coll: CollAllGather, Send: 1, Recv: 2, Count: 1 << 61, DataType: 8, Root: -1}, InvalidArgument, "count overflow"},
		{"count overflow 64-bit", hs[0], Op{Coll: CollAllReduce, Send: 1, Recv: 2, Count: ^uint64(0), DataType: 0, Root: -1}, InvalidArgument, "count overflow"},
		{"root out of range", hs[0], Op{Coll: CollBroadcast, Send: 1, Recv: 2, Count: 1, DataType: 0, Root: 2}, InvalidArgument, "root 2 out of range"},
		{"null recvbuff", hs[0], Op{Coll: CollAllReduce, Send: 1, Count: 4, DataType: 0, Root: -1}, InvalidArgument, "recvbuff is NULL"},
		{"peer out of range", hs[0], Op{Coll: CollSend, Send: 1, Count: 4, DataType: 0, Root: -1}, InvalidArgument, "peer -1 out of range"},
	}
	for _, c := range cases {
		op := c.op
		if r := h.l.Coll(th, c.h, &op); r != c.want || !strings.Contains(h.lastError(), c.msg) {
			t.Errorf("%s: %v %q, want %v containing %q", c.name, r, h.lastError(), c.want, c.msg)
		}
	}
	// Wrong current device (cuda only): the comm is on device 0.
	h.e.dev.Store(1)
	if r := h.l.Coll(th, hs[0], allReduce(1)); r != InvalidUsage || !strings.Contains(h.lastError(), "current CUDA device is 1") {
		t.Errorf("wrong device: %v %q", r, h.lastError())
	}
	h.e.dev.Store(-1)
	if r := h.l.Coll(th, hs[0], allReduce(1)); r != InvalidUsage || !strings.Contains(h.lastError(), "no CUDA context") {
		t.Errorf("no context: %v %q", r, h.lastError())
	}
	h.e.dev.Store(0)
	// Use after destroy.
	if r := h.l.Destroy(hs[1]); r != Success {
		t.Fatal(r)
	}
	for name, f := range map[string]func() Result{
		"AllReduce":     func() Result { return h.l.Coll(th, hs[1], allReduce(1)) },
		"GetAsyncError": func() Result { _, r := h.l.GetAsyncError(hs[1]); return r },
		"Destroy":       func() Result { return h.l.Destroy(hs[1]) },
		"Count":         func() Result { _, r := h.l.Count(hs[1]); return r },
	} {
		if r := f(); r != InvalidArgument || !strings.Contains(h.lastError(), "used after ncclCommDestroy") {
			t.Errorf("%s after destroy: %v %q", name, r, h.lastError())
		}
	}
	// Mismatched unique id: the engine's error result comes through.
	var bad UniqueID
	copy(bad[:], "garbage")
	if keep, r := h.l.InitRank(newThread(), h.handle(), bad, 2, 0, DefaultConfig(), "ncclCommInitRank"); r != InvalidArgument || keep {
		t.Errorf("bad id: %v keep %v (a failed blocking init gives no handle)", r, keep)
	}
	if _, r := h.l.InitRank(newThread(), h.handle(), bad, 2, 2, DefaultConfig(), "ncclCommInitRank"); r != InvalidArgument {
		t.Errorf("rank out of range: %v", r)
	}
	s, _ := h.l.CommStats(hs[0])
	if s.Rejected != 10 { // 8 bad arguments on hs[0] and 2 wrong devices
		t.Errorf("rejected count %d, want 10", s.Rejected)
	}
}

func TestFallbackForwarding(t *testing.T) {
	h := newHarness(t, "host", true)
	h.e.noSchedule = func(op *Op) bool { return op.Coll == CollGather }
	hs := h.initWorld(2, DefaultConfig())
	th := newThread()
	// Shadow created with rank 0's real id, on both ranks.
	inits := 0
	for _, c := range h.fb.log() {
		if strings.HasPrefix(c, "init REALNCCLID nranks 2") {
			inits++
		}
	}
	if inits != 2 {
		t.Fatalf("shadow inits: %v", h.fb.log())
	}
	h.fb.calls = nil
	send := &Op{Coll: CollSend, Send: 0x10, Count: 8, DataType: 7, Root: 1}
	if r := h.l.Coll(th, hs[0], send); r != Success {
		t.Fatalf("Send: %v", r)
	}
	gather := &Op{Coll: CollGather, Send: 0x10, Recv: 0x20, Count: 8, DataType: 7, Root: 0}
	if r := h.l.Coll(th, hs[0], gather); r != Success {
		t.Fatalf("Gather with no schedule: %v (%s)", r, h.lastError())
	}
	// Point-to-point calls are native, grouped or not, with a fallback
	// present: only the collective no schedule serves goes to it.
	h.l.GroupStart(th)
	h.l.Coll(th, hs[0], &Op{Coll: CollSend, Send: 0x10, Count: 1, DataType: 0, Root: 1})
	h.l.Coll(th, hs[0], &Op{Coll: CollRecv, Recv: 0x10, Count: 1, DataType: 0, Root: 1})
	h.l.Coll(th, hs[0], allReduce(2))
	if r := h.l.GroupEnd(th); r != Success {
		t.Fatalf("GroupEnd: %v", r)
	}
	want := []string{"Gather count 8 root 0"}
	if diff := cmp.Diff(want, h.fb.log()); diff != "" {
		t.Fatalf("fallback calls (-want +got):\n%s", diff)
	}
	s, _ := h.l.CommStats(hs[0])
	if diff := cmp.Diff(Stats{Native: 4, Fallback: 1}, s); diff != "" {
		t.Fatalf("stats (-want +got):\n%s", diff)
	}
	// The group's collective first, then its point-to-point calls as one
	// group.
	if g, ops := h.engComm(hs[0]).p2pGroups(), h.engComm(hs[0]).opsRun(); !cmp.Equal(g, []int{1, 2}) || ops[len(ops)-3].Coll != CollAllReduce {
		t.Fatalf("point-to-point groups %v, ops %v", g, ops)
	}
	// PreMulSum ops live on the shadow; collectives with them go there.
	op, r := h.l.RedOpCreatePreMulSum(hs[0], 0x55, 7, 1)
	if r != Success || op != 5 {
		t.Fatalf("PreMulSum: %v %v", op, r)
	}
	ar := allReduce(4)
	ar.RedOp = op
	if r := h.l.Coll(th, hs[0], ar); r != Success {
		t.Fatalf("AllReduce with premulsum: %v", r)
	}
	if r := h.l.RedOpDestroy(hs[0], op); r != Success {
		t.Fatal(r)
	}
	if r := h.l.Coll(th, hs[0], ar); r != InvalidArgument {
		t.Fatalf("destroyed op: %v", r)
	}
}

func TestNoFallbackRejects(t *testing.T) {
	h := newHarness(t, "host", false)
	h.e.noSchedule = func(op *Op) bool { return op.Coll == CollScatter }
	hs := h.initWorld(2, DefaultConfig())
	th := newThread()
	for _, op := range []*Op{
		{Coll: CollSend, Send: 1, Count: 1, DataType: 0, Root: 1},
		{Coll: CollRecv, Recv: 1, Count: 1, DataType: 0, Root: 1},
		{Coll: CollAlltoAllv, Send: 1, Recv: 2, DataType: 0, Root: -1, Counts: []uint64{1, 1, 1, 1}},
	} {
		if r := h.l.Coll(th, hs[0], op); r != Success {
			t.Errorf("%s without a fallback: %v %q, want it run on the point-to-point engine", op.Coll, r, h.lastError())
		}
	}
	for _, op := range []*Op{
		{Coll: CollScatter, Send: 1, Recv: 2, Count: 1, DataType: 0, Root: 0},
	} {
		if r := h.l.Coll(th, hs[0], op); r != InvalidUsage || !strings.Contains(h.lastError(), "THESEUS_NCCL_LIB_PATH is not set") {
			t.Errorf("%s: %v %q", op.Coll, r, h.lastError())
		}
		// A collective no schedule serves keeps the engine's reason, which
		// names the selection context (it used to say only "no Theseus
		// schedule serves this request").
		if op.Coll == CollScatter && !strings.Contains(h.lastError(), "no Theseus schedule serves this request: selection context /fake/ctx is missing, but there is no fallback NCCL") {
			t.Errorf("%s: %q does not name the selection context", op.Coll, h.lastError())
		}
	}
	// Registration is native: no fallback needed.
	if rh, r := h.l.Register(hs[0], 1, 8); r != Success || rh == 0 {
		t.Errorf("Register: %#x, %v", rh, r)
	} else if r := h.l.Deregister(hs[0], rh); r != Success {
		t.Errorf("Deregister: %v", r)
	} else if r := h.l.Deregister(hs[0], rh); r != InvalidArgument {
		t.Errorf("a second Deregister: %v", r)
	}
	if _, r := h.l.RedOpCreatePreMulSum(hs[0], 1, 7, 1); r != InvalidUsage {
		t.Errorf("PreMulSum: %v", r)
	}
	s, _ := h.l.CommStats(hs[0])
	if s.Rejected != 1 || s.Native != 3 {
		t.Errorf("rejected %d native %d, want 1 (the scatter) and 3", s.Rejected, s.Native)
	}
}

func TestSplit(t *testing.T) {
	h := newHarness(t, "host", true)
	hs := h.initWorld(4, DefaultConfig())
	kids := make([]uintptr, 4)
	keeps := make([]bool, 4)
	rs := make([]Result, 4)
	var wg sync.WaitGroup
	for i := range hs {
		kids[i] = h.handle()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			color := i % 2
			if i == 3 {
				color = -1 // NCCL_SPLIT_NOCOLOR
			}
			keeps[i], rs[i] = h.l.Split(newThread(), hs[i], color, -i, kids[i], nil)
		}(i)
	}
	wg.Wait()
	for i := range hs {
		if rs[i] != Success {
			t.Fatalf("rank %d split: %v (%s)", i, rs[i], h.lastError())
		}
	}
	if diff := cmp.Diff([]bool{true, true, true, false}, keeps); diff != "" {
		t.Fatalf("keep (-want +got):\n%s", diff)
	}
	// color 0: ranks 0 and 2 with keys 0 and -2 → new ranks 1 and 0.
	for i, want := range map[int][2]int{0: {1, 2}, 2: {0, 2}, 1: {0, 1}} {
		rk, _ := h.l.UserRank(kids[i])
		n, _ := h.l.Count(kids[i])
		if rk != want[0] || n != want[1] {
			t.Errorf("rank %d child: rank %d of %d, want %v", i, rk, n, want)
		}
	}
}

func TestGroupErrorsAndModes(t *testing.T) {
	h := newHarness(t, "host", false)
	hs := h.initWorld(1, DefaultConfig())
	cfg := DefaultConfig()
	cfg.Blocking = 0
	nb := h.initWorld(1, cfg)
	th := newThread()
	h.l.GroupStart(th)
	h.l.Coll(th, hs[0], allReduce(1))
	if r := h.l.Coll(th, nb[0], allReduce(1)); r != InvalidUsage || !strings.Contains(h.lastError(), "cannot be mixed") {
		t.Fatalf("mixed group: %v %q", r, h.lastError())
	}
	if r := h.l.GroupEnd(th); r != InvalidUsage || !strings.Contains(h.lastError(), "abandoned") {
		t.Fatalf("abandoned group: %v %q", r, h.lastError())
	}
	if n := len(h.engComm(hs[0]).opsRun()); n != 0 {
		t.Fatalf("abandoned group ran %d ops", n)
	}
	// A call with a bad argument abandons its group too.
	h.l.GroupStart(th)
	h.l.Coll(th, hs[0], allReduce(1))
	bad := allReduce(1)
	bad.DataType = 99
	if r := h.l.Coll(th, hs[0], bad); r != InvalidArgument {
		t.Fatalf("bad call in a group: %v", r)
	}
	if r := h.l.GroupEnd(th); r != InvalidArgument || !strings.Contains(h.lastError(), "abandoned") {
		t.Fatalf("group with a bad call: %v %q", r, h.lastError())
	}
	if n := len(h.engComm(hs[0]).opsRun()); n != 0 {
		t.Fatalf("abandoned group ran %d ops", n)
	}
	// A group whose only call failed is abandoned as well: its end
	// returns that call's error (NCCL 2.25), also from a nested group.
	for _, depth := range []int{1, 3} {
		for range depth {
			h.l.GroupStart(th)
		}
		if r := h.l.Coll(th, hs[0], bad); r != InvalidArgument {
			t.Fatalf("depth %d: bad call alone in a group: %v", depth, r)
		}
		for d := depth; d > 1; d-- {
			if r := h.l.GroupEnd(th); r != Success {
				t.Fatalf("depth %d: inner group end: %v", depth, r)
			}
		}
		if r := h.l.GroupEnd(th); r != InvalidArgument || !strings.Contains(h.lastError(), "abandoned") {
			t.Fatalf("depth %d: group whose only call failed: %v %q", depth, r, h.lastError())
		}
	}
	if r := h.l.GroupStart(th); r != Success {
		t.Fatalf("group start after an abandoned group: %v", r)
	}
	if r := h.l.GroupEnd(th); r != Success {
		t.Fatalf("empty group after an abandoned group: %v", r)
	}
	// Non-blocking group end returns InProgress and completes.
	h.l.GroupStart(th)
	h.l.Coll(th, nb[0], allReduce(1))
	if r := h.l.GroupEnd(th); r != InProgress {
		t.Fatalf("non-blocking group end: %v", r)
	}
	c, _ := h.l.lookup(nb[0], "t")
	c.drain()
	if st, _ := h.l.GetAsyncError(nb[0]); st != Success {
		t.Fatalf("after the group: %v", st)
	}
	if n := len(h.engComm(nb[0]).opsRun()); n != 1 {
		t.Fatalf("non-blocking group ran %d ops", n)
	}
	// GroupSimulateEnd closes the group without running it.
	h.l.GroupStart(th)
	h.l.Coll(th, hs[0], allReduce(1))
	if r := h.l.GroupSimulateEnd(th); r != InvalidUsage || *th.Depth != 0 {
		t.Fatalf("simulate: %v depth %d", r, *th.Depth)
	}
	if n := len(h.engComm(hs[0]).opsRun()); n != 0 {
		t.Fatalf("simulated group ran %d ops", n)
	}
}

func TestAbortCancelsPendingInit(t *testing.T) {
	h := newHarness(t, "host", false)
	id, _ := h.l.GetUniqueID()
	cfg := DefaultConfig()
	cfg.Blocking = 0
	hd := h.handle()
	// Rank 0 of 2: rank 1 never comes, so init waits.
	if _, r := h.l.InitRank(newThread(), hd, id, 2, 0, cfg, "ncclCommInitRankConfig"); r != InProgress {
		t.Fatal(r)
	}
	if r := h.l.Abort(hd); r != Success {
		t.Fatalf("abort: %v", r)
	}
	c, _ := h.l.comms[hd], 0
	c.drain()
	if _, r := h.l.GetAsyncError(hd); r != InvalidArgument || !strings.Contains(h.lastError(), "after ncclCommAbort") {
		t.Fatalf("use after abort: %v %q", r, h.lastError())
	}
}

// Grouped ncclSend/ncclRecv calls run natively as one point-to-point group,
// whatever their pattern, with or without a fallback NCCL: an all-to-all is
// no longer fused into ncclAlltoAll (a rank cannot know that its peers'
// groups form the same pattern).
func TestGroupedSendRecvIsNative(t *testing.T) {
	group := func(h *harness, hd uintptr, sendBase, recvBase uintptr, stride uintptr) Result {
		th := newThread()
		h.l.GroupStart(th)
		for p := 2; p >= 0; p-- {
			h.l.Coll(th, hd, &Op{Coll: CollRecv, Recv: recvBase + uintptr(p)*40, Count: 10, DataType: 7, Root: p})
			h.l.Coll(th, hd, &Op{Coll: CollSend, Send: sendBase + uintptr(p)*stride, Count: 10, DataType: 7, Root: p})
		}
		return h.l.GroupEnd(th)
	}
	for _, withFB := range []bool{false, true} {
		h := newHarness(t, "host", withFB)
		hs := h.initWorld(3, DefaultConfig())
		if h.fb != nil {
			h.fb.calls = nil
		}
		for i, stride := range []uintptr{40, 48} {
			if r := group(h, hs[i], 0x10000, 0x20000, stride); r != Success {
				t.Fatalf("fallback %v stride %d: %v (%s)", withFB, stride, r, h.lastError())
			}
			ops, g := h.engComm(hs[i]).opsRun(), h.engComm(hs[i]).p2pGroups()
			if len(ops) != 6 || !cmp.Equal(g, []int{6}) || ops[0].Coll != CollRecv || ops[0].Root != 2 {
				t.Fatalf("fallback %v stride %d: engine ran %+v in groups %v", withFB, stride, ops, g)
			}
		}
		if h.fb != nil && len(h.fb.log()) != 0 {
			t.Errorf("fallback calls: %v", h.fb.log())
		}
	}
}

// TestClassifyDropsRuntimeTag: a runtime message's own code tag is not
// carried into the NCCL error text, whose result may differ.
func TestClassifyDropsRuntimeTag(t *testing.T) {
	var l Library
	e := l.classify("ncclCommInitRank", errors.New("theseus: rank 0: init: bad unique id [ncclInternalError]"))
	if want := "ncclCommInitRank: theseus: rank 0: init: bad unique id"; e.Msg != want {
		t.Errorf("message %q, want %q", e.Msg, want)
	}
	e = l.classify("ncclAllReduce", errors.New("no tag here"))
	if want := "ncclAllReduce: no tag here"; e.Msg != want {
		t.Errorf("message %q, want %q", e.Msg, want)
	}
}

// TestDestroyInOpenGroup: destroying or finalizing a communicator while an
// open group holds a call for it is InvalidUsage and changes nothing; the
// group then ends normally and the communicator can be destroyed.
func TestDestroyInOpenGroup(t *testing.T) {
	h := newHarness(t, "host", false)
	hs := h.initWorld(1, DefaultConfig())
	th := newThread()
	h.l.GroupStart(th)
	if r := h.l.Coll(th, hs[0], allReduce(1)); r != Success {
		t.Fatalf("call in a group: %v", r)
	}
	if r := h.l.Destroy(hs[0]); r != InvalidUsage || !strings.Contains(h.lastError(), "ncclGroupEnd first") {
		t.Fatalf("destroy inside the group: %v %q", r, h.lastError())
	}
	if r := h.l.Finalize(hs[0]); r != InvalidUsage || !strings.Contains(h.lastError(), "ncclGroupEnd first") {
		t.Fatalf("finalize inside the group: %v %q", r, h.lastError())
	}
	if r := h.l.GroupEnd(th); r != Success {
		t.Fatalf("group end after the refused destroy: %v %q", r, h.lastError())
	}
	if n := len(h.engComm(hs[0]).opsRun()); n != 1 {
		t.Fatalf("the group ran %d ops, want 1", n)
	}
	if r := h.l.Destroy(hs[0]); r != Success {
		t.Fatalf("destroy after the group: %v %q", r, h.lastError())
	}
}
