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
// its rendering), and it is the one path that builds launch plans (Plan,
// plan.go): a repeated call is launched from its plan (Launch) without a
// walk, by the Go path or by a launcher outside Go (Repeatable,
// PlansLaunched). Files: walk.go (the walk), l0.go, l1.go, migration.go
// (delta migration), l2.go, l3.go, scratch.go (growth), launch.go (the
// launch every walk and plan makes), plan.go, state.go (the table),
// messages.go (the exchanges' wire format).
//
// An Executor belongs to one rank of one communicator and is not safe for
// concurrent use (a communicator's calls are serialised, as NCCL's are),
// except Abort, Err and Stats.
package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
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
	// Node is every rank's node (0 .. nodes-1, by physical rank), as the
	// communicator's layout checks found them (MSCCLPP_HOSTID); nil: one
	// node. Ranks of different nodes never map each other's memory: their
	// channels must be port channels, which the process's proxy executes
	// over UCX (docs/transport.md).
	Node []int
	// LocalRank and LocalRanks place this rank on its node (local rank k
	// uses the k-th NIC of MSCCLPP_HCA_DEVICES), HostID names the node:
	// the proxy's configuration and the key of the process's proxy.
	LocalRank, LocalRanks int
	HostID                string
	// DeviceRanks is the number of ranks sharing this rank's GPU (the
	// communicator counts them by machine and device: comm.Layout), 0
	// when unknown; the point-to-point engine's residency check uses it
	// (device.P2PArgs.DeviceRanks).
	DeviceRanks int
	// ProxyLanes is the number of parallel connections to each peer on
	// another node, 1 to MaxLanes (0: THESEUS_PROXY_LANES, whose default
	// is AutoLanes of LocalRanks):
	// one proxy per lane (docs/transport.md, "Lanes"). Every rank of a
	// job across nodes must use the same; the communicator checks it at
	// init (comm.CheckLayout), the executor does not.
	ProxyLanes int
	// Executor is how launches reach the device: ModeLaunch (a kernel
	// launch per call) or ModePersistent (a resident executor fed through
	// a queue: device.ResidentBackend; a backend without one launches);
	// "" reads THESEUS_EXECUTOR.
	Executor string
	// GenericOnly runs the generic executor even where the schedule's
	// bundle carries specialised kernels (THESEUS_SPECIALIZED=0).
	GenericOnly bool
	// LLFence fences every launch of an LL schedule, self-fenced ones too
	// (THESEUS_LL_FENCE=1; docs/executor.md, "Fences"). Every rank of a
	// job across nodes must use the same (the fences with peers on other
	// nodes are meetings); the communicator checks it at init.
	LLFence bool
	// Resident configures the persistent executor; its zero Blocks,
	// Threads and Idle read THESEUS_PERSISTENT_BLOCKS, _THREADS and
	// _IDLE_US (Rank, Abort and Timeout are the executor's own).
	Resident device.ResidentConfig
}

// The executor modes (Config.Executor, THESEUS_EXECUTOR).
const (
	ModeLaunch     = "launch"
	ModePersistent = "persistent"
)

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
	if !c.GenericOnly {
		on, err := env.Specialized.Bool()
		if err != nil {
			return c, err
		}
		c.GenericOnly = !on
	}
	if !c.LLFence {
		on, err := env.LLFence.Bool()
		if err != nil {
			return c, err
		}
		c.LLFence = on
	}
	lanes, err := ProxyLanes(c.ProxyLanes)
	if err != nil {
		return c, err
	}
	c.ProxyLanes = EffectiveLanes(lanes, c.LocalRanks)
	if c.Executor == "" {
		v, err := env.Executor.Enum()
		if err != nil {
			return c, err
		}
		c.Executor = v
	}
	if c.Executor != ModeLaunch && c.Executor != ModePersistent {
		return c, fmt.Errorf("executor: mode %q (want %s or %s)", c.Executor, ModeLaunch, ModePersistent)
	}
	if c.Executor == ModePersistent {
		r := &c.Resident
		for _, f := range []struct {
			v      *int
			p      *env.Param
			lo, hi int64
			step   int64
		}{{&r.Blocks, env.PersistBlocks, 1, 32, 1}, {&r.Threads, env.PersistThreads, 32, 1024, 32}} {
			if *f.v != 0 {
				continue
			}
			n, err := f.p.Int()
			if err != nil {
				return c, err
			}
			if n < f.lo || n > f.hi || n%f.step != 0 {
				return c, fmt.Errorf("THESEUS_%s=%d: want a multiple of %d from %d to %d", f.p.Name, n, f.step, f.lo, f.hi)
			}
			*f.v = int(n)
		}
		if r.Idle == 0 {
			us, err := env.PersistIdle.Int()
			if err != nil {
				return c, err
			}
			if us < 0 {
				return c, fmt.Errorf("THESEUS_PERSISTENT_IDLE_US=%d: want 0 or more", us)
			}
			r.Idle = time.Duration(us) * time.Microsecond
		}
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
	// Walks are Execute calls: walks of the state machine, the one path
	// that builds collectives' plans (point-to-point calls count in P2P). Every counter below but Launches, Fences and
	// PlanLaunches counts what walks did.
	Walks uint64
	// Launches are the launches enqueued (= the launch counter): those of
	// walks and those of plans (Launch, and those made from C that
	// PlansLaunched counts).
	Launches uint64
	// PlanLaunches are the launches made from plans without a walk;
	// PlanFailures the plans whose launch failed (Launch's error).
	PlanLaunches, PlanFailures uint64

	L0Setups                  uint64
	L1Same, L1Hits            uint64 // hits on the running schedule / on another materialised one
	L1Cold, L1Migrations      uint64
	L2Skips, L2Hits, L2Setups uint64
	L3Hits, L3Setups          uint64
	L3Rebases                 uint64 // L3 setups of a shape's entry moved to new buffers (device.Rebaser: no Prepare)
	Switches, Rebases         uint64 // schedule switches; semaphores rebased
	Waits                     uint64 // waits for in-flight launches
	Growths                   uint64 // scratch reallocations
	Fences                    uint64 // fenced launches
	// L2Pushes are walks that told the peers where this rank's buffers
	// moved (L2Setup); Rebinds the prepared launches this rank's service
	// goroutines repointed at a peer's moved buffers; PeerRequests the
	// peers' pushes and drops they carried out.
	L2Pushes, Rebinds, PeerRequests uint64
	// Registered and Deregistered count Register and Deregister calls that
	// succeeded; Drops the peers' deregistrations this rank carried out
	// (their allocations unimported here).
	Registered, Deregistered, Drops uint64
	ScratchBytes                    int64 // current scratch capacity
	Created                         Created
	LastMigration                   Migration
	Refused                         uint64 // misses refused during graph capture
	// Resident counts the persistent executor's work (Config.Executor).
	Resident                   device.ResidentStats
	StateVisits                [numStates]uint64
	TransitionsTaken, Failures uint64
	// P2P counts the point-to-point engine's work (p2p.go); its launches
	// are not in Launches.
	P2P P2PStats
}

// Created counts the resources the executor created on this rank.
type Created struct {
	// ChannelEnds are channel-end records (an end whose identity, init
	// included, no materialised schedule had).
	ChannelEnds int
	// Semaphores are new semaphore slots (each exchanged with its peer).
	Semaphores int
	// Registrations are peers' allocations imported (L2, by the service
	// goroutines).
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
	// What a plan's launch reads or writes (Launch, enqueue) comes first,
	// together, in two cache lines (TestExecutorLayout): a rank's thread
	// comes back from a launch that waited for the GPU with cold caches,
	// and every cache line it touches costs.

	// gen is the executor's generation: a Plan is valid only while gen is
	// the one it was built in. It moves on whenever prepared launches are
	// dropped (scratch growth, a full L3 map, Close).
	gen uint64
	// lastL1 is the running schedule: the L1 entry whose channel-end inits
	// the shared semaphore slots hold (set by l1Switch). A plan of another
	// L1 entry waits for a walk, whose switch rebases them.
	lastL1 *l1Entry
	failed atomic.Pointer[error]
	// lastCL is lastSt as a device.CaptureLauncher (nil when it is not
	// one); tracked says lastSt is in streams (trackStream), so that a
	// repeated launch on it adds nothing.
	lastCL device.CaptureLauncher
	lastSt device.Stream // the stream of the last launch
	launch uint64        // the launch counter (Stats.Launches)
	fences uint64        // fenced launches (Stats.Fences)
	// planLaunches counts launches from plans (Stats.PlanLaunches).
	planLaunches uint64
	lastSig      scratchSig // the scratch layout of the last launch
	// capMixed: the launches captured into CUDA graphs had more than one
	// scratch layout (capSig). persistent: launches go through the
	// resident executor (res: Config.Executor).
	tracked, capMixed, persistent bool
	// capSig is the scratch layout of the launches captured into CUDA
	// graphs, capMixed set once they had more than one: a graph's replay
	// may run before any eager launch (enqueue). A launch reads capSig.l1
	// (nil: nothing was captured) and the rest only after a capture.
	capSig scratchSig

	planFailures uint64 // plans whose launch failed (Stats.PlanFailures)
	trace        func(Transition)
	// spans, when set, is told how long each state of a walk took
	// (SetSpans); ops is the launches' op trace and opSink its reader
	// (TraceOps).
	spans  func(s State, begin, end int64)
	ops    device.OpTrace
	opSink func(device.OpSpan)
	opDrop func(uint64)
	// lastL3 is the L3 entry of the last hit or setup, under its L1 and L2
	// entries: a walk of the same request finds it without hashing its
	// key. Cleared whenever L3 entries are dropped (dropL3).
	lastL3 struct {
		ent *l3Entry
		l1  *l1Entry
		l2  *l2Entry
		key l3Key
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
	// abortMu orders Abort's store of the abort word before Close frees
	// the control segment: abortW is cleared under it, so an Abort that
	// comes late (a peer's loss seen while the communicator is destroyed)
	// never writes freed memory.
	abortMu sync.Mutex
	abortW  atomic.Uintptr // the control segment once L0 exists, 0 after Close
	closed  bool
	stats   Stats
	// port is the proxy side: connections to peers on other nodes
	// (port.go).
	port portState
	// p2p is the point-to-point engine's state (p2p.go).
	p2p p2pState

	// The peers' side of L2 (peers.go): their imported allocations, their
	// current buffers, the prepared launches bound to them, the service
	// goroutines that keep them current.
	peers peers
	// pushed[q][k] is what peer q last saw of our buffer k (l2.go,
	// pushTo); sentHandle[q] the allocations of ours q has imported.
	pushed     [][2]pushedBuf
	sentHandle []map[exportID]bool
	// regs are the registered allocations (register.go).
	regs registry
	// lastEager is the launch counter of the last launch not captured
	// into a CUDA graph (a push names it: peers.go).
	lastEager uint64
	// res is the persistent executor (Config.Executor), started at L0
	// setup; resUser and resSt are the caller's stream of the last launch
	// and its stream through res.
	res     device.Resident
	resUser device.Stream
	resSt   device.Stream
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
	case cfg.Node != nil && len(cfg.Node) != cfg.NRanks:
		return nil, fmt.Errorf("executor: %d node indices for %d ranks", len(cfg.Node), cfg.NRanks)
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

// SetSpans installs a function told, after each state of a walk, the
// state and when it began and ended (Unix ns): the host spans of a trace
// (docs/trace.md). nil removes it.
func (e *Executor) SetSpans(f func(s State, begin, end int64)) { e.spans = f }

// TraceOps makes every launch prepared from now on record its ops' times
// into a buffer of records op records (device.OpTracer), which the
// executor drains into sink whenever it knows that no launch writing it
// runs: after waiting for its in-flight launches (Wait, Close, scratch
// growth, a migration's rebase) and at Synced; dropped is told how many
// records did not fit since the last drain. It reports false, recording
// nothing, when the backend has no op trace. Call it before the first
// Execute. Errors: the backend's.
func (e *Executor) TraceOps(records int, sink func(device.OpSpan), dropped func(uint64)) (bool, error) {
	tr, ok := e.dev.(device.OpTracer)
	if !ok || sink == nil || records < 1 {
		return false, nil
	}
	ops, err := tr.NewOpTrace(records)
	if err != nil {
		return false, err
	}
	e.ops, e.opSink, e.opDrop = ops, sink, dropped
	return true, nil
}

// Synced tells the executor that every launch it enqueued on st has
// finished (the communicator waited for st): when st is the only stream
// launched on since the last wait, the op trace is drained (TraceOps).
func (e *Executor) Synced(st device.Stream) {
	if e.ops == nil {
		return
	}
	for _, s := range e.streams {
		if s != st {
			return
		}
	}
	e.drainOps()
}

// drainOps empties the op trace into its sink.
func (e *Executor) drainOps() {
	if d := e.ops.Drain(e.opSink); d > 0 && e.opDrop != nil {
		e.opDrop(d)
	}
}

// Stats returns a copy of the counters. Like Execute, it must not run
// concurrently with other calls.
func (e *Executor) Stats() Stats {
	st := e.stats
	st.Launches, st.Fences, st.PlanLaunches, st.PlanFailures = e.launch, e.fences, e.planLaunches, e.planFailures
	st.P2P = e.P2PStats()
	st.Rebinds, st.PeerRequests, st.Drops = e.peers.rebinds.Load(), e.peers.served.Load(), e.peers.drops.Load()
	st.Created.Registrations += int(e.peers.imported.Load())
	st.Created.BootstrapMessages += int(e.peers.acks.Load())
	if e.res != nil {
		st.Resident = e.res.Stats()
	}
	return st
}

// Resident is the persistent executor (Config.Executor), nil before L0 or
// in launch mode.
func (e *Executor) Resident() device.Resident { return e.res }

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

// Wait waits for every launch enqueued since the last wait (Finalize; the
// YES + WAIT of migration and growth).
func (e *Executor) Wait() error {
	return e.waitInflight()
}

// Abort stops this rank's running and future launches: it sets the abort
// word (every wait of a launch returns) and makes the executor unusable.
// Safe to call concurrently with Execute and Close, and after Close (it
// then only records the cause, if there is none yet).
func (e *Executor) Abort(cause error) {
	if cause == nil {
		cause = ErrClosed
	}
	e.setFailed(cause)
	e.abortMu.Lock()
	defer e.abortMu.Unlock()
	if p := device.Ptr(e.abortW.Load()); p != 0 {
		var one [8]byte
		one[0] = 1
		e.dev.Upload(p, one[:])
	}
}

// Close waits for in-flight launches (after Abort they stop at their next
// wait), then releases every prepared launch, import and allocation. It
// returns the launches' error unless the executor had already failed.
// A second Close does nothing.
func (e *Executor) Close() error {
	if e.closed {
		return nil
	}
	e.closed = true
	// Wait even after a failure or Abort: a launch still running reads
	// this memory (aborted launches stop at their next wait).
	aborted := e.Err() != nil
	werr := e.waitInflight()
	if e.res != nil {
		// The consumer has run every launch (the streams waited for
		// them): it stops, and its queue goes, before the memory its
		// launches name.
		if err := e.res.Close(); err != nil && werr == nil {
			werr = err
		}
		e.res, e.persistent, e.resUser, e.resSt = nil, false, nil, nil
	}
	if aborted {
		werr = nil
	}
	if !aborted && werr == nil {
		e.p2pDrainLinks()
	}
	e.setFailed(ErrClosed)
	// The service goroutines stop (one waiting for this rank's launches
	// sees the executor closed), before anything they use is released.
	e.stopServices()
	// From here on an Abort writes no abort word: the control segment is
	// freed below.
	e.abortMu.Lock()
	e.abortW.Store(0)
	e.abortMu.Unlock()
	for _, ent := range e.l1 {
		e.dropL3(ent.l3)
		for _, l2 := range ent.l2 {
			e.dropL3(l2.l3)
		}
	}
	e.closeP2P()
	e.unimportAll()
	for _, p := range e.retained {
		p.Release()
	}
	e.retained = nil
	if e.ops != nil {
		e.ops.Close()
		e.ops = nil
	}
	for _, p := range e.l0.allImports {
		e.dev.Unimport(p)
	}
	e.l0.allImports = nil
	e.closePorts()
	for _, p := range e.allocs {
		e.dev.Free(p)
	}
	e.allocs = nil
	e.l1 = map[l1Key]*l1Entry{}
	e.lastL1 = nil
	e.gen++
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
