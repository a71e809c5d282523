package abi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// fakeEngine is an in-process Engine for the semantics tests: ranks of a
// communicator are joined by id, Run records the ops, AllGather and Split
// work across the fake ranks.
type fakeEngine struct {
	backend string
	dev     atomic.Int32
	gate    chan struct{} // when non-nil, Init waits for it to close
	// noSchedule makes Run return ErrNoSchedule for the ops it selects.
	noSchedule func(*Op) bool
	runErr     error
	// replay makes Init return replayComms (abi.Replayer).
	replay bool

	mu     sync.Mutex
	worlds map[UniqueID]*fakeWorld
	nextID uint64
}

func newFakeEngine(backend string) *fakeEngine {
	return &fakeEngine{backend: backend, worlds: map[UniqueID]*fakeWorld{}}
}

type fakeWorld struct {
	id     UniqueID
	n      int
	mu     sync.Mutex
	comms  []*fakeComm
	joined int
	all    chan struct{}
	rounds map[int]*agRound
	splits int
}

type agRound struct {
	data [][]byte
	got  int
	done chan struct{}
}

type fakeComm struct {
	e       *fakeEngine
	w       *fakeWorld
	rank    int
	dev     int
	agSeq   int
	mu      sync.Mutex
	ops     []Op
	p2p     []int // sizes of the point-to-point groups RunP2P ran
	async   error
	abortd  bool
	dstr    bool
	revoked bool
	nreg    int
}

func (e *fakeEngine) Backend() string { return e.backend }

func (e *fakeEngine) NewUniqueID(side bool) (UniqueID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	var id UniqueID
	copy(id[:], "FAKEID")
	binary.LittleEndian.PutUint64(id[8:], e.nextID)
	return id, nil
}

func (e *fakeEngine) CurrentDevice() (int, error) { return int(e.dev.Load()), nil }

func (e *fakeEngine) MemAlloc(n uint64) (uintptr, error) { return 0x1000, nil }
func (e *fakeEngine) MemFree(uintptr) error              { return nil }
func (e *fakeEngine) OnDevice(dev int, f func())         { f() }

func (e *fakeEngine) Classify(err error) Result {
	if errors.Is(err, context.Canceled) {
		return InvalidUsage
	}
	return RemoteError
}

func (e *fakeEngine) world(id UniqueID, n int) (*fakeWorld, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if string(id[:6]) != "FAKEID" {
		return nil, &Error{Result: InvalidArgument, Msg: "not a fake unique id"}
	}
	w := e.worlds[id]
	if w == nil {
		w = &fakeWorld{id: id, n: n, comms: make([]*fakeComm, n), all: make(chan struct{}), rounds: map[int]*agRound{}}
		e.worlds[id] = w
	}
	if w.n != n {
		return nil, &Error{Result: InvalidUsage, Msg: fmt.Sprintf("nranks %d differs from %d", n, w.n)}
	}
	return w, nil
}

func (e *fakeEngine) Init(ctx context.Context, p InitParams) (EngineComm, error) {
	if e.gate != nil {
		select {
		case <-e.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w, err := e.world(p.ID, p.NRanks)
	if err != nil {
		return nil, err
	}
	c := &fakeComm{e: e, w: w, rank: p.Rank, dev: p.Device}
	w.mu.Lock()
	if w.comms[p.Rank] != nil {
		w.mu.Unlock()
		return nil, &Error{Result: InvalidUsage, Msg: "rank joined twice"}
	}
	w.comms[p.Rank] = c
	w.joined++
	if w.joined == w.n {
		close(w.all)
	}
	w.mu.Unlock()
	select {
	case <-w.all:
		if e.replay {
			return &replayComm{fakeComm: c}, nil
		}
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *fakeComm) Rank() int   { return c.rank }
func (c *fakeComm) NRanks() int { return c.w.n }
func (c *fakeComm) Device() int { return c.dev }

func (c *fakeComm) Run(op Op) (Served, error) {
	if c.e.noSchedule != nil && c.e.noSchedule(&op) {
		return Served{}, fmt.Errorf("%w: selection context /fake/ctx is missing", ErrNoSchedule)
	}
	if c.e.runErr != nil {
		return Served{}, c.e.runErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = append(c.ops, op)
	return Served{Text: "fake schedule"}, nil
}

// RunP2P implements P2PEngine: the ops are recorded as one group (p2p).
func (c *fakeComm) RunP2P(ops []Op) (Served, error) {
	if c.e.runErr != nil {
		return Served{}, c.e.runErr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = append(c.ops, ops...)
	c.p2p = append(c.p2p, len(ops))
	return Served{Text: "fake point-to-point engine"}, nil
}

// p2pGroups returns the sizes of the point-to-point groups run.
func (c *fakeComm) p2pGroups() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.p2p...)
}

func (c *fakeComm) opsRun() []Op {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Op(nil), c.ops...)
}

func (c *fakeComm) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	w := c.w
	w.mu.Lock()
	seq := c.agSeq
	c.agSeq++
	r := w.rounds[seq]
	if r == nil {
		r = &agRound{data: make([][]byte, w.n), done: make(chan struct{})}
		w.rounds[seq] = r
	}
	r.data[c.rank] = append([]byte(nil), data...)
	r.got++
	if r.got == w.n {
		close(r.done)
	}
	w.mu.Unlock()
	select {
	case <-r.done:
		return r.data, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *fakeComm) Split(ctx context.Context, color, key int, cfg Config) (EngineComm, error) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(int64(color)))
	binary.LittleEndian.PutUint64(b[8:], uint64(int64(key)))
	all, err := c.AllGather(ctx, b[:])
	if err != nil {
		return nil, err
	}
	round := c.agSeq // identical on every rank
	if color < 0 {
		return nil, nil
	}
	type rk struct{ key, rank int }
	var members []rk
	for r, m := range all {
		if int(int64(binary.LittleEndian.Uint64(m[0:]))) == color {
			members = append(members, rk{int(int64(binary.LittleEndian.Uint64(m[8:]))), r})
		}
	}
	sort.Slice(members, func(i, j int) bool {
		if members[i].key != members[j].key {
			return members[i].key < members[j].key
		}
		return members[i].rank < members[j].rank
	})
	newRank := 0
	for i, m := range members {
		if m.rank == c.rank {
			newRank = i
		}
	}
	id := c.w.id
	binary.LittleEndian.PutUint32(id[16:], uint32(round))
	binary.LittleEndian.PutUint32(id[20:], uint32(color))
	id[24] = 1
	return c.e.Init(ctx, InitParams{ID: id, Rank: newRank, NRanks: len(members), Device: c.dev})
}

func (c *fakeComm) Shrink(ctx context.Context, exclude []int, abort bool, cfg Config) (EngineComm, error) {
	return nil, fmt.Errorf("fake: %w", ErrUnsupported)
}

func (c *fakeComm) Revoke() { c.mu.Lock(); c.revoked = true; c.mu.Unlock() }

func (c *fakeComm) Register(buf uintptr, size uint64) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nreg++
	return uint64(c.nreg), nil
}

func (c *fakeComm) Deregister(id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == 0 || id > uint64(c.nreg) {
		return fmt.Errorf("fake: registration %d", id)
	}
	return nil
}

func (c *fakeComm) StreamSync(uintptr) error           { return nil }
func (c *fakeComm) Finalize(ctx context.Context) error { return nil }
func (c *fakeComm) Destroy() error                     { c.mu.Lock(); c.dstr = true; c.mu.Unlock(); return nil }
func (c *fakeComm) Abort()                             { c.mu.Lock(); c.abortd = true; c.mu.Unlock() }
func (c *fakeComm) AsyncError() error                  { c.mu.Lock(); defer c.mu.Unlock(); return c.async }
func (c *fakeComm) setAsync(err error)                 { c.mu.Lock(); c.async = err; c.mu.Unlock() }

// fakeFallback records the calls forwarded to "the real NCCL".
type fakeFallback struct {
	mu     sync.Mutex
	calls  []string
	nextC  uintptr
	groups int
}

func (f *fakeFallback) rec(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeFallback) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeFallback) Path() string         { return "/fake/libnccl.so.2" }
func (f *fakeFallback) Has(name string) bool { return true }
func (f *fakeFallback) GetUniqueID() (UniqueID, Result) {
	var id UniqueID
	copy(id[:], "REALNCCLID")
	return id, Success
}
func (f *fakeFallback) CommInitRank(id UniqueID, nranks, rank int, blocking bool) (uintptr, Result) {
	f.mu.Lock()
	f.nextC += 0x10
	c := 0x7000 + f.nextC
	f.mu.Unlock()
	f.rec("init %s nranks %d rank %d", string(id[:10]), nranks, rank)
	return c, Success
}
func (f *fakeFallback) CommInitAll(ndev int, devs []int) ([]uintptr, Result) {
	out := make([]uintptr, ndev)
	for i := range out {
		out[i] = uintptr(0x9000 + i)
	}
	f.rec("initall %d", ndev)
	return out, Success
}
func (f *fakeFallback) CommSplit(p uintptr, color, key int) (uintptr, Result) {
	f.rec("split %d %d", color, key)
	if color < 0 {
		return 0, Success
	}
	return p + 1, Success
}
func (f *fakeFallback) CommShrink(p uintptr, ex []int, flags int) (uintptr, Result) {
	return p + 2, Success
}
func (f *fakeFallback) CommFinalize(c uintptr) Result                { f.rec("finalize"); return Success }
func (f *fakeFallback) CommDestroy(c uintptr) Result                 { f.rec("destroy"); return Success }
func (f *fakeFallback) CommAbort(c uintptr) Result                   { f.rec("abort"); return Success }
func (f *fakeFallback) CommGetAsyncError(c uintptr) (Result, Result) { return Success, Success }
func (f *fakeFallback) GroupStart() Result                           { f.rec("groupstart"); return Success }
func (f *fakeFallback) GroupEnd() Result                             { f.rec("groupend"); return Success }
func (f *fakeFallback) Run(c uintptr, op *Op) Result {
	f.rec("%s count %d root %d", op.Coll, op.Count, op.Root)
	return Success
}
func (f *fakeFallback) Register(c, buf uintptr, size uint64) (uintptr, Result) { return 0xabc, Success }
func (f *fakeFallback) Deregister(c, h uintptr) Result                         { return Success }
func (f *fakeFallback) RedOpCreatePreMulSum(c, s uintptr, dt DataType, res int32) (RedOp, Result) {
	return 5, Success
}
func (f *fakeFallback) RedOpDestroy(c uintptr, op RedOp) Result { return Success }
func (f *fakeFallback) LastError() string                       { return "" }
