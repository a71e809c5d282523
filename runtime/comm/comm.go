// Package comm is the communicator: one rank of a group of ranks joined by
// the bootstrap (runtime/bootstrap), with its node layout, its selector
// (runtime/selector, agreeing over the bootstrap network, epochs pipelined), its
// executor (runtime/executor) on a device backend, and the per-call path of
// every collective: validate, select, execute (docs/design/runtime.md,
// "One call"; docs/runtime.md).
//
// A Comm follows NCCL's communicator semantics: it is created collectively
// (Init, Split), its collectives must be called in the same order on every
// rank, a Comm is not safe for concurrent use by several goroutines (except
// AsyncError and Abort), and after a failure that leaves the ranks out of
// step it reports an asynchronous error (AsyncError, ncclCommGetAsyncError)
// until it is aborted or destroyed. Every error is an *Error whose Code has
// NCCL's ncclResult_t value.
package comm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/ctxdir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/replay"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// Config configures a communicator. Zero fields take the environment's
// values (runtime/env, docs/env.md).
type Config struct {
	// Backend runs the launches (required).
	Backend device.Backend
	// Device is the device ordinal this process uses (0 for the host
	// backend). Every communicator of a process must use the same one.
	Device int
	// ContextDir is the selection context (default:
	// ctxdir.Default(): THESEUS_SELECTION_CONTEXT, else
	// $HOME/.theseus/contexts/default if it exists, else the context
	// installed beside the library, else the embedded default).
	ContextDir string
	// HostID groups ranks into nodes (default DefaultHostID()).
	HostID string
	// Timeout bounds every wait on a peer (default THESEUS_TIMEOUT).
	Timeout time.Duration
	// CheckPeriod is THESEUS_CONTEXT_CHECK_PERIOD; it must be the same on
	// every rank.
	CheckPeriod int
	// InitialScratch is THESEUS_INITIAL_SCRATCH_SIZE in bytes.
	InitialScratch int64
	// Executor is the executor mode, executor.ModeLaunch or
	// ModePersistent ("": THESEUS_EXECUTOR).
	Executor string
	// Alternate is THESEUS_ALTERNATE_SCRATCH_BUFFER (nil: the environment).
	Alternate *bool
	// PacketType is the LL packet format (nil: THESEUS_LL_PROTOCOL).
	PacketType *ir.PacketType
	// SliceBytes is THESEUS_SLICE_BYTES.
	SliceBytes int64
	// AllowSharedDevice is THESEUS_ALLOW_SHARED_DEVICE (nil: the
	// environment).
	AllowSharedDevice *bool
	// ProxyLanes is THESEUS_PROXY_LANES (0: the environment, whose
	// default 0 is executor.AutoLanes of the ranks per node): parallel
	// connections to each peer on another node, 1 to 16. In a job across
	// nodes every rank must use the same (CheckLayout).
	ProxyLanes int
	// LLFence is THESEUS_LL_FENCE (nil: the environment): fence every LL
	// launch, self-fenced schedules' too. In a job across nodes every rank
	// must use the same (CheckLayout).
	LLFence *bool
	// Loader loads schedule files (default: schedfile, then compile
	// sources to bundles with compiler/passes).
	Loader selector.ScheduleLoader
	// Clock is the selector's clock for valid_after (default time.Now).
	Clock func() time.Time
	// Trace is THESEUS_TRACE: a file to write a Chrome/Perfetto trace of
	// the communicator's calls and launches to (docs/trace.md); "" (and
	// THESEUS_TRACE unset): no trace. Communicators of one process that
	// name the same file share it.
	Trace string
	// TraceOps is THESEUS_TRACE_OPS: the op records a rank's launches may
	// write between two waits (0: the environment's, 65536).
	TraceOps int
	// SelectorLogger receives the selector's messages: the selection
	// context's diagnostics (file:line:col) and schedules that fail to
	// load (default: runtime/log, subsystem SELECTOR).
	SelectorLogger selector.Logger
	// AlltoAllvCheck is THESEUS_ALLTOALLV_CHECK (nil: the environment):
	// every ncclAlltoAllv launch compares its GPU matrix with the CPU one.
	AlltoAllvCheck *bool

	alltoallvCheck bool // *AlltoAllvCheck, filled
}

// CheckConfig reports what Init would refuse in cfg and the environment
// it reads (a malformed or out-of-range variable: Init's
// InvalidArgument), without starting anything: a launcher checks it
// before the unique-id rendezvous, so that every rank names the variable
// at once instead of ranks other than 0 waiting for an id that rank 0,
// failing, never serves.
func CheckConfig(cfg Config) error { return cfg.fill() }

func (c *Config) fill() error {
	if c.Backend == nil {
		return errors.New("no backend")
	}
	if c.HostID == "" {
		c.HostID = DefaultHostID()
	}
	if c.Timeout == 0 {
		ms, err := env.Timeout.Int()
		if err != nil {
			return err
		}
		if ms <= 0 {
			return fmt.Errorf("THESEUS_TIMEOUT=%d: want a positive number of milliseconds", ms)
		}
		c.Timeout = env.TimeoutDuration(ms)
	}
	if c.CheckPeriod == 0 {
		k, err := env.CheckPeriod.Int()
		if err != nil {
			return err
		}
		c.CheckPeriod = int(k)
	}
	if c.CheckPeriod < 1 {
		return fmt.Errorf("context check period %d: want >= 1", c.CheckPeriod)
	}
	if c.InitialScratch == 0 {
		v, err := env.InitScratch.Size()
		if err != nil {
			return err
		}
		c.InitialScratch = v
	}
	if c.InitialScratch < 0 {
		return fmt.Errorf("initial scratch %d bytes", c.InitialScratch)
	}
	if c.Alternate == nil {
		v, err := env.AltScratch.Bool()
		if err != nil {
			return err
		}
		c.Alternate = &v
	}
	if c.PacketType == nil {
		v, err := env.LLProtocol.Enum()
		if err != nil {
			return err
		}
		pt := ir.LL16
		if v == "LL8" {
			pt = ir.LL8
		}
		c.PacketType = &pt
	}
	if err := executor.CheckTransportEnv(); err != nil {
		return err
	}
	lanes, err := executor.ProxyLanes(c.ProxyLanes)
	if err != nil {
		return err
	}
	c.ProxyLanes = lanes
	if _, err := env.P2PHelp.Bool(); err != nil { // (read by the CUDA backend at prepare)
		return err
	}
	if c.SliceBytes == 0 {
		v, err := executor.SliceBytesFromEnv()
		if err != nil {
			return err
		}
		c.SliceBytes = v
	}
	if c.LLFence == nil {
		v, err := env.LLFence.Bool()
		if err != nil {
			return err
		}
		c.LLFence = &v
	}
	if c.AllowSharedDevice == nil {
		v, err := env.SharedDevice.Bool()
		if err != nil {
			return err
		}
		c.AllowSharedDevice = &v
	}
	if c.AlltoAllvCheck == nil {
		v, err := env.A2AVCheck.Bool()
		if err != nil {
			return err
		}
		c.AlltoAllvCheck = &v
	}
	c.alltoallvCheck = *c.AlltoAllvCheck
	if c.ContextDir == "" {
		ch, err := ctxdir.Default()
		if err != nil {
			return err
		}
		c.ContextDir = ch.Dir
	}
	if c.Trace == "" {
		c.Trace = env.Trace.String()
	}
	if c.TraceOps == 0 {
		n, err := env.TraceOps.Int()
		if err != nil {
			return err
		}
		c.TraceOps = int(n)
	}
	if c.TraceOps < 1 {
		return fmt.Errorf("trace op records %d: want >= 1", c.TraceOps)
	}
	if c.Loader == nil {
		c.Loader = CompilingLoader{}
	}
	return nil
}

// CompilingLoader is the default schedule loader: schedfile's (bundles
// decoded, sources parsed and proven by compiler/verify), then sources
// compiled to a bundle (legalise, verify, lower) so that the executor always
// runs a *bundle.Bundle.
type CompilingLoader struct {
	schedfile.Loader
}

// Load implements selector.ScheduleLoader.
func (l CompilingLoader) Load(path string) (*selector.ScheduleInfo, error) {
	info, err := l.Loader.Load(path)
	return compiled(path, info, err)
}

// LoadFor implements selector.RankLoader (generated entries, and one
// rank's section of a bundle).
//
// On several nodes (req.NLocalRanks < req.NRanks) a transfer-level source
// written for any node shape (MSCCL XML) is compiled for the
// communicator's: the legaliser joins ranks of different nodes with port
// channels (docs/transport.md), so an algorithm written for several nodes
// runs as written.
func (l CompilingLoader) LoadFor(req selector.LoadRequest) (*selector.ScheduleInfo, error) {
	info, err := l.Loader.LoadFor(req)
	if err == nil && info.Program != nil && req.NLocalRanks > 0 && req.NLocalRanks < req.NRanks &&
		info.Program.NLocalRanks == 0 && info.Program.NRanks == req.NRanks && info.Program.Level() == ir.LevelTransfer {
		shaped := *info
		p := *info.Program
		p.NLocalRanks = req.NLocalRanks
		shaped.Program = &p
		info = &shaped
	}
	return compiled(req.Path, info, err)
}

// compiled compiles a loaded source schedule to a bundle.
func compiled(path string, info *selector.ScheduleInfo, err error) (*selector.ScheduleInfo, error) {
	if err != nil {
		return nil, err
	}
	if _, ok := info.Artifact.(*bundle.Bundle); ok {
		return info, nil
	}
	if info.Program == nil {
		return nil, fmt.Errorf("%s: no program to compile", path)
	}
	b, ds, err := passes.Compile(info.Program, passes.Options{Skip: []string{"verify-input"}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if b == nil {
		return nil, &schedfile.Error{Path: path, Diags: ds}
	}
	info.Artifact = b
	return info, nil
}

type commState int32

const (
	live commState = iota
	finalized
	destroyed
	aborted
	// revoked: Revoke (ncclCommRevoke) or Shrink with ShrinkAbort stopped
	// the communicator's work; it stays a parent for Split and Shrink
	// and is released by Finalize, Destroy or Abort.
	revoked
)

// Comm is one rank of a communicator.
type Comm struct {
	// What every collective call reads or writes comes first, together:
	// a rank's thread comes back from a launch that waited for the GPU
	// with cold caches, and every cache line it touches costs.
	callMu sync.Mutex // held by a call in progress; Abort waits for it
	state  atomic.Int32
	// armed: a replay record (the C launcher of plans) is armed and its
	// calls not yet counted (replay.go), read here by every call on a line
	// it reads anyway.
	armed bool
	// traced: the calls are traced (tr, trace.go), read by every call on
	// the same line as armed.
	traced   bool
	asyncErr atomic.Pointer[Error]
	// cur is the kept plan of the last call (plans), -1 when there is none;
	// curCall, curPlan and curGen are a copy of its call, plan and selector
	// generation, so that a repeat of the last call reads only these lines
	// (setCur).
	cur     int
	curCall validated
	curPlan *executor.Plan
	curGen  uint64
	calls   uint64
	sel     *selector.Selector
	exec    *executor.Executor
	last    CallInfo
	// lastUserSt is the caller's stream of the last call that gave one
	// (what userSt points at), read by a repeated call.
	lastUserSt device.Stream
	// A repeated call's fields end here, within three cache lines: a Comm
	// is over 512 bytes and holds pointers, so Go's allocator puts an
	// 8-byte header before it, at a 64-byte boundary, and they must end by
	// byte 184 (TestCommLayout).

	lastSched *executor.Schedule // last's

	// valid is the last call that passed Validate, and its answer.
	valid struct {
		call    validated
		inPlace bool
		ok      bool
	}
	rank, n int
	perNode int           // layout.PerNode
	packet  ir.PacketType // *cfg.PacketType
	scheds  []*executor.Schedule
	userSt  atomic.Pointer[device.Stream] // the caller's stream of the last call, if any
	ereq    executor.Request
	stream  device.Stream

	cfg    Config
	id     bootstrap.UniqueID
	layout Layout
	infos  []RankInfo

	boot  *bootstrap.Bootstrap
	agree *epochAgreement

	lostMu sync.Mutex
	lost   []int

	watchCancel context.CancelFunc
	watchWG     sync.WaitGroup

	// ctxState describes the selection context for ErrNoSchedule
	// (contextState), as of selector epoch ctxStateEpoch.
	ctxState      string
	ctxStateEpoch uint64

	// rp is the replay record ArmReplay arms (armed while armed and its
	// calls not yet counted) and its entries (callMu); replayPoison the
	// last record armed, which an asynchronous error or Abort poisons from
	// any goroutine; replayed counts the calls made from records
	// (replay.go).
	rp           replayState
	replayPoison atomic.Pointer[replay.Record]
	replayed     atomic.Uint64
	// refusals counts ArmReplay's refusals by reason (callMu).
	refusals [numRefusals]uint64

	// plans are the kept plans (plans.go), nextPlan the slot the next one
	// replaces when all are in use.
	plans    [planSlots]planEntry
	nextPlan int

	// p2p is the point-to-point state (p2p.go).
	p2p p2pState
	tr  *callTrace // the trace (trace.go), nil when the calls are not traced
	// shrinks counts this communicator's Shrink calls: the tag of each
	// shrink's messages (every survivor makes the same calls in the same
	// order).
	shrinks atomic.Uint64
}

// CallInfo describes the last collective call of a communicator: the
// schedule it ran (for theseus-bench's per-row column) and its launch.
type CallInfo struct {
	// Schedule is the selected schedule's id in the selection context (its
	// entry position), or -1 when nothing ran (count 0).
	Schedule int
	// Name is the schedule's file name (as the manifest names it).
	Name string
	// Launch is the communicator's launch counter after the call.
	Launch uint64
	// Skipped is set when the call had nothing to do (count 0).
	Skipped bool
}

// Stats are the communicator's counters.
type Stats struct {
	Calls    uint64
	Executor executor.Stats
	Selector selector.Stats
}

const watchTag = 1<<62 | 0x5741 // "WA": watcher hellos

// Init creates rank rank of the nranks-rank communicator of id (every rank
// calls it, as ncclCommInitRank). It joins the bootstrap, exchanges every
// rank's RankInfo, applies the job-layout checks (CheckLayout), binds the
// process's device, and creates the selector and executor (which
// materialises nothing until the first collective).
//
// Errors (*Error): InvalidArgument for a rank outside 0..nranks-1 or a bad
// config; InvalidUsage for a layout violation (ErrLayout) or a second
// device in one process; RemoteError when peers do not join within the
// timeout (naming them); SystemError for local failures.
func Init(ctx context.Context, id bootstrap.UniqueID, rank, nranks int, cfg Config) (*Comm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: rank, Msg: fmt.Sprintf("rank %d outside 0..%d", rank, nranks-1)}
	}
	if err := cfg.fill(); err != nil {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: rank, Msg: "configuration", Err: err}
	}
	if err := bindDevice(cfg.Backend.Name(), cfg.Device); err != nil {
		return nil, &Error{Code: InvalidUsage, Op: "init", Rank: rank, Msg: "device", Err: fmt.Errorf("%w: %v", ErrLayout, err)}
	}
	c := &Comm{cfg: cfg, rank: rank, n: nranks, id: id, packet: *cfg.PacketType}
	ok := false
	defer func() {
		if !ok {
			c.release(true)
			unbindDevice()
		}
	}()
	var err error
	c.boot, err = bootstrap.Init(ctx, id, rank, nranks, bootstrap.Options{Timeout: cfg.Timeout})
	if err != nil {
		return nil, c.wrap("init", err)
	}
	me := RankInfo{HostID: cfg.HostID, Machine: MachineID(), PID: os.Getpid(), Backend: cfg.Backend.Name(), Device: cfg.Device,
		Scratch: cfg.InitialScratch, Alternate: *cfg.Alternate, CheckPeriod: cfg.CheckPeriod, SliceBytes: cfg.SliceBytes, PacketType: cfg.PacketType.String(), ProxyLanes: cfg.ProxyLanes, LLFence: *cfg.LLFence}
	msg, _ := json.Marshal(me)
	all, err := c.boot.AllGather(ctx, msg)
	if err != nil {
		return nil, c.wrap("init", err)
	}
	c.infos = make([]RankInfo, nranks)
	for r, m := range all {
		if err := json.Unmarshal(m, &c.infos[r]); err != nil {
			return nil, &Error{Code: InternalError, Op: "init", Rank: rank, Peers: []int{r}, Msg: "malformed rank info", Err: err}
		}
	}
	if c.layout, err = CheckLayout(c.infos, hcaCount(), *cfg.AllowSharedDevice); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Rank = rank
		}
		return nil, err
	}
	c.perNode = c.layout.PerNode
	if c.layout.Nodes > 1 {
		// Ranks of different nodes talk through the proxy over UCX: without
		// libucp the communicator cannot serve the job (docs/transport.md).
		if err := ucx.Load(); err != nil {
			return nil, &Error{Code: SystemError, Op: "init", Rank: rank, Msg: fmt.Sprintf("%d nodes need the cross-node transport", c.layout.Nodes), Err: err}
		}
		// The network variables UCX is configured from (MSCCLPP_GID_INDEX,
		// MSCCLPP_SOCKET_FAMILY, MSCCLPP_SOCKET_IFNAME, ...): a bad one now,
		// not at the first call across nodes.
		if _, err := ucx.Settings(ucx.Options{LocalRank: c.layout.LocalRank[rank], LocalRanks: c.layout.PerNode}); err != nil {
			return nil, &Error{Code: InvalidArgument, Op: "init", Rank: rank, Msg: "cross-node transport settings", Err: err}
		}
	}
	c.agree = newEpochAgreement(c.boot, rank, nranks, cfg.Timeout)
	c.sel, err = selector.New(selector.Options{Dir: cfg.ContextDir, CheckPeriod: cfg.CheckPeriod, Agreement: c.agree,
		Timeout: cfg.Timeout, Loader: cfg.Loader, Clock: cfg.Clock, Rank: rank, Logger: cfg.SelectorLogger})
	if err != nil {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: rank, Msg: "selector", Err: err}
	}
	c.exec, err = executor.New(executor.Config{Rank: rank, NRanks: nranks, Backend: cfg.Backend, Net: c.boot,
		InitialScratch: cfg.InitialScratch, Alternate: *cfg.Alternate, SliceBytes: cfg.SliceBytes, Timeout: cfg.Timeout,
		Executor: cfg.Executor, Node: c.layout.Node(), LocalRank: c.layout.LocalRank[rank], LocalRanks: c.layout.PerNode, HostID: cfg.HostID,
		DeviceRanks: c.layout.DeviceRanks[rank], ProxyLanes: cfg.ProxyLanes, LLFence: *cfg.LLFence})
	if err != nil {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: rank, Msg: "executor", Err: err}
	}
	if c.stream, err = cfg.Backend.NewStream(); err != nil {
		return nil, &Error{Code: SystemError, Op: "init", Rank: rank, Msg: "stream", Err: err}
	}
	if err := c.startTrace(); err != nil {
		return nil, &Error{Code: SystemError, Op: "init", Rank: rank, Msg: "trace", Err: err}
	}
	c.startWatchers()
	c.last.Schedule, c.cur = -1, -1
	// The first epoch now, while every rank is here: point-to-point calls,
	// which subsets of the ranks issue and which never run an epoch, read
	// its agreed snapshot even before any collective (p2p.go).
	if err := c.sel.Prime(ctx); err != nil {
		return nil, c.wrap("init", err)
	}
	ok = true
	if log.On(log.Info, log.Init) {
		log.Infof(log.Init, "comm rank %d/%d: %d node(s) x %d, local rank %d, backend %s, context %s",
			rank, nranks, c.layout.Nodes, c.layout.PerNode, c.layout.LocalRank[rank], cfg.Backend.Name(), cfg.ContextDir)
	}
	return c, nil
}

// startWatchers opens a connection from every rank to every other (a hello
// each way) and watches each peer: a peer whose connection breaks without a
// goodbye (a killed process, or Abort) is lost, and this rank aborts its
// launches and records an asynchronous error naming it. The first rank to
// see a loss tells the others (a notice on the same connections), so every
// rank names the rank that failed first, not a rank that aborted because
// of it.
//
// The selector's pipelined epoch agreement (epochAgreement) has its
// goroutine stop with the watchers too: rank 0's reducer, the others'
// receiver.
func (c *Comm) startWatchers() {
	ctx, cancel := context.WithCancel(context.Background())
	c.watchCancel = cancel
	c.agree.start(ctx, &c.watchWG)
	for p := range c.n {
		if p == c.rank {
			continue
		}
		c.boot.Send(p, watchTag, nil)
		c.watchWG.Add(1)
		go func() {
			defer c.watchWG.Done()
			for ctx.Err() == nil {
				m, err := c.boot.Recv(ctx, p, watchTag)
				var be *bootstrap.Error
				switch {
				case err == nil:
					if len(m) == 5 && m[0] == noticeMismatch {
						c.peerMismatch(p)
					}
					if len(m) == 4 {
						lost := int(binary.LittleEndian.Uint32(m))
						if lost >= 0 && lost < c.n && lost != c.rank {
							c.peerLost(lost, fmt.Errorf("reported by rank %d", p))
						}
					}
				case errors.As(err, &be) && be.Lost:
					c.peerLost(p, err)
					return
				case errors.As(err, &be):
					// A quiet peer: wait again.
				default:
					return // closed, cancelled
				}
			}
		}()
	}
}

func (c *Comm) peerLost(p int, cause error) {
	if commState(c.state.Load()) != live {
		return
	}
	c.lostMu.Lock()
	for _, q := range c.lost {
		if q == p {
			c.lostMu.Unlock()
			return
		}
	}
	first := len(c.lost) == 0
	c.lost = append(c.lost, p)
	c.lostMu.Unlock()
	if first {
		var notice [4]byte
		binary.LittleEndian.PutUint32(notice[:], uint32(p))
		for q := range c.n {
			if q != c.rank && q != p {
				c.boot.Send(q, watchTag, notice[:])
			}
		}
	}
	e := &Error{Code: RemoteError, Op: "comm", Rank: c.rank, Peers: []int{p}, Msg: "lost a peer", Err: fmt.Errorf("%w %d: %v", ErrLostRank, p, cause)}
	c.setAsync(e)
	c.exec.Abort(e)
	log.Warnf(log.Net, "rank %d: lost rank %d: %v", c.rank, p, cause)
}

// noticeMismatch starts a watcher notice that says the sender found that
// the ranks issued different collectives (ErrMismatch); the rank follows.
const noticeMismatch = 1

// mismatchMsg explains ErrMismatch to the rank that finds it.
const mismatchMsg = "the ranks issued different collectives (or different counts, datatypes, ops or roots, " +
	"or a rank skipped a call), so their schedules do not pair; every rank must issue the communicator's " +
	"collectives in the same order with the same arguments (NCCL)"

// mismatchErr is the cause of an ErrMismatch error: it prints the cause
// and matches both ErrMismatch and the cause (errors.Is).
type mismatchErr struct{ err error }

func (m mismatchErr) Error() string   { return m.err.Error() }
func (m mismatchErr) Unwrap() []error { return []error{ErrMismatch, m.err} }

// tellMismatch tells every peer that this rank found ErrMismatch, so that
// their launches, which wait for signals that will never come, stop at
// once with an error that says why.
func (c *Comm) tellMismatch() {
	var notice [5]byte
	notice[0] = noticeMismatch
	binary.LittleEndian.PutUint32(notice[1:], uint32(c.rank))
	for q := range c.n {
		if q != c.rank {
			c.boot.Send(q, watchTag, notice[:])
		}
	}
}

// peerMismatch records that peer p found ErrMismatch, and aborts this
// rank's launches.
func (c *Comm) peerMismatch(p int) {
	if commState(c.state.Load()) != live {
		return
	}
	e := &Error{Code: RemoteError, Op: "comm", Rank: c.rank, Peers: []int{p},
		Msg: fmt.Sprintf("rank %d found that the ranks issued different collectives (or different counts, datatypes, ops or roots, "+
			"or a rank skipped a call); every rank must issue the communicator's collectives in the same order with the same arguments (NCCL)", p),
		Err: ErrMismatch}
	c.setAsync(e)
	c.exec.Abort(e)
	log.Warnf(log.Net, "rank %d: %s", c.rank, e.Msg)
}

// stateErr is the error of a call on a communicator that is not live
// (ErrState), with NCCL 2.25's codes: a finalized communicator is still a
// communicator, and using it is InvalidUsage; a destroyed or aborted one is
// no longer a valid communicator, which NCCL's argument check reports as
// InvalidArgument (as for a NULL comm; the C ABI returns the same). ok is
// false when the communicator is live.
func (c *Comm) stateErr(op string) (e *Error, ok bool) {
	switch commState(c.state.Load()) {
	case live:
		return nil, false
	case finalized:
		return &Error{Code: InvalidUsage, Op: op, Rank: c.rank, Msg: "communicator is finalized", Err: ErrState}, true
	case destroyed:
		return &Error{Code: InvalidArgument, Op: op, Rank: c.rank, Msg: "communicator used after Destroy", Err: ErrState}, true
	case revoked:
		return &Error{Code: InvalidUsage, Op: op, Rank: c.rank, Msg: "communicator is revoked (ncclCommRevoke, or ncclCommShrink with NCCL_SHRINK_ABORT): only Split, Shrink, Finalize, Destroy and Abort remain", Err: ErrState}, true
	}
	return &Error{Code: InvalidArgument, Op: op, Rank: c.rank, Msg: "communicator used after Abort", Err: ErrState}, true
}

// setAsync records e as the asynchronous error unless there is one, and
// poisons the replay record, whose calls would not see it.
func (c *Comm) setAsync(e *Error) {
	c.asyncErr.CompareAndSwap(nil, e)
	c.poisonReplay()
}

// Lost returns the peers this rank has seen vanish.
func (c *Comm) Lost() []int {
	c.lostMu.Lock()
	defer c.lostMu.Unlock()
	return append([]int(nil), c.lost...)
}

// Rank, NRanks, LocalRank, NLocalRanks, Nodes and HostID describe the
// communicator (ncclCommUserRank, ncclCommCount).
func (c *Comm) Rank() int        { return c.rank }
func (c *Comm) NRanks() int      { return c.n }
func (c *Comm) LocalRank() int   { return c.layout.LocalRank[c.rank] }
func (c *Comm) NLocalRanks() int { return c.layout.PerNode }
func (c *Comm) Nodes() int       { return c.layout.Nodes }
func (c *Comm) HostID() string   { return c.cfg.HostID }

// Device is the device ordinal (ncclCommCuDevice).
func (c *Comm) Device() int { return c.cfg.Device }

// Backend is the communicator's backend.
func (c *Comm) Backend() device.Backend { return c.cfg.Backend }

// ContextDir is the selection context the communicator reads.
func (c *Comm) ContextDir() string { return c.cfg.ContextDir }

// Stream is the communicator's own stream (the one calls with a nil stream
// use).
func (c *Comm) Stream() device.Stream { return c.stream }

// LastCall describes the last collective call.
func (c *Comm) LastCall() CallInfo { return c.last }

// Resident is the communicator's persistent executor (THESEUS_EXECUTOR=
// persistent), nil before its first collective and in launch mode. Not
// concurrent with calls.
func (c *Comm) Resident() device.Resident { return c.exec.Resident() }

// Stats returns the communicator's counters, with the calls a replay
// record made (replay.go). Not concurrent with calls.
func (c *Comm) Stats() Stats {
	c.replaySync()
	return Stats{Calls: c.calls, Executor: c.exec.Stats(), Selector: c.sel.Stats()}
}

// Schedule returns the schedule entry id of the selection context, once it
// has been selected.
func (c *Comm) Schedule(id int) (selector.ScheduleRef, bool) { return c.sel.Schedule(id) }

// AsyncError returns the communicator's asynchronous error
// (ncclCommGetAsyncError): nil while healthy; after a launch failure, a
// lost peer or a failure that leaves the ranks out of step, that error
// (codes RemoteError, InternalError, ...), until the communicator is
// aborted or destroyed. It never blocks and is safe to call from any
// goroutine.
func (c *Comm) AsyncError() error {
	if e := c.asyncErr.Load(); e != nil {
		return e
	}
	if commState(c.state.Load()) == revoked {
		return nil // its launches failed because they were revoked
	}
	// A launch's failure (a timed-out wait, an abort) is recorded on the
	// stream it ran on: the communicator's own, or the caller's last.
	streams := [2]device.Stream{c.stream}
	if p := c.userSt.Load(); p != nil {
		streams[1] = *p
	}
	for _, s := range streams {
		if s == nil {
			continue
		}
		if err := s.Err(); err != nil && !errors.Is(err, device.ErrClosed) {
			e := c.wrapErr("async", err, false)
			c.setAsync(e)
			return c.asyncErr.Load()
		}
	}
	if err := c.exec.Err(); err != nil && commState(c.state.Load()) == live {
		e := c.wrapErr("async", err, false)
		c.setAsync(e)
		return c.asyncErr.Load()
	}
	return nil
}

// Finalize waits for every launch of the communicator (ncclCommFinalize);
// later collectives fail with InvalidUsage. Errors: the launches' failure;
// InvalidArgument (ErrState) after Destroy or Abort.
func (c *Comm) Finalize() error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	if !c.state.CompareAndSwap(int32(live), int32(finalized)) {
		switch commState(c.state.Load()) {
		case finalized:
			return nil
		case revoked:
			// Its launches were stopped: wait for them to end (they stop
			// at their next wait), reporting nothing.
			c.exec.Wait()
			c.stream.Synchronize()
			return nil
		}
		e, _ := c.stateErr("finalize")
		return e
	}
	err := c.exec.Wait()
	if serr := c.stream.Synchronize(); err == nil {
		err = serr
	}
	if err != nil {
		return c.wrap("finalize", err)
	}
	return nil
}

// Destroy finalizes (if needed) and releases everything
// (ncclCommDestroy). It says goodbye to the peers, so they do not see this
// rank as lost.
func (c *Comm) Destroy() error {
	var err error
	if st := commState(c.state.Load()); st == live || st == revoked {
		err = c.Finalize()
	}
	// Exactly one of Destroy and Abort releases the communicator, however
	// they interleave: each moves the state on with a compare-and-swap.
	for {
		st := commState(c.state.Load())
		if st == destroyed || st == aborted {
			return nil
		}
		if c.state.CompareAndSwap(int32(st), int32(destroyed)) {
			break
		}
	}
	c.poisonReplay()
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	c.release(false)
	unbindDevice()
	if err != nil && CodeOf(err) != RemoteError {
		return err
	}
	return nil
}

// Abort stops the communicator at once (ncclCommAbort): running launches
// stop waiting (the abort word), peers see this rank as lost, and every
// resource is released without waiting for peers. Safe to call from any
// goroutine, also while a collective is running.
func (c *Comm) Abort() error {
	for {
		st := commState(c.state.Load())
		if st == destroyed || st == aborted {
			return nil
		}
		if c.state.CompareAndSwap(int32(st), int32(aborted)) {
			break
		}
	}
	// No new launch from a replay record (replay.go); one in progress may
	// wait in cuLaunchKernel for room that only the abort below makes, so
	// it is waited for after that.
	c.poisonReplay()
	// Stop running launches and exchanges first, so that a call in
	// progress on another goroutine returns; then release.
	if c.exec != nil {
		c.exec.Abort(&Error{Code: InvalidUsage, Op: "abort", Rank: c.rank, Msg: "communicator aborted", Err: ErrState})
	}
	if c.boot != nil {
		c.boot.Abort()
	}
	if r := c.replayPoison.Load(); r != nil {
		r.Disarm()
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.release(true)
	unbindDevice()
	return nil
}

func (c *Comm) release(abort bool) {
	if c.watchCancel != nil {
		c.watchCancel()
	}
	if abort && c.exec != nil {
		c.exec.Abort(&Error{Code: InvalidUsage, Op: "abort", Rank: c.rank, Msg: "communicator aborted", Err: ErrState})
	}
	if c.boot != nil {
		if abort {
			c.boot.Abort()
		} else {
			c.boot.Close()
		}
	}
	c.watchWG.Wait()
	if c.stream != nil {
		c.stream.Close()
	}
	if c.exec != nil {
		c.exec.Close()
	}
	c.closeTrace()
	if c.sel != nil {
		c.sel.Close()
	}
}

// PublishValue appends a value line to exogenous attribute name's log in
// the selection context dir (docs/selection-context.md §6): the way a
// monitoring agent, theseus-bench's hot-swap demo or a test flips an
// attribute. The line is written with one append, so readers never see half
// of it. value must marshal to the attribute's JSON type.
func PublishValue(dir, name string, value any) error {
	if name == "" || filepath.Base(name) != name {
		return fmt.Errorf("attribute name %q", name)
	}
	line, err := json.Marshal(struct {
		Value any `json:"value"`
	}{value})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
