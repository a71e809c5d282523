// Package executor turns a selected schedule and a collective request into a
// launch on a device.Backend, caching what it materialises on four levels
// (ARCHITECTURE.md §6, docs/design/runtime.md, docs/executor.md):
//
//   - L0, the communicator: one shared scratch buffer
//     (THESEUS_INITIAL_SCRATCH_SIZE, identical on every rank), the control
//     words (abort, done) and a semaphore pool, exported and imported by
//     every peer in one allgather;
//   - L1, a schedule under one root rotation: the rank's op table uploaded,
//     every channel end bound to a semaphore slot, the slots exchanged with
//     the peers. A schedule materialised while another is (the one it
//     `replaces`, or the communicator's previous schedule) is a delta
//     migration: compiler/diff says which channel ends both share; those keep
//     their semaphore slots (rebased when their init differs), and only the
//     added ends are allocated and exchanged, point to point with the peers
//     concerned;
//   - L2, the local allocations of the send and receive buffers, keyed by
//     their identity (base, size, generation): only for schedules whose ops
//     reach a peer's input or output; the allocations are exported (staged
//     when they are foreign memory) and the peers' imported;
//   - L3, the request shape (count, datatype, op, root, arrangement and
//     buffer addresses): the resolved launch arguments, prepared by the
//     backend.
//
// One explicit state machine walks the levels (Table; docs/executor.md is
// its rendering). A repeated request hits every level and costs a few map
// lookups and the enqueue.
//
// An Executor belongs to one rank of one communicator and is not safe for
// concurrent use (a communicator's calls are serialised, as NCCL's are),
// except Abort, Err and Stats.
package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/diff"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// Net is the small-message network the executor exchanges handles over:
// the communicator's bootstrap (runtime/bootstrap.Bootstrap implements it).
// AllGather is collective (every rank, same order); Send and Recv are point
// to point with tags below 2^63. Every wait must be bounded.
type Net interface {
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	Send(peer int, tag uint64, data []byte) error
	Recv(ctx context.Context, peer int, tag uint64) ([]byte, error)
}

// Config configures an Executor.
type Config struct {
	// Rank and NRanks place this executor in its communicator.
	Rank, NRanks int
	Backend      device.Backend
	Net          Net
	// InitialScratch is the scratch buffer's initial size in bytes,
	// rounded up to a multiple of 4096 (0: THESEUS_INITIAL_SCRATCH_SIZE,
	// 16 MiB by default). Every rank must use the same size.
	InitialScratch int64
	// Alternate gives every launch the scratch half of its launch
	// counter's parity (THESEUS_ALTERNATE_SCRATCH_BUFFER). LL launches
	// always alternate.
	Alternate bool
	// SliceBytes is the default pipeline slice of Simple schedules that do
	// not set one (0: THESEUS_SLICE_BYTES, 1 MiB).
	SliceBytes int64
	// Timeout bounds every wait of a launch and of an exchange (0:
	// THESEUS_TIMEOUT, 60 s).
	Timeout time.Duration
	// NoMigration materialises every schedule cold, never as a delta of
	// another (for measuring what delta migration saves).
	NoMigration bool
}

// MinEnvSliceBytes is the smallest THESEUS_SLICE_BYTES ConfigFromEnv
// takes: one 128-byte line. Smaller slices were correct but made a 4 MiB
// collective take minutes on the host backend (a slice is a synchronised
// pipeline step).
const MinEnvSliceBytes = 128

// SliceBytesFromEnv is THESEUS_SLICE_BYTES (default 1 MiB). Errors: a
// malformed size, or one under MinEnvSliceBytes.
func SliceBytesFromEnv() (int64, error) {
	v, err := env.SliceBytes.Size()
	if err != nil {
		return 0, err
	}
	if v < MinEnvSliceBytes {
		return 0, fmt.Errorf("THESEUS_SLICE_BYTES=%d: want at least %d bytes (each slice is a synchronised pipeline step; smaller ones make a collective a long series of them)", v, MinEnvSliceBytes)
	}
	return v, nil
}

// ConfigFromEnv fills the zero fields of c from the environment
// (runtime/env). Errors: malformed values.
func ConfigFromEnv(c Config) (Config, error) {
	if c.InitialScratch == 0 {
		v, err := env.InitScratch.Size()
		if err != nil {
			return c, err
		}
		c.InitialScratch = v
	}
	if c.SliceBytes == 0 {
		v, err := SliceBytesFromEnv()
		if err != nil {
			return c, err
		}
		c.SliceBytes = v
	}
	if c.Timeout == 0 {
		ms, err := env.Timeout.Int()
		if err != nil {
			return c, err
		}
		c.Timeout = env.TimeoutDuration(ms)
	}
	return c, nil
}

// Schedule is a selected schedule as the executor runs it.
type Schedule struct {
	// ID is the schedule's id in the selection context (its entry
	// position); it keys L1.
	ID int
	// Name is for messages.
	Name string
	// Replaces is the id of the schedule it replaces (the preferred delta
	// migration source), or -1.
	Replaces int
	// Bundle is the compiled schedule: metadata, every rank's resource
	// summary (what compiler/diff compares) and op table.
	Bundle *bundle.Bundle

	mu     sync.Mutex
	tables []*optable.Table // decoded on first use (Table)
}

// Table returns logical rank l's op table, decoded and checked against the
// bundle once (codegen/bundle.Bundle.Table) and then cached: decoding is
// part of loading a schedule, not of materialising it. Safe for concurrent
// use (ranks of one process may share a Schedule).
func (s *Schedule) Table(l int) (*optable.Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Bundle == nil || l < 0 || l >= len(s.Bundle.Tables) {
		return nil, fmt.Errorf("schedule %q has no rank %d", s.Name, l)
	}
	if s.tables == nil {
		s.tables = make([]*optable.Table, len(s.Bundle.Tables))
	}
	if s.tables[l] == nil {
		t, err := s.Bundle.Table(l)
		if err != nil {
			return nil, err
		}
		s.tables[l] = t
	}
	return s.tables[l], nil
}

// Request is one collective call as the executor sees it, after validation.
type Request struct {
	Coll ir.Collective
	// Send and Recv are the NCCL buffers (0 where the rank has none).
	Send, Recv device.Ptr
	// Count is the NCCL count (elements per block), >= 1.
	Count    int64
	DataType ir.DataType
	RedOp    ir.RedOp
	// Root is the physical root of rooted collectives (else ignored).
	Root    int
	InPlace bool
	// PacketType is the LL packet format (THESEUS_LL_PROTOCOL).
	PacketType ir.PacketType
}

// Stats counts what the executor did and created (cumulative).
type Stats struct {
	Calls    uint64 // Execute calls
	Launches uint64 // launches enqueued (= the launch counter)

	L0Setups                   uint64
	L1Same, L1Hits             uint64 // hits on the running schedule / on another materialised one
	L1Cold, L1Migrations       uint64
	L2Skips, L2Hits, L2Setups  uint64
	L3Hits, L3Setups           uint64
	Switches, Rebases          uint64 // schedule switches; semaphores rebased
	Waits                      uint64 // waits for in-flight launches
	Growths                    uint64 // scratch reallocations
	Fences                     uint64 // fenced launches
	ScratchBytes               int64  // current scratch capacity
	Created                    Created
	LastMigration              Migration
	Refused                    uint64 // misses refused during graph capture
	StateVisits                [numStates]uint64
	TransitionsTaken, Failures uint64
}

// Created counts the resources the executor created on this rank.
type Created struct {
	// ChannelEnds are channel-end records (an end whose identity, init
	// included, no materialised schedule had).
	ChannelEnds int
	// Semaphores are new semaphore slots (each exchanged with its peer).
	Semaphores int
	// Registrations are peers' user buffers imported (L2).
	Registrations int
	// Exports are local user buffers exported to peers (L2), Staged those
	// of them that are foreign memory staged through an allocation.
	Exports, Staged int
	// Connections are peers whose L0 memory was imported.
	Connections int
	// BootstrapMessages are point-to-point messages this rank sent;
	// BootstrapRounds are allgathers it took part in.
	BootstrapMessages, BootstrapRounds int
	// Allocations are backend allocations made.
	Allocations int
}

// Migration describes the last L1 materialisation on this rank.
type Migration struct {
	From, To int // schedule ids; From -1 for a cold setup
	Created  Created
	// Kept semaphores taken over from the source; Rebased those of them
	// whose init changed.
	Kept, Rebased int
	Elapsed       time.Duration
}

// Error is a failure of the executor. Peers names the ranks involved when
// known.
type Error struct {
	Rank  int
	State State
	Peers []int
	Err   error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("executor: rank %d: %v", e.Rank, e.State)
	if len(e.Peers) > 0 {
		s += fmt.Sprintf(" (peers %v)", e.Peers)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrCapture: the request needs setup (a miss) while its stream is
	// captured into a CUDA graph (seed README, "CUDA Graph Capture").
	ErrCapture = errors.New("executor: resource setup, scratch reallocation or migration refused during graph capture")
	// ErrClosed: the executor was closed or aborted.
	ErrClosed = errors.New("executor: closed")
	// ErrMismatch: a peer's schedule does not pair with this rank's (its
	// channel ends differ): the ranks issued different collectives, or
	// the same collective with different arguments, or one skipped a call
	// (user misuse: NCCL requires every rank to issue a communicator's
	// collectives in the same order with matching arguments).
	ErrMismatch = errors.New("executor: the ranks run different schedules")
	// ErrScratchMismatch: ranks disagree on the scratch size.
	ErrScratchMismatch = errors.New("executor: ranks use different scratch sizes (THESEUS_INITIAL_SCRATCH_SIZE must be identical on every rank)")
)

// Executor is one rank's executor.
type Executor struct {
	// What every call on the all-hit path reads or writes (Repeat,
	// repeatable, launchRepeat) comes first, together, in three cache
	// lines (TestExecutorLayout): a rank's thread comes back from a launch
	// that waited for the GPU with cold caches, and every cache line it
	// touches costs.

	// hot is the last request whose walk hit at every level (L0 ready, L1
	// the running schedule, no L2, L3 the last entry): while lastL1 and
	// lastL3 still hold its entries, the same request of the same schedule
	// walks the same way, and Execute goes straight to the launch
	// (Repeat), counting the same transitions. hotReq holds its
	// request and schedule.
	hot struct {
		tok uint64 // Repeat's token for it (HotToken): bumped whenever hot changes
		l1  *l1Entry
		l3  *l3Entry
	}
	lastL1 *l1Entry
	trace  func(Transition)
	failed atomic.Pointer[error]
	// hotWalks counts Repeat's hot walks that reached the launch, hotFails
	// those whose launch failed (Stats adds their counters); fences counts
	// fenced launches (Stats.Fences); hotRuns those walks (tests).
	hotWalks, hotFails, fences, hotRuns uint64
	// lastCL is lastSt as a device.CaptureLauncher (nil when it is not
	// one); tracked says lastSt is in streams (trackStream), so that a
	// repeated launch on it adds nothing.
	lastCL device.CaptureLauncher
	lastSt device.Stream // the stream of the last launch
	launch uint64        // the launch counter (Stats.Launches)
	// capMixed: the launches captured into CUDA graphs had more than one
	// scratch layout (capSig).
	tracked, capMixed bool
	lastSig           scratchSig
	// capSig is the scratch layout of the launches captured into CUDA
	// graphs, capMixed set once they had more than one: a replay may run
	// before any eager launch (doLaunch).
	capSig scratchSig
	// lastL3 is the L3 entry of the last hit or setup, under its L1 and L2
	// entries: a repeated request finds it without hashing its key.
	// Cleared whenever L3 entries are dropped (dropL3). Its ent ends the
	// fields of the all-hit path.
	lastL3 struct {
		ent *l3Entry
		l1  *l1Entry
		l2  *l2Entry
		key l3Key
	}
	hotReq struct {
		s   *Schedule
		req Request
	}
	streams []device.Stream // streams launched on since the last wait
	cfg     Config
	dev     device.Backend
	net     Net
	n       int

	l0 l0
	l1 map[l1Key]*l1Entry
	// captured: some launch went into a CUDA graph. Its replays keep using
	// the memory it names (prepared state, scratch, peers' scratch
	// mappings), so from then on nothing of that kind is freed before Close.
	captured  bool
	retained  []device.Prepared
	allocs    []device.Ptr // to free at Close
	arena     device.Ptr   // the current block of small private allocations
	arenaUsed int64
	abortW    atomic.Uintptr // the control segment once L0 exists
	stats     Stats
}

type l0 struct {
	ready      bool
	scratch    device.Mem
	control    device.Ptr // abort word at +0, done word at +8
	pools      []*pool
	peers      []peerL0 // by physical rank
	sentPool   [][]bool // [peer][pool] handle known to the peer
	peerPools  []map[uint32]device.Region
	allImports []device.Ptr
}

type peerL0 struct {
	scratch device.Mem
	done    device.Ptr
	imports []device.Ptr
}

// pool is a block of semaphore slots: inbound words [0, n), then the
// matching private expected words [n, 2n).
type pool struct {
	id     uint32
	base   device.Ptr
	n      int
	used   int
	handle device.Handle
}

const (
	poolSlots    = 2048
	controlBytes = 4096
	scratchAlign = 4096
)

type slot struct {
	pool    *pool
	idx     int
	curInit int64 // the init of the schedule that last ran with the slot
}

func (s *slot) inbound() device.Ptr  { return s.pool.base + device.Ptr(8*s.idx) }
func (s *slot) expected() device.Ptr { return s.pool.base + device.Ptr(8*(s.pool.n+s.idx)) }

type l1Key struct {
	sched int
	shift int
}

type endRes struct {
	slot        *slot
	peerInbound device.Ptr
	peer        int // physical
	init        int64
}

type l1Entry struct {
	key     l1Key
	sched   *Schedule
	logical int
	table   *optable.Table
	// fenceAll: every launch is fenced (an LL table, or one the verifier
	// found racing between iterations; doLaunch).
	fenceAll bool
	tabMem   device.Mem
	publish  device.Mem
	ends     []endRes
	// Scratch chunks of the largest rank: the scratch need is a pure
	// function of the schedule and the request, identical on every rank.
	maxScratch int64
	// L2: exportTo[q] are the buffers peer q reaches of ours, importFrom[q]
	// those of q we reach (bit 0 input, bit 1 output).
	needL2     bool
	exportTo   []uint8
	importFrom []uint8
	l2         map[l2Key]*l2Entry
	l3         map[l3Key]*l3Entry // when !needL2
}

type l2Key struct{ send, recv device.Region }

// l2Entry holds the registrations of one pair of local allocations: our
// exported allocations (the user's, or staging for foreign memory) and the
// peers' allocations we imported. Where in them each request's buffers lie
// is exchanged per request shape (L3), since a peer may vary its offsets
// within the same allocations.
type l2Entry struct {
	region   [2]device.Region   // our exported input/output allocations
	staged   bool               // foreign memory staged: local holds the staging buffers
	local    [2]device.Mem      // staged: our input/output as launches use them
	stageIn  []device.Copy      // staged: copies before each launch
	stageOut []device.Copy      // staged: copies after each launch
	peerReg  [][2]device.Region // [peer][input/output] imported
	imports  []device.Ptr
	l3       map[l3Key]*l3Entry
}

type l3Key struct {
	send, recv device.Ptr
	count      int64
	dt         ir.DataType
	op         ir.RedOp
	root       int
	inplace    bool
	pt         ir.PacketType
}

// scratchSig is what decides where a launch puts data in the shared
// scratch: two launches with equal signatures lay scratch out identically,
// and the schedule's own synchronisation protects it between them (ir.md
// §6); a launch whose signature differs from the previous launch's is
// fenced.
type scratchSig struct {
	l1                 *l1Entry
	chunkBytes, slices int64
}

type l3Entry struct {
	prep device.Prepared
	args *device.Args
	sig  scratchSig
	// captured: launched into a CUDA graph, whose replays keep using prep's
	// memory; released only at Close.
	captured bool
	// dropped: taken out of its map (dropL3); a replay record must not
	// launch prep any more (ReplayUsable).
	dropped bool
}

// New returns an executor. Nothing is allocated until the first Execute.
func New(cfg Config) (*Executor, error) {
	switch {
	case cfg.NRanks < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.NRanks:
		return nil, fmt.Errorf("executor: rank %d of %d", cfg.Rank, cfg.NRanks)
	case cfg.Backend == nil:
		return nil, errors.New("executor: no backend")
	case cfg.Net == nil && cfg.NRanks > 1:
		return nil, errors.New("executor: no network")
	}
	c, err := ConfigFromEnv(cfg)
	if err != nil {
		return nil, err
	}
	if c.InitialScratch < 0 || c.SliceBytes < 0 || c.Timeout < 0 {
		return nil, fmt.Errorf("executor: negative scratch %d, slice %d or timeout %v", c.InitialScratch, c.SliceBytes, c.Timeout)
	}
	c.InitialScratch = max(roundUp(c.InitialScratch, scratchAlign), scratchAlign)
	return &Executor{cfg: c, dev: c.Backend, net: c.Net, n: c.NRanks, l1: map[l1Key]*l1Entry{}}, nil
}

func roundUp(x, a int64) int64 { return (x + a - 1) / a * a }

// SetTrace installs a function called on every transition (tests).
func (e *Executor) SetTrace(f func(Transition)) { e.trace = f }

// Stats returns a copy of the counters. Like Execute, it must not run
// concurrently with other calls.
func (e *Executor) Stats() Stats {
	st := e.stats
	st.Launches, st.Fences = e.launch, e.fences
	// The hot walks Repeat took to the launch: Start → L0Lookup (hit) →
	// L1Lookup (same) → L2Lookup (skip) → L3Lookup (hit) → Launch → Done,
	// or → Fail when the launch failed.
	h := e.hotWalks
	st.Calls += h
	for _, to := range hotPath {
		st.StateVisits[to] += h
	}
	st.TransitionsTaken += h * (uint64(len(hotPath)) + 1)
	st.L1Same += h
	st.L2Skips += h
	st.L3Hits += h
	st.StateVisits[Done] += h - e.hotFails
	st.StateVisits[Fail] += e.hotFails
	st.Failures += e.hotFails
	return st
}

// Err returns the executor's sticky error: a failure that leaves the ranks
// out of step (an exchange, allocation or launch failure), Abort or Close.
func (e *Executor) Err() error {
	if p := e.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (e *Executor) setFailed(err error) {
	e.failed.CompareAndSwap(nil, &err)
}

// LaunchCounter is the communicator's launch counter: the number of
// launches so far (identical on every rank).
func (e *Executor) LaunchCounter() uint64 { return e.launch }

// Execute walks the state machine for r with schedule s and enqueues the
// launch on st. It returns when the launch is enqueued (not finished).
// Errors: *Error, wrapping ErrCapture, ErrClosed, ErrMismatch, ErrScratchMismatch,
// a bootstrap error naming peers, or a backend error.
func (e *Executor) Execute(ctx context.Context, r *Request, s *Schedule, st device.Stream) error {
	if h, q := &e.hot, &e.hotReq; h.l3 != nil && h.l3 == e.lastL3.ent && h.l1 == e.lastL1 && q.s == s && e.trace == nil &&
		st != nil && r != nil && *r == q.req {
		return e.Repeat(ctx, h.tok, r, s, st)
	}
	w := walk{r: r, s: s, st: st}
	e.stats.Calls++
	state := Start
	allHit := true // every lookup hit: the walk Repeat repeats
	for state != Done {
		var ev Event
		switch state {
		case Start:
			ev = e.start(&w)
		case L0Lookup:
			ev = e.l0Lookup(&w)
		case L0Setup:
			ev = e.l0Setup(ctx, &w)
		case L1Lookup:
			ev = e.l1Lookup(&w)
		case L1Cold, L1Migrate:
			ev = e.l1Materialise(ctx, &w, state == L1Migrate)
		case L1Switch:
			ev = e.l1Switch(&w)
		case L2Lookup:
			ev = e.l2Lookup(&w)
		case L2Setup:
			ev = e.l2Setup(ctx, &w)
		case L3Lookup:
			ev = e.l3Lookup(&w)
		case L3Setup:
			ev = e.l3Setup(ctx, &w)
		case Grow:
			ev = e.grow(ctx, &w)
		case Launch:
			ev = e.doLaunch(&w)
		case Fail:
			e.stats.Failures++
			return w.err
		}
		if allHit {
			switch {
			case state == Start && ev == EvOK, state == L0Lookup && ev == EvHit, state == L1Lookup && ev == EvSame,
				state == L2Lookup && ev == EvSkip, state == L3Lookup && ev == EvHit, state == Launch && ev == EvOK:
			default:
				allHit = false
			}
		}
		to := next(state, ev)
		if to == numStates {
			err := &Error{Rank: e.cfg.Rank, State: state, Err: fmt.Errorf("internal: no transition on %v", ev)}
			e.setFailed(err)
			return err
		}
		if e.trace != nil {
			e.trace(Transition{From: state, Event: ev, To: to})
		}
		e.stats.StateVisits[to]++
		e.stats.TransitionsTaken++
		if ev == EvCapture {
			e.stats.Refused++
			w.err = &Error{Rank: e.cfg.Rank, State: state, Err: ErrCapture}
		}
		state = to
	}
	if allHit && w.l3 == e.lastL3.ent && w.l1 == e.lastL1 && e.trace == nil {
		if h, q := &e.hot, &e.hotReq; q.s != s || q.req != *r || h.l1 != w.l1 || h.l3 != w.l3 {
			q.s, q.req, h.l1, h.l3 = s, *r, w.l1, w.l3
			h.tok++
		}
	}
	return nil
}

// HotToken returns the token Repeat takes for request r of schedule s when
// the executor's hot entry is theirs (the last walk of r with s that hit
// at every level), and 0 otherwise. Repeat checks that the entry's
// levels are still the last used before it launches from it.
func (e *Executor) HotToken(r *Request, s *Schedule) uint64 {
	if h, q := &e.hot, &e.hotReq; h.l3 != nil && q.s == s && r != nil && q.req == *r {
		return h.tok
	}
	return 0
}

// Repeat is Execute(ctx, r, s, st) for the request and schedule that tok
// (HotToken) was issued for, which the caller passes again: while the
// executor's entries for it are still the last used, the launch with no
// lookup, without comparing the request; otherwise Execute itself.
// Errors: those of Execute.
//
// With the entries still the last used, Repeat is the walk Start,
// L0Lookup (hit), L1Lookup (same), L2Lookup (skip), L3Lookup (hit),
// Launch, with the same checks, counters and outcome, without looking
// anything up. The counters of a walk that reaches the launch are kept as
// one count (hotWalks) and added in by Stats: one store instead of a dozen
// across the Stats struct. The usual repeat goes from here straight to
// launchRepeat, with no Go frame between.
func (e *Executor) Repeat(ctx context.Context, tok uint64, r *Request, s *Schedule, st device.Stream) error {
	if h := &e.hot; tok == 0 || tok != h.tok || h.l3 != e.lastL3.ent || h.l1 != e.lastL1 || e.trace != nil || st == nil {
		return e.Execute(ctx, r, s, st)
	}
	if e.failed.Load() == nil && e.repeatable(st) {
		e.hotRuns++
		e.hotWalks++
		return e.launchRepeat(r, s, st)
	}
	return e.walkHot(r, s, st)
}

// hotPath is the walk of a request that hits at every level: the
// transitions Execute takes, and counts, for it.
var hotPath = [...]State{L0Lookup, L1Lookup, L2Lookup, L3Lookup, Launch}

// walkHot is Repeat's walk when the executor is broken or the launch is
// not the usual repeat (launchRepeat).
func (e *Executor) walkHot(r *Request, s *Schedule, st device.Stream) error {
	e.hotRuns++
	if err := e.Err(); err != nil { // Start: broken
		e.stats.Calls++
		e.stats.StateVisits[Fail]++
		e.stats.TransitionsTaken++
		e.stats.Failures++
		return err
	}
	e.hotWalks++
	w := walk{r: r, s: s, st: st, l1: e.hot.l1, l3map: e.hot.l1.l3, l3: e.hot.l3}
	if ev := e.doLaunch(&w); ev != EvOK {
		e.hotFails++
		return w.err
	}
	return nil
}

// repeatable reports whether the hot launch on st is the usual repeat: on
// the stream of the last launch (already tracked), with the layout of
// every captured launch if any. doLaunch would launch the same way, and
// its bookkeeping would change only the counters and the last layout
// (launchRepeat).
func (e *Executor) repeatable(st device.Stream) bool {
	return e.lastCL != nil && e.tracked && e.launch > 0 &&
		(e.capSig.l1 == nil || !e.capMixed && e.hot.l3.sig == e.capSig) && st == e.lastSt
}

// launchRepeat launches the hot entry when repeatable: doLaunch's fence
// rule, its bookkeeping when the launch is neither captured nor failed,
// and all of it (launched) otherwise.
func (e *Executor) launchRepeat(r *Request, s *Schedule, st device.Stream) error {
	h := &e.hot
	fence := h.l3.sig != e.lastSig || h.l1.fenceAll
	capturing, err := e.lastCL.CaptureLaunch(h.l3.prep, e.launch+1, fence, true)
	if err == nil && !capturing {
		e.launch++
		if fence {
			e.fences++
			e.lastSig = h.l3.sig
		}
		return nil
	}
	// A captured launch was fenced (CaptureLaunch's fenceCaptured).
	w := walk{r: r, s: s, st: st, l1: h.l1, l3map: h.l1.l3, l3: h.l3}
	if ev := e.launched(&w, fence || capturing, capturing, err); ev != EvOK {
		e.hotFails++
		return w.err
	}
	return nil
}

// ReplayEntry is the executor's side of one entry of a replay record
// (runtime/replay): the cache entries whose launch the entry repeats.
type ReplayEntry struct {
	l1  *l1Entry
	l2  *l2Entry
	l3  *l3Entry
	key l3Key
}

// SameLayout reports whether launches of a and b use the same scratch
// layout: a launch after one of the other layout is fenced (doLaunch's
// rule).
func (a ReplayEntry) SameLayout(b ReplayEntry) bool {
	return a.l3 != nil && b.l3 != nil && a.l3.sig == b.l3.sig
}

// FenceAll reports whether every launch of a is fenced.
func (a ReplayEntry) FenceAll() bool { return a.l1 != nil && a.l1.fenceAll }

// ArmReplay fills entry i of r with the launch that Repeat(tok, ...) on st
// would make next, when that launch is the usual repeat (launchRepeat, on
// a stream that is not capturing): the hot entries still the last used,
// the executor not failed, st the stream of the last launch and one that
// can repeat launches from C (device.Replayer). It returns the entry's
// cache entries, and ok false when r was not filled. r must be off. The
// caller counts the calls made from r with Replayed before anything else
// uses the executor, and keeps an entry only while ReplayUsable says so.
func (e *Executor) ArmReplay(tok uint64, st device.Stream, r *replay.Record, i int) (re ReplayEntry, ok bool) {
	h := &e.hot
	if tok == 0 || tok != h.tok || h.l3 != e.lastL3.ent || h.l1 != e.lastL1 || e.trace != nil || st == nil ||
		e.failed.Load() != nil || !e.repeatable(st) {
		return ReplayEntry{}, false
	}
	rp, isRp := st.(device.Replayer)
	if !isRp || !rp.SetReplay(r, i, h.l3.prep) {
		return ReplayEntry{}, false
	}
	return ReplayEntry{l1: e.lastL3.l1, l2: e.lastL3.l2, l3: h.l3, key: e.lastL3.key}, true
}

// ReplayUsable reports whether a replay record may still launch re's
// entry as its last arming filled it: its prepared launch not dropped
// (scratch growth, a full L3, Close), its L1 entry the last used (a launch
// of another L1 entry is a schedule switch: l1Switch waits and rebases the
// semaphores the schedules share, which a launch from C would skip), the
// executor not failed, no trace, and the layout of the launches captured
// into CUDA graphs, if any, its own (repeatable's rule). The stream is the
// caller's to check.
func (e *Executor) ReplayUsable(re ReplayEntry) bool {
	return re.l3 != nil && !re.l3.dropped && re.l1 == e.lastL1 && e.failed.Load() == nil && e.trace == nil &&
		(e.capSig.l1 == nil || !e.capMixed && re.l3.sig == e.capSig)
}

// LastLayout reports whether the last launch used re's scratch layout
// (the next launch of re is not fenced unless re fences every launch).
func (e *Executor) LastLayout(re ReplayEntry) bool { return re.l3 != nil && e.lastSig == re.l3.sig }

// Replayed counts n launches a replay record made from C, fenced of them
// fenced, as launchRepeat counts its own (the walks, the launch counter,
// the fences), and makes last, the entry of the last of them, the last
// used, as a walk of its request would have left it (the layout of the
// last launch, the last L1 and L3 entries).
func (e *Executor) Replayed(n, fenced uint64, last *ReplayEntry) {
	e.hotRuns += n
	e.hotWalks += n
	e.launch += n
	e.fences += fenced
	if last == nil || last.l3 == nil {
		return
	}
	e.lastSig = last.l3.sig
	e.lastL1 = last.l1
	e.lastL3.ent, e.lastL3.l1, e.lastL3.l2, e.lastL3.key = last.l3, last.l1, last.l2, last.key
}

// walk is one Execute's state.
type walk struct {
	r     *Request
	s     *Schedule
	st    device.Stream
	shift int
	l1    *l1Entry
	l2    *l2Entry
	l3map map[l3Key]*l3Entry
	l3key l3Key
	l3    *l3Entry
	need  int64 // scratch bytes the request needs (Grow)
	err   error
}

func (e *Executor) fail(w *walk, state State, err error, sticky bool, peers ...int) Event {
	ee := &Error{Rank: e.cfg.Rank, State: state, Peers: peers, Err: err}
	w.err = ee
	if sticky {
		e.setFailed(ee)
	}
	return EvError
}

func (e *Executor) start(w *walk) Event {
	if err := e.Err(); err != nil {
		w.err = err
		return EvBroken
	}
	if w.s == nil || w.s.Bundle == nil || w.st == nil || w.r == nil {
		w.err = &Error{Rank: e.cfg.Rank, State: Start, Err: errors.New("nil request, schedule or stream")}
		return EvBroken
	}
	return EvOK
}

func (e *Executor) l0Lookup(w *walk) Event {
	if e.l0.ready {
		return EvHit
	}
	if w.st.Capturing() {
		return EvCapture
	}
	return EvMiss
}

func (e *Executor) alloc(size int64) (device.Ptr, error) {
	p, err := e.dev.Alloc(size)
	if err == nil {
		e.allocs = append(e.allocs, p)
		e.stats.Created.Allocations++
	}
	return p, err
}

// small sub-allocates n bytes (16-byte aligned) of this rank's private
// device memory — op tables, dependency counters — from arena blocks of
// arenaBytes, so that materialising a schedule costs no backend allocation
// in the common case. Larger requests get their own allocation.
func (e *Executor) small(n int64) (device.Ptr, error) {
	n = roundUp(n, 16)
	if n > arenaBytes/4 {
		return e.alloc(n)
	}
	if e.arena == 0 || e.arenaUsed+n > arenaBytes {
		p, err := e.alloc(arenaBytes)
		if err != nil {
			return 0, err
		}
		e.arena, e.arenaUsed = p, 0
	}
	p := e.arena + device.Ptr(e.arenaUsed)
	e.arenaUsed += n
	return p, nil
}

const arenaBytes = 256 << 10

func (e *Executor) newPool() (*pool, error) {
	base, err := e.alloc(16 * poolSlots)
	if err != nil {
		return nil, err
	}
	reg, ok := e.dev.Lookup(base, 16*poolSlots)
	if !ok {
		return nil, errors.New("semaphore pool is not a backend allocation")
	}
	h, err := e.dev.Export(reg)
	if err != nil {
		return nil, err
	}
	p := &pool{id: uint32(len(e.l0.pools)), base: base, n: poolSlots, handle: h}
	e.l0.pools = append(e.l0.pools, p)
	for q := range e.l0.sentPool {
		e.l0.sentPool[q] = append(e.l0.sentPool[q], q == e.cfg.Rank)
	}
	return p, nil
}

func (e *Executor) export(p device.Ptr, size int64) (device.Handle, error) {
	reg, ok := e.dev.Lookup(p, size)
	if !ok {
		return nil, device.ErrNotExportable
	}
	return e.dev.Export(reg)
}

func (e *Executor) allGather(ctx context.Context, data []byte) ([][]byte, error) {
	e.stats.Created.BootstrapRounds++
	if e.n == 1 {
		return [][]byte{data}, nil
	}
	return e.net.AllGather(ctx, data)
}

func (e *Executor) send(peer int, tag uint64, data []byte) error {
	e.stats.Created.BootstrapMessages++
	return e.net.Send(peer, tag, data)
}

func (e *Executor) recv(ctx context.Context, peer int, tag uint64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	return e.net.Recv(ctx, peer, tag)
}

// Message tags: the request's launch counter (identical on every rank) and
// the kind of exchange.
const (
	tagL1 = 1
	tagL2 = 2
	tagL3 = 3
)

func (e *Executor) tag(kind uint64) uint64 { return ((e.launch+1)<<8 | kind) & (1<<63 - 1) }

func (e *Executor) unimport(p device.Ptr) {
	for i, x := range e.l0.allImports {
		if x == p {
			e.l0.allImports = append(e.l0.allImports[:i], e.l0.allImports[i+1:]...)
			break
		}
	}
	e.dev.Unimport(p)
}

func (e *Executor) importHandle(h device.Handle) (device.Region, error) {
	reg, err := e.dev.Import(h)
	if err == nil {
		e.l0.allImports = append(e.l0.allImports, reg.Base)
	}
	return reg, err
}

// l0Setup allocates the scratch buffer, the control words and the first
// semaphore pool, and exchanges their handles in one allgather.
func (e *Executor) l0Setup(ctx context.Context, w *walk) Event {
	rank := e.cfg.Rank
	e.l0.sentPool = make([][]bool, e.n)
	e.l0.peerPools = make([]map[uint32]device.Region, e.n)
	for q := range e.l0.peerPools {
		e.l0.peerPools[q] = map[uint32]device.Region{}
	}
	capB := e.cfg.InitialScratch
	sc, err := e.alloc(capB)
	if err != nil {
		return e.fail(w, L0Setup, err, true)
	}
	e.l0.scratch = device.Mem{Ptr: sc, Size: capB}
	if e.l0.control, err = e.alloc(controlBytes); err != nil {
		return e.fail(w, L0Setup, err, true)
	}
	p0, err := e.newPool()
	if err != nil {
		return e.fail(w, L0Setup, err, true)
	}
	mine := l0Msg{Scratch: capB}
	for i, m := range []device.Mem{e.l0.scratch, {Ptr: e.l0.control, Size: controlBytes}} {
		h, err := e.export(m.Ptr, m.Size)
		if err != nil {
			return e.fail(w, L0Setup, err, true)
		}
		mine.Handles[i] = h
	}
	mine.Handles[2] = p0.handle
	all, err := e.allGather(ctx, mine.encode())
	if err != nil {
		return e.fail(w, L0Setup, err, true, bootstrapPeers(err)...)
	}
	e.l0.peers = make([]peerL0, e.n)
	var bad []int
	for q, m := range all {
		lm, err := decodeL0(m)
		if err != nil {
			return e.fail(w, L0Setup, fmt.Errorf("rank %d's L0 message: %w", q, err), true, q)
		}
		qcap, hs := lm.Scratch, lm.Handles
		if qcap != capB {
			bad = append(bad, q)
			continue
		}
		e.l0.sentPool[q] = []bool{true}
		if q == rank {
			e.l0.peers[q] = peerL0{scratch: e.l0.scratch, done: e.l0.control + 8}
			e.l0.peerPools[q][0] = device.Region{Base: p0.base, Size: 16 * poolSlots}
			continue
		}
		var regs [3]device.Region
		for i, h := range hs {
			if regs[i], err = e.importHandle(h); err != nil {
				return e.fail(w, L0Setup, fmt.Errorf("import rank %d's L0 memory: %w", q, err), true, q)
			}
		}
		e.l0.peers[q] = peerL0{scratch: device.Mem{Ptr: regs[0].Base, Size: capB}, done: regs[1].Base + 8}
		e.l0.peerPools[q][0] = regs[2]
		e.stats.Created.Connections++
	}
	if len(bad) > 0 {
		return e.fail(w, L0Setup, fmt.Errorf("%w: this rank has %d bytes, ranks %v differ", ErrScratchMismatch, capB, bad), true, bad...)
	}
	e.l0.ready = true
	e.abortW.Store(uintptr(e.l0.control))
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: L0: scratch %d bytes, %d peers imported", rank, capB, e.stats.Created.Connections)
	}
	e.stats.ScratchBytes = capB
	e.stats.L0Setups++
	return EvOK
}

func (e *Executor) shiftOf(w *walk) int {
	m := w.s.Bundle.Meta
	if !m.Collective.Rooted() {
		return 0
	}
	pl := ir.Placement{Collective: m.Collective, NRanks: m.NRanks, ProgRoot: m.Root, Root: w.r.Root}
	return pl.Shift()
}

func (e *Executor) l1Lookup(w *walk) Event {
	w.shift = e.shiftOf(w)
	key := l1Key{w.s.ID, w.shift}
	if l := e.lastL1; l != nil && l.key == key && l.sched == w.s {
		w.l1 = l
		e.stats.L1Same++
		return EvSame
	}
	if l := e.l1[key]; l != nil && l.sched == w.s {
		w.l1 = l
		e.stats.L1Hits++
		return EvHit
	}
	if w.st.Capturing() {
		return EvCapture
	}
	if e.source(w) != nil {
		return EvSource
	}
	return EvNoSource
}

// source is the delta-migration source for w's schedule: the schedule it
// replaces when that is materialised under the same root rotation, else
// the communicator's previous schedule under the same rotation.
func (e *Executor) source(w *walk) *l1Entry {
	if e.cfg.NoMigration {
		return nil
	}
	if r := w.s.Replaces; r >= 0 {
		if l := e.l1[l1Key{r, w.shift}]; l != nil && l.sched.Bundle.Meta.NRanks == e.n {
			return l
		}
	}
	if l := e.lastL1; l != nil && l.key.shift == w.shift && l.sched.Bundle.Meta.NRanks == e.n {
		return l
	}
	return nil
}

// l1Materialise builds the L1 entry of w's schedule: cold, or as a delta of
// the source.
func (e *Executor) l1Materialise(ctx context.Context, w *walk, migrate bool) Event {
	t0 := time.Now()
	state := L1Cold
	var src *l1Entry
	if migrate {
		state, src = L1Migrate, e.source(w)
	}
	before := e.stats.Created
	s, n, rank := w.s, e.n, e.cfg.Rank
	b := s.Bundle
	if b.Meta.NRanks != n || len(b.Ranks) != n || len(b.Tables) != n {
		return e.fail(w, state, fmt.Errorf("schedule %q is for %d ranks, the communicator has %d", s.Name, b.Meta.NRanks, n), false)
	}
	shift := w.shift
	phys := func(l int) int { return (l + shift) % n }
	l := ((rank-shift)%n + n) % n
	t, err := s.Table(l)
	if err != nil {
		return e.fail(w, state, fmt.Errorf("schedule %q rank %d: %w", s.Name, l, err), false)
	}
	ent := &l1Entry{key: l1Key{s.ID, shift}, sched: s, logical: l, table: t, ends: make([]endRes, len(t.Channels)),
		exportTo: make([]uint8, n), importFrom: make([]uint8, n), fenceAll: t.Protocol == ir.LL || t.FenceLaunches}
	enc, err := b.TableBytes(l) // read (and its hash checked) by s.Table
	if err != nil {
		return e.fail(w, state, fmt.Errorf("schedule %q rank %d: %w", s.Name, l, err), false)
	}
	tp, err := e.small(int64(max(len(enc), 1)))
	if err != nil {
		return e.fail(w, state, err, true)
	}
	if err := e.dev.Upload(tp, enc); err != nil {
		return e.fail(w, state, err, true)
	}
	ent.tabMem = device.Mem{Ptr: tp, Size: int64(len(enc))}
	pub := int64(8 * max(len(t.TBs), 1))
	pp, err := e.small(pub)
	if err != nil {
		return e.fail(w, state, err, true)
	}
	ent.publish = device.Mem{Ptr: pp, Size: pub}
	for _, rr := range b.Ranks {
		ent.maxScratch = max(ent.maxScratch, rr.Chunks[ir.Scratch])
	}
	// Registrations: what we reach of our peers, and what they reach of us.
	bit := func(k ir.BufKind) uint8 { return 1 << uint(k) }
	for _, reg := range b.Ranks[l].Registrations {
		ent.importFrom[phys(reg.Peer)] |= bit(reg.Buf)
	}
	for ql, rr := range b.Ranks {
		for _, reg := range rr.Registrations {
			if reg.Peer == l && ql != l {
				ent.exportTo[phys(ql)] |= bit(reg.Buf)
			}
		}
	}
	for q := range n {
		ent.needL2 = ent.needL2 || ent.exportTo[q] != 0 || ent.importFrom[q] != 0
	}
	if ent.needL2 {
		ent.l2 = map[l2Key]*l2Entry{}
	} else {
		ent.l3 = map[l3Key]*l3Entry{}
	}
	// Channel ends: reuse the source's semaphores where compiler/diff says
	// the identity is shared.
	var reuse []int
	kept, rebased := 0, 0
	if src != nil {
		reuse = diff.SemaphoreReuse(src.sched.Bundle.Ranks, b.Ranks)[l]
	}
	added := map[int][]int{} // peer -> our channel indices with new slots
	for c, ch := range t.Channels {
		er := endRes{peer: phys(ch.Peer), init: ch.Init}
		if reuse != nil && reuse[c] >= 0 && reuse[c] < len(src.ends) {
			old := src.ends[reuse[c]]
			er.slot, er.peerInbound = old.slot, old.peerInbound
			kept++
			if old.init != ch.Init {
				rebased++
				e.stats.Created.ChannelEnds++
			}
		} else {
			sl, err := e.newSlot(ch.Init)
			if err != nil {
				return e.fail(w, state, err, true)
			}
			er.slot = sl
			added[er.peer] = append(added[er.peer], c)
			e.stats.Created.ChannelEnds++
			e.stats.Created.Semaphores++
		}
		ent.ends[c] = er
	}
	// Exchange the new slots, point to point, with the peers concerned.
	if err := e.exchangeSlots(ctx, ent, added); err != nil {
		return e.fail(w, state, err, true, bootstrapPeers(err)...)
	}
	e.l1[ent.key] = ent
	w.l1 = ent
	if migrate {
		e.stats.L1Migrations++
	} else {
		e.stats.L1Cold++
	}
	from := -1
	if src != nil {
		from = src.sched.ID
	}
	e.stats.LastMigration = Migration{From: from, To: s.ID, Created: diffCreated(e.stats.Created, before),
		Kept: kept, Rebased: rebased, Elapsed: time.Since(t0)}
	if log.On(log.Info, log.Executor) {
		m := e.stats.LastMigration
		log.Infof(log.Executor, "rank %d: schedule %d (%s, rotation %d) materialised from %d: %d channel ends, %d semaphores, %d kept (%d rebased), %d messages in %v",
			rank, s.ID, s.Name, shift, from, m.Created.ChannelEnds, m.Created.Semaphores, kept, rebased, m.Created.BootstrapMessages, m.Elapsed)
	}
	return EvOK
}

func diffCreated(a, b Created) Created {
	return Created{ChannelEnds: a.ChannelEnds - b.ChannelEnds, Semaphores: a.Semaphores - b.Semaphores,
		Registrations: a.Registrations - b.Registrations, Exports: a.Exports - b.Exports, Staged: a.Staged - b.Staged,
		Connections: a.Connections - b.Connections, BootstrapMessages: a.BootstrapMessages - b.BootstrapMessages,
		BootstrapRounds: a.BootstrapRounds - b.BootstrapRounds, Allocations: a.Allocations - b.Allocations}
}

func (e *Executor) newSlot(init int64) (*slot, error) {
	p := e.l0.pools[len(e.l0.pools)-1]
	if p.used == p.n {
		var err error
		if p, err = e.newPool(); err != nil {
			return nil, err
		}
	}
	s := &slot{pool: p, idx: p.used, curInit: init}
	p.used++
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], semBias+uint64(init))
	if err := e.dev.Upload(s.inbound(), w[:]); err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(w[:], semBias)
	if err := e.dev.Upload(s.expected(), w[:]); err != nil {
		return nil, err
	}
	return s, nil
}

// semBias starts every semaphore slot at inbound = bias + init and expected
// = bias: the waits compare the same difference (ir.md §5.3), and a rebase
// that lowers the expected counter (a slot taken over by an end with a
// larger init, say an LL end that never waited becoming a Simple credit
// end) can never take it below zero.
const semBias = 1 << 40

// exchangeSlots sends each peer the slots of our new ends toward it (with
// the pool handles it lacks) and receives the slots of its ends, which our
// ends signal into. Added ends pair up: a semaphore identity is kept on one
// side exactly when the mirror identity is kept on the other.
func (e *Executor) exchangeSlots(ctx context.Context, ent *l1Entry, added map[int][]int) error {
	if len(added) == 0 {
		return nil
	}
	tag := e.tag(tagL1)
	peers := sortedKeys(added)
	for _, q := range peers {
		if q == e.cfg.Rank {
			continue
		}
		var msg slotMsg
		for _, c := range added[q] {
			sl := ent.ends[c].slot
			msg.Slots = append(msg.Slots, slotRef{Channel: uint32(c), Pool: sl.pool.id, Index: uint32(sl.idx)})
			if !e.l0.sentPool[q][sl.pool.id] {
				e.l0.sentPool[q][sl.pool.id] = true
				msg.Pools = append(msg.Pools, poolRef{ID: sl.pool.id, Handle: sl.pool.handle})
			}
		}
		if err := e.send(q, tag, msg.encode()); err != nil {
			return err
		}
	}
	for _, q := range peers {
		type ref struct{ pool, idx uint32 }
		theirs := map[int]ref{}
		if q == e.cfg.Rank {
			// A channel to ourselves: both ends are ours.
			for _, c := range added[q] {
				theirs[c] = ref{ent.ends[c].slot.pool.id, uint32(ent.ends[c].slot.idx)}
			}
		} else {
			m, err := e.recv(ctx, q, tag)
			if err != nil {
				return err
			}
			sm, err := decodeSlots(m)
			if err != nil {
				return fmt.Errorf("rank %d's slot message: %w", q, err)
			}
			for _, x := range sm.Slots {
				theirs[int(x.Channel)] = ref{x.Pool, x.Index}
			}
			for _, p := range sm.Pools {
				if _, ok := e.l0.peerPools[q][p.ID]; !ok {
					reg, err := e.importHandle(p.Handle)
					if err != nil {
						return fmt.Errorf("import rank %d's semaphore pool %d: %w", q, p.ID, err)
					}
					e.l0.peerPools[q][p.ID] = reg
				}
			}
		}
		for _, c := range added[q] {
			pc := ent.table.Channels[c].PeerChannel
			r, ok := theirs[pc]
			if !ok {
				return fmt.Errorf("%w: rank %d sent no semaphore for its channel %d (our channel %d): the schedules' ends do not pair", ErrMismatch, q, pc, c)
			}
			reg, ok := e.l0.peerPools[q][r.pool]
			if !ok || int64(r.idx) >= poolSlots {
				return fmt.Errorf("rank %d named semaphore pool %d slot %d, which it never exported", q, r.pool, r.idx)
			}
			ent.ends[c].peerInbound = reg.Base + device.Ptr(8*r.idx)
		}
	}
	return nil
}

func sortedKeys(m map[int][]int) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// l1Switch makes w.l1 the running schedule: semaphores it shares with the
// schedule that last used them, under a different init, are rebased by
// their owner (ir.md §5.3: the expected counter moves by the init
// difference) once this rank's launches are quiescent.
func (e *Executor) l1Switch(w *walk) Event {
	e.stats.Switches++
	var todo []int
	for c := range w.l1.ends {
		if er := &w.l1.ends[c]; er.slot.curInit != er.init {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return EvOK
	}
	if w.st.Capturing() {
		return EvCapture
	}
	if err := e.waitInflight(); err != nil {
		return e.fail(w, L1Switch, err, true)
	}
	var buf [8]byte
	for _, c := range todo {
		er := &w.l1.ends[c]
		if err := e.dev.Download(buf[:], er.slot.expected()); err != nil {
			return e.fail(w, L1Switch, err, true)
		}
		v := binary.LittleEndian.Uint64(buf[:]) + uint64(er.slot.curInit-er.init)
		binary.LittleEndian.PutUint64(buf[:], v)
		if err := e.dev.Upload(er.slot.expected(), buf[:]); err != nil {
			return e.fail(w, L1Switch, err, true)
		}
		er.slot.curInit = er.init
		e.stats.Rebases++
	}
	return EvOK
}

// waitInflight waits for every launch this executor enqueued (YES + WAIT in
// the seed's capture table).
//
// It waits on every stream even after a failure and returns the first real
// error; a stream the caller has closed since (device.ErrClosed) was drained
// by its Close.
func (e *Executor) waitInflight() error {
	e.stats.Waits++
	var first error
	for _, st := range e.streams {
		if err := st.Synchronize(); err != nil && !errors.Is(err, device.ErrClosed) && first == nil {
			first = err
		}
	}
	e.streams = e.streams[:0]
	e.tracked = false
	return first
}

// bufBytes is the size of buffer k of physical rank rank for r.
func (e *Executor) bufBytes(r *Request, k ir.BufKind) int64 {
	blocks := ir.Blocks(r.Coll, k, e.n, e.cfg.Rank, r.Root)
	return blocks * r.Count * int64(r.DataType.Size())
}

// identify returns the L2 identity of [p, p+n): its backend allocation, or
// for foreign memory the range itself (generation 0).
func (e *Executor) identify(p device.Ptr, n int64) device.Region {
	if p == 0 || n == 0 {
		return device.Region{}
	}
	if reg, ok := e.dev.Lookup(p, n); ok {
		return reg
	}
	return device.Region{Base: p, Size: n}
}

func (e *Executor) l2Lookup(w *walk) Event {
	if !w.l1.needL2 {
		w.l3map = w.l1.l3
		e.stats.L2Skips++
		return EvSkip
	}
	r := w.r
	key := l2Key{send: e.identify(r.Send, e.bufBytes(r, ir.Input)), recv: e.identify(r.Recv, e.bufBytes(r, ir.Output))}
	if l2 := w.l1.l2[key]; l2 != nil {
		w.l2, w.l3map = l2, l2.l3
		e.stats.L2Hits++
		return EvHit
	}
	if w.st.Capturing() {
		return EvCapture
	}
	return EvMiss
}

// both widens a registration mask in place: input and output alias
// (ir.md §3), so a peer that reaches either may land in the other.
func both(m uint8, inPlace bool) uint8 {
	if inPlace && m != 0 {
		return 3
	}
	return m
}

// l2Setup exports the allocations the peers reach (staging foreign memory),
// sends their handles to those peers, and imports the peers' allocations
// that we reach.
func (e *Executor) l2Setup(ctx context.Context, w *walk) Event {
	r, ent := w.r, w.l1
	sizes := [2]int64{e.bufBytes(r, ir.Input), e.bufBytes(r, ir.Output)}
	user := [2]device.Ptr{r.Send, r.Recv}
	l2 := &l2Entry{peerReg: make([][2]device.Region, e.n), l3: map[l3Key]*l3Entry{}}
	var exp uint8
	for _, m := range ent.exportTo {
		exp |= both(m, r.InPlace)
	}
	var handles [2]device.Handle
	if exp != 0 {
		if err := e.stage(l2, exp, sizes, user); err != nil {
			return e.fail(w, L2Setup, err, true)
		}
		for k := range 2 {
			p, n := user[k], sizes[k]
			if l2.staged {
				p, n = l2.local[k].Ptr, l2.local[k].Size
			}
			if exp&(1<<k) == 0 || n == 0 {
				continue
			}
			reg, ok := e.dev.Lookup(p, n)
			if !ok {
				return e.fail(w, L2Setup, fmt.Errorf("%s is not a backend allocation", ir.BufKind(k).LongName()), true)
			}
			h, err := e.dev.Export(reg)
			if err != nil {
				return e.fail(w, L2Setup, err, true)
			}
			l2.region[k], handles[k] = reg, h
			e.stats.Created.Exports++
		}
	}
	tag := e.tag(tagL2)
	for q, m := range ent.exportTo {
		m = both(m, r.InPlace)
		if m == 0 || q == e.cfg.Rank {
			continue
		}
		var msg regMsg
		for k := range 2 {
			if m&(1<<k) == 0 || handles[k] == nil {
				continue
			}
			msg = append(msg, regRef{Kind: uint32(k), Handle: handles[k]})
		}
		if err := e.send(q, tag, msg.encode()); err != nil {
			return e.fail(w, L2Setup, err, true, q)
		}
	}
	for q, m := range ent.importFrom {
		if m == 0 {
			continue
		}
		if q == e.cfg.Rank {
			l2.peerReg[q] = l2.region
			continue
		}
		msg, err := e.recv(ctx, q, tag)
		if err != nil {
			return e.fail(w, L2Setup, fmt.Errorf("waiting for rank %d's buffer registrations (if rank %d kept its cached buffers while this rank changed them, this is the seed's Known Issue 3): %w", q, q, err), true, q)
		}
		regs, err := decodeRegs(msg)
		if err != nil {
			return e.fail(w, L2Setup, fmt.Errorf("rank %d's registration message: %w", q, err), true, q)
		}
		for _, g := range regs {
			reg, err := e.dev.Import(g.Handle)
			if err != nil {
				return e.fail(w, L2Setup, fmt.Errorf("import rank %d's %s: %w", q, ir.BufKind(g.Kind).LongName(), err), true, q)
			}
			l2.imports = append(l2.imports, reg.Base)
			l2.peerReg[q][g.Kind] = reg
			e.stats.Created.Registrations++
		}
	}
	key := l2Key{send: e.identify(r.Send, sizes[0]), recv: e.identify(r.Recv, sizes[1])}
	ent.l2[key] = l2
	w.l2, w.l3map = l2, l2.l3
	e.stats.L2Setups++
	return EvOK
}

// stage replaces the exported buffers that are foreign memory by backend
// allocations, with copies before (input) and after (output) each launch.
// In place, the union of the two buffers is staged as one, so that the
// aliasing of ir.md §3 is kept. Foreign memory's L2 identity is its exact
// range, so the staging serves every request of this entry.
func (e *Executor) stage(l2 *l2Entry, exp uint8, sizes [2]int64, user [2]device.Ptr) error {
	foreign := func(k int) bool {
		if sizes[k] == 0 {
			return false
		}
		_, ok := e.dev.Lookup(user[k], sizes[k])
		return !ok
	}
	in, out := foreign(0), foreign(1)
	if !(in && exp&1 != 0) && !(out && exp&2 != 0) {
		return nil
	}
	l2.staged = true
	for k := range 2 {
		l2.local[k] = device.Mem{Ptr: user[k], Size: sizes[k]}
	}
	overlap := sizes[0] > 0 && sizes[1] > 0 && user[0] < user[1]+device.Ptr(sizes[1]) && user[1] < user[0]+device.Ptr(sizes[0])
	if overlap {
		lo := min(user[0], user[1])
		hi := max(user[0]+device.Ptr(sizes[0]), user[1]+device.Ptr(sizes[1]))
		n := int64(hi - lo)
		p, err := e.alloc(n)
		if err != nil {
			return err
		}
		l2.stageIn = append(l2.stageIn, device.Copy{Dst: p, Src: lo, N: n})
		l2.stageOut = append(l2.stageOut, device.Copy{Dst: lo, Src: p, N: n})
		for k := range 2 {
			l2.local[k].Ptr = p + (user[k] - lo)
		}
		e.stats.Created.Staged++
		return nil
	}
	for k := range 2 {
		if !foreign(k) || exp&(1<<k) == 0 {
			continue
		}
		p, err := e.alloc(sizes[k])
		if err != nil {
			return err
		}
		if k == 0 {
			l2.stageIn = append(l2.stageIn, device.Copy{Dst: p, Src: user[k], N: sizes[k]})
		} else {
			l2.stageOut = append(l2.stageOut, device.Copy{Dst: user[k], Src: p, N: sizes[k]})
		}
		l2.local[k].Ptr = p
		e.stats.Created.Staged++
	}
	return nil
}

// exchangeOffsets tells the peers that reach our buffers where this
// request's buffers lie in the allocations they imported, and learns the
// same of the peers we reach (one message each way per peer concerned).
func (e *Executor) exchangeOffsets(ctx context.Context, w *walk, local [2]device.Mem) ([][2]device.Mem, error) {
	r, ent, l2 := w.r, w.l1, w.l2
	tag := e.tag(tagL3)
	for q, m := range ent.exportTo {
		m = both(m, r.InPlace)
		if m == 0 || q == e.cfg.Rank {
			continue
		}
		var msg offMsg
		for k := range 2 {
			if m&(1<<k) == 0 || local[k].Size == 0 {
				continue
			}
			msg = append(msg, offRef{Kind: uint32(k), Off: int64(local[k].Ptr - l2.region[k].Base), Size: local[k].Size})
		}
		if err := e.send(q, tag, msg.encode()); err != nil {
			return nil, err
		}
	}
	peer := make([][2]device.Mem, e.n)
	for q, m := range ent.importFrom {
		if m == 0 {
			continue
		}
		if q == e.cfg.Rank {
			peer[q] = local
			continue
		}
		msg, err := e.recv(ctx, q, tag)
		if err != nil {
			return nil, fmt.Errorf("waiting for rank %d's buffer offsets (Known Issue 3 if the ranks' buffers are not paired stably): %w", q, err)
		}
		offs, err := decodeOffsets(msg)
		if err != nil {
			return nil, fmt.Errorf("rank %d's offset message: %w", q, err)
		}
		for _, o := range offs {
			reg := l2.peerReg[q][o.Kind]
			if reg.Size == 0 || o.Off > reg.Size-o.Size {
				return nil, fmt.Errorf("rank %d's %s (offset %d, %d bytes) lies outside the allocation it registered", q, ir.BufKind(o.Kind).LongName(), o.Off, o.Size)
			}
			peer[q][o.Kind] = device.Mem{Ptr: reg.Base + device.Ptr(o.Off), Size: o.Size}
		}
	}
	return peer, nil
}

func (e *Executor) l3Lookup(w *walk) Event {
	r := w.r
	w.l3key = l3Key{send: r.Send, recv: r.Recv, count: r.Count, dt: r.DataType, op: r.RedOp, inplace: r.InPlace, pt: r.PacketType}
	if w.s.Bundle.Meta.Collective.Rooted() {
		w.l3key.root = r.Root
	}
	if m := &e.lastL3; m.ent != nil && m.l1 == w.l1 && m.l2 == w.l2 && m.key == w.l3key {
		w.l3 = m.ent
		e.stats.L3Hits++
		return EvHit
	}
	if l3 := w.l3map[w.l3key]; l3 != nil {
		w.l3 = l3
		e.lastL3.l1, e.lastL3.l2, e.lastL3.key, e.lastL3.ent = w.l1, w.l2, w.l3key, l3
		e.stats.L3Hits++
		return EvHit
	}
	// A miss is set up even while the stream is being captured into a CUDA
	// graph: L3 setup allocates nothing the peers see and makes no call that
	// capture forbids (device.Backend.Prepare), so a captured request whose
	// schedule and buffers are materialised (L1, L2 hits) may use a new
	// count or new offsets in the same allocations, as nccl-tests -G does.
	// Scratch growth (Grow) still refuses during capture.
	return EvMiss
}

// maxL3 bounds the L3 entries under one L1 or L2 entry; the map is cleared
// when full (request shapes that keep changing, such as benchmark sweeps).
const maxL3 = 4096

func (e *Executor) l3Setup(ctx context.Context, w *walk) Event {
	r, ent, t := w.r, w.l1, w.l1.table
	ll := t.Protocol == ir.LL
	slices := int64(1)
	if !ll {
		sb := t.SliceBytes
		if sb == 0 {
			sb = e.cfg.SliceBytes
		}
		slices = ir.SlicesFor(r.Count, t.ChunksPerBlock, r.DataType, sb)
	}
	lay, err := ir.NewLayout(r.Count, r.DataType, t.ChunksPerBlock, slices)
	if err != nil {
		return e.fail(w, L3Setup, err, false)
	}
	// Scratch: per launch maxScratch chunks of Stride elements (twice for LL
	// packets), in half the buffer when launches alternate.
	per, ok := mulOK(ent.maxScratch, lay.Stride*lay.ElemSize)
	if ok && ll {
		per, ok = mulOK(per, 2)
	}
	if !ok {
		return e.fail(w, L3Setup, errors.New("scratch size overflows"), false)
	}
	halves := ll || e.cfg.Alternate
	capB := e.l0.scratch.Size
	avail := capB
	if halves {
		avail = capB / 2
	}
	if per > avail {
		need := per
		if halves {
			need = 2 * per
		}
		w.need = need
		return EvTooSmall
	}
	a := &device.Args{Table: t, TableMem: ent.tabMem, Rank: e.cfg.Rank, NRanks: e.n, Shift: w.shift,
		Count: r.Count, DataType: r.DataType, RedOp: r.RedOp, InPlace: r.InPlace, PacketType: r.PacketType,
		Layout: lay, Publish: ent.publish, Abort: e.l0.control, Done: e.l0.control + 8, Timeout: e.cfg.Timeout}
	if t.Collective.Rooted() {
		a.Root = r.Root
	}
	a.Buf[device.Scratch] = e.l0.scratch
	if halves {
		a.ScratchHalf = capB / 2
	}
	if n := e.bufBytes(r, ir.Input); n > 0 {
		a.Buf[device.Input] = device.Mem{Ptr: r.Send, Size: n}
	}
	if n := e.bufBytes(r, ir.Output); n > 0 {
		a.Buf[device.Output] = device.Mem{Ptr: r.Recv, Size: n}
	}
	var peerBuf [][2]device.Mem
	if w.l2 != nil {
		if w.l2.staged {
			a.Buf[device.Input], a.Buf[device.Output] = w.l2.local[0], w.l2.local[1]
			a.StageIn, a.StageOut = w.l2.stageIn, w.l2.stageOut
		}
		var err error
		if peerBuf, err = e.exchangeOffsets(ctx, w, [2]device.Mem{a.Buf[device.Input], a.Buf[device.Output]}); err != nil {
			return e.fail(w, L3Setup, err, true, bootstrapPeers(err)...)
		}
	}
	a.Ends = make([]device.End, len(ent.ends))
	for c, er := range ent.ends {
		pe := device.End{Peer: er.peer, Inbound: er.slot.inbound(), PeerInbound: er.peerInbound, Expected: er.slot.expected()}
		pe.PeerBuf[device.Scratch] = e.l0.peers[er.peer].scratch
		if peerBuf != nil {
			pe.PeerBuf[device.Input], pe.PeerBuf[device.Output] = peerBuf[er.peer][0], peerBuf[er.peer][1]
		}
		a.Ends[c] = pe
	}
	for q := range e.n {
		if q != e.cfg.Rank {
			a.Fence = append(a.Fence, device.PeerWord{Peer: q, Word: e.l0.peers[q].done})
		}
	}
	prep, err := e.dev.Prepare(a)
	if err != nil {
		return e.fail(w, L3Setup, err, false)
	}
	// A full map is dropped, which waits for the stream: not during a
	// capture, which may neither wait for its stream nor free memory (a
	// free on the caller's thread invalidates a global or thread-local
	// capture). The map then grows past maxL3 until the next miss outside
	// capture; what a capture adds is kept until Close anyway.
	if len(w.l3map) >= maxL3 && !w.st.Capturing() {
		if err := e.waitInflight(); err != nil {
			return e.fail(w, L3Setup, err, true)
		}
		e.dropL3(w.l3map)
	}
	w.l3 = &l3Entry{prep: prep, args: a, sig: scratchSig{l1: ent, chunkBytes: lay.Stride * lay.ElemSize, slices: lay.Slices}}
	w.l3map[w.l3key] = w.l3
	e.stats.L3Setups++
	return EvOK
}

func mulOK(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || c < 0 {
		return 0, false
	}
	return c, true
}

// grow replaces the scratch buffer by one of at least w.need bytes (the
// next power of two), on every rank at the same request: the need is a pure
// function of the agreed request and schedule.
func (e *Executor) grow(ctx context.Context, w *walk) Event {
	if w.st.Capturing() { // an L3 setup during capture that needs more scratch (seed README: NO)
		return EvCapture
	}
	if err := e.waitInflight(); err != nil {
		return e.fail(w, Grow, err, true)
	}
	capB := e.l0.scratch.Size
	for capB < w.need {
		capB *= 2
	}
	capB = roundUp(capB, scratchAlign)
	sc, err := e.alloc(capB)
	if err != nil {
		return e.fail(w, Grow, fmt.Errorf("scratch of %d bytes: %w", capB, err), true)
	}
	h, err := e.export(sc, capB)
	if err != nil {
		return e.fail(w, Grow, err, true)
	}
	all, err := e.allGather(ctx, growMsg{Scratch: capB, Handle: h}.encode())
	if err != nil {
		return e.fail(w, Grow, err, true, bootstrapPeers(err)...)
	}
	old := e.l0.scratch
	var bad []int
	for q, m := range all {
		gm, err := decodeGrow(m)
		qcap, qh := gm.Scratch, gm.Handle
		if err != nil || qcap != capB {
			bad = append(bad, q)
			continue
		}
		if q == e.cfg.Rank {
			e.l0.peers[q].scratch = device.Mem{Ptr: sc, Size: capB}
			continue
		}
		reg, err := e.importHandle(qh)
		if err != nil {
			return e.fail(w, Grow, fmt.Errorf("import rank %d's scratch: %w", q, err), true, q)
		}
		if p := e.l0.peers[q].scratch.Ptr; p != 0 && !e.captured {
			e.unimport(p) // (captured graphs keep it: unimported at Close)
		}
		e.l0.peers[q].scratch = device.Mem{Ptr: reg.Base, Size: capB}
	}
	if len(bad) > 0 {
		return e.fail(w, Grow, fmt.Errorf("%w: growing to %d bytes, ranks %v differ", ErrScratchMismatch, capB, bad), true, bad...)
	}
	e.l0.scratch = device.Mem{Ptr: sc, Size: capB}
	if !e.captured { // (captured graphs keep it: freed at Close)
		e.freeAlloc(old.Ptr)
	}
	// Every prepared launch names the old scratch.
	for _, ent := range e.l1 {
		e.dropL3(ent.l3)
		for _, l2 := range ent.l2 {
			e.dropL3(l2.l3)
		}
	}
	e.lastSig = scratchSig{}
	e.stats.Growths++
	e.stats.ScratchBytes = capB
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: scratch grown from %d to %d bytes", e.cfg.Rank, old.Size, capB)
	}
	return EvOK
}

// dropL3 empties m, releasing each prepared launch (or, if a CUDA graph
// captured it, keeping it until Close).
func (e *Executor) dropL3(m map[l3Key]*l3Entry) {
	e.lastL3.ent = nil
	for k, v := range m {
		v.dropped = true
		if v.captured {
			e.retained = append(e.retained, v.prep)
		} else {
			v.prep.Release()
		}
		delete(m, k)
	}
}

func (e *Executor) freeAlloc(p device.Ptr) {
	for i, a := range e.allocs {
		if a == p {
			e.allocs = append(e.allocs[:i], e.allocs[i+1:]...)
			break
		}
	}
	e.dev.Free(p)
}

func (e *Executor) doLaunch(w *walk) Event {
	l3 := w.l3
	// Fence when this launch lays scratch out differently from the previous
	// one, and always for LL schedules: an LL sender gets no back-pressure,
	// so without the fence a rank that only sends (a rooted collective's
	// root) could run two launches ahead and overwrite the scratch half a
	// slow reader still polls (docs/design/ir.md §5.4; the verifier models
	// LL launches with this fence).
	//
	// A schedule the verifier found racing between iterations (TS0206,
	// optable.Table.FenceLaunches) is fenced at every launch.
	//
	// A launch captured into a CUDA graph is always fenced: its replays may
	// follow any eager launch. And the launch after it is fenced too
	// (lastSig reset): the device may have run replays in between. So is
	// the launch after an eager launch whose layout differs from a captured
	// one's: the application may replay a graph between any two launches.
	fence := e.launch > 0 && (l3.sig != e.lastSig || w.l1.fenceAll)
	var capturing bool
	var err error
	if cl, ok := w.st.(device.CaptureLauncher); ok && (e.lastSt == nil || e.lastSt == w.st) {
		// Nothing to order between the capture check and the launch: the
		// backend does both under one switch to the device's context.
		capturing, err = cl.CaptureLaunch(l3.prep, e.launch+1, fence, e.launch > 0)
		fence = fence || (capturing && e.launch > 0)
	} else {
		capturing = w.st.Capturing()
		fence = fence || (capturing && e.launch > 0)
		// One rank's launches run in call order even when consecutive calls
		// use different streams (as NCCL orders one communicator's
		// operations): the new stream waits for the previous one on the
		// device. Not across a capture boundary: a capture may not wait on
		// work outside it.
		if prev := e.lastSt; prev != nil && prev != w.st && !capturing {
			if o, ok := w.st.(device.StreamOrderer); ok && !prev.Capturing() {
				if err := o.After(prev); err != nil {
					return e.fail(w, Launch, err, false)
				}
			}
		}
		err = w.st.Launch(l3.prep, e.launch+1, fence)
	}
	return e.launched(w, fence, capturing, err)
}

// launched is doLaunch's bookkeeping after the backend's launch call
// returned err: the counters, the last launch's entries and layout, what
// a capture changes, the stream to wait for.
func (e *Executor) launched(w *walk, fence, capturing bool, err error) Event {
	l3 := w.l3
	if err != nil {
		// Sticky unless nothing can have been enqueued (a closed stream):
		// the peers have launched this request, and this rank's launch
		// counter would fall behind theirs.
		return e.fail(w, Launch, err, !errors.Is(err, device.ErrClosed))
	}
	e.launch++
	if fence {
		e.fences++
	}
	if e.lastSt != w.st {
		e.lastSt = w.st
		e.lastCL, _ = w.st.(device.CaptureLauncher)
		e.tracked = false
	}
	e.lastL1, e.lastSig = w.l1, l3.sig
	if capturing {
		if !e.captured {
			e.capSig = l3.sig
		} else if l3.sig != e.capSig {
			e.capMixed = true
		}
		l3.captured, e.captured = true, true
		e.lastSig = scratchSig{}
	} else if e.capSig.l1 != nil && (e.capMixed || l3.sig != e.capSig) { // (capSig.l1: something was captured)
		e.lastSig = scratchSig{}
	}
	e.trackStream(w.st)
	return EvOK
}

func (e *Executor) trackStream(st device.Stream) {
	e.tracked = st == e.lastSt
	for _, s := range e.streams {
		if s == st {
			return
		}
	}
	e.streams = append(e.streams, st)
}

// Wait waits for every launch enqueued since the last wait (Finalize; the
// YES + WAIT of migration and growth).
func (e *Executor) Wait() error {
	return e.waitInflight()
}

// Abort stops this rank's running and future launches: it sets the abort
// word (every wait of a launch returns) and makes the executor unusable.
// Safe to call concurrently with Execute.
func (e *Executor) Abort(cause error) {
	if cause == nil {
		cause = ErrClosed
	}
	e.setFailed(cause)
	if p := device.Ptr(e.abortW.Load()); p != 0 {
		var one [8]byte
		one[0] = 1
		e.dev.Upload(p, one[:])
	}
}

// Close waits for in-flight launches (after Abort they stop at their next
// wait), then releases every prepared launch, import and allocation. It
// returns the launches' error unless the executor had already failed.
func (e *Executor) Close() error {
	// Wait even after a failure or Abort: a launch still running reads
	// this memory (aborted launches stop at their next wait).
	aborted := e.Err() != nil
	werr := e.waitInflight()
	if aborted {
		werr = nil
	}
	e.setFailed(ErrClosed)
	for _, ent := range e.l1 {
		e.dropL3(ent.l3)
		for _, l2 := range ent.l2 {
			e.dropL3(l2.l3)
			for _, p := range l2.imports {
				e.dev.Unimport(p)
			}
		}
	}
	for _, p := range e.retained {
		p.Release()
	}
	e.retained = nil
	for _, p := range e.l0.allImports {
		e.dev.Unimport(p)
	}
	for _, p := range e.allocs {
		e.dev.Free(p)
	}
	e.allocs = nil
	e.l1 = map[l1Key]*l1Entry{}
	e.lastL1 = nil
	return werr
}

// bootstrapPeers extracts the ranks a bootstrap error names.
func bootstrapPeers(err error) []int {
	var be *bootstrap.Error
	if errors.As(err, &be) {
		return be.Missing
	}
	return nil
}
