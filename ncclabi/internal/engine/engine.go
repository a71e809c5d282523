// Package engine binds the NCCL layer (ncclabi/internal/abi) to the Theseus
// runtime: abi.Engine over runtime/comm communicators on a runtime/device
// backend, the host backend (runtime/host) or the CUDA backend (cuda).
//
// Streams: the cudaStream_t a client passes is wrapped once per distinct
// value (cuda: Backend.WrapStream, so the launch is ordered with the
// client's work on that stream; host: one backend stream per value,
// including NULL), and calls return once the launch is enqueued, as in NCCL.
//
// The unique id carries, besides the runtime's bootstrap root (bytes 0..43),
// an optional second root (bytes 64..107) that the NCCL layer uses once per
// communicator to agree on the fallback NCCL's shadow id (AllGather):
// runtime/comm does not expose its bootstrap, so the layer has its own.
// ncclGetUniqueId adds it only in a process that has a fallback NCCL.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/theseus-ccl/theseus/cuda"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/comm"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

const (
	idBytes   = 44 // bytes of a bootstrap.UniqueID that carry data
	sideStart = 64 // where the side root's id starts in an ncclUniqueId
)

// Engine is abi.Engine over one backend of this process.
type Engine struct {
	name string
	be   device.Backend

	mu      sync.Mutex
	streams map[streamKey]device.Stream
	family  uint64
	wraps   uint64                     // communicators made, for their CUDA stream wrappers
	ranks   map[bootstrap.UniqueID]int // ranks initialised in this process, per communicator
}

// streamKey names a backend stream: the client's cudaStream_t value and a
// key — on the host backend the communicator family (a communicator made by
// ncclCommInitRank* and those split from it), the host backend's stand-in
// for a device, so that ranks of one process (grouped init, InitAll) never
// share an in-order stream and wait on each other; on CUDA the communicator
// itself (see Engine.stream).
type streamKey struct {
	family uint64
	value  uintptr
}

// Open starts the named backend ("host" or "cuda"). The CUDA backend binds
// the calling thread's current device (device 0 if none): call it on the
// client's thread.
func Open(name string) (*Engine, error) {
	var be device.Backend
	var err error
	switch name {
	case host.Name:
		be = host.Backend()
	case "cuda":
		be, err = cuda.Open()
		on, terr := env.TimeLaunches.Bool()
		if terr != nil {
			log.Warnf(log.Init, "THESEUS_TIME_LAUNCHES: %v; launches are not timed", terr)
		}
		if on && err == nil {
			cuda.TimeLaunches(true)
		}
	default:
		err = fmt.Errorf("unknown backend %q (host or cuda)", name)
	}
	if err != nil {
		return nil, err
	}
	return &Engine{name: name, be: be, streams: map[streamKey]device.Stream{}, ranks: map[bootstrap.UniqueID]int{}}, nil
}

// Backend implements abi.Engine.
func (e *Engine) Backend() string { return e.name }

// NewUniqueID implements abi.Engine: the runtime's id, plus a second root
// for the layer's own agreement when side is set.
func (e *Engine) NewUniqueID(side bool) (abi.UniqueID, error) {
	var out abi.UniqueID
	id, err := bootstrap.NewUniqueID(bootstrap.Options{})
	if err != nil {
		return out, err
	}
	copy(out[:idBytes], id[:idBytes])
	if side {
		s, err := bootstrap.NewUniqueID(bootstrap.Options{})
		if err != nil {
			return out, err
		}
		copy(out[sideStart:sideStart+idBytes], s[:idBytes])
	}
	return out, nil
}

func split(id abi.UniqueID) (main bootstrap.UniqueID, side bootstrap.UniqueID, hasSide bool) {
	copy(main[:idBytes], id[:idBytes])
	copy(side[:idBytes], id[sideStart:sideStart+idBytes])
	_, err := side.Addr()
	return main, side, err == nil
}

// CurrentDevice implements abi.Engine: the calling thread's CUDA device
// (-1 with no current context); 0 on the host backend.
func (e *Engine) CurrentDevice() (int, error) {
	if e.name != "cuda" {
		return 0, nil
	}
	return driver.CurrentDevice()
}

// MemAlloc implements abi.Engine.
func (e *Engine) MemAlloc(n uint64) (uintptr, error) {
	if n > 1<<62 {
		return 0, &comm.Error{Code: comm.InvalidArgument, Op: "MemAlloc", Msg: fmt.Sprintf("%d bytes", n)}
	}
	p, err := e.be.Alloc(int64(n))
	if err != nil {
		return 0, &comm.Error{Code: comm.SystemError, Op: "MemAlloc", Msg: fmt.Sprintf("%d bytes", n), Err: err}
	}
	return uintptr(p), nil
}

// MemFree implements abi.Engine.
func (e *Engine) MemFree(p uintptr) error {
	if err := e.be.Free(device.Ptr(p)); err != nil {
		return &comm.Error{Code: comm.InvalidArgument, Op: "MemFree", Msg: fmt.Sprintf("%#x", p), Err: err}
	}
	return nil
}

// OnDevice implements abi.Engine.
func (e *Engine) OnDevice(dev int, f func()) {
	if e.name != "cuda" {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if d, err := driver.OpenDevice(dev); err == nil {
			d.SetCurrent()
		}
		f()
	}()
	<-done
}

// Classify implements abi.Engine: runtime errors carry their ncclResult_t.
// A unique id that is not one (bootstrap.ErrBadID) or that the root refuses
// as made by another ncclGetUniqueId is InvalidArgument, other refusals
// by the root (nranks disagreeing, a rank joining twice) InvalidUsage:
// the bootstrap reports refusals as plain errors, which runtime/comm
// passes on as InternalError.
func (e *Engine) Classify(err error) abi.Result {
	if errors.Is(err, abi.ErrUnsupported) {
		return abi.InvalidUsage
	}
	if errors.Is(err, bootstrap.ErrBadID) || strings.Contains(err.Error(), "mismatched unique id") {
		return abi.InvalidArgument
	}
	if strings.Contains(err.Error(), "root refused") {
		return abi.InvalidUsage
	}
	if errors.Is(err, context.Canceled) {
		return abi.InvalidUsage
	}
	return abi.Result(comm.CodeOf(err))
}

// stream returns the backend stream for a client's cudaStream_t value, as
// communicator c uses it. On CUDA each communicator has its own wrapper of
// the client's stream (the kernels still run in the stream's order): a
// wrapper holds the sticky failure record of the launches made through it,
// and one communicator's failure or abort must not fail another's calls on
// the same stream. On the host backend the key is the family (see
// streamKey).
func (e *Engine) stream(c *Comm, s uintptr) (device.Stream, error) {
	// The usual case: the same cudaStream_t as the communicator's last call
	// (no lock, no map lookup).
	if r := c.lastSt.Load(); r != nil && r.value == s {
		return r.st, nil
	}
	st, err := e.streamSlow(c, s)
	if err == nil {
		c.lastSt.Store(&streamRef{s, st})
	}
	return st, err
}

func (e *Engine) streamSlow(c *Comm, s uintptr) (device.Stream, error) {
	key := c.family
	if e.name == "cuda" {
		key = c.wrap
	}
	k := streamKey{key, s}
	e.mu.Lock()
	defer e.mu.Unlock()
	if st, ok := e.streams[k]; ok {
		return st, nil
	}
	var st device.Stream
	var err error
	if b, ok := e.be.(*cuda.Backend); ok {
		st, err = b.WrapStream(s)
	} else {
		st, err = e.be.NewStream()
	}
	if err != nil {
		return nil, &comm.Error{Code: comm.UnhandledCudaError, Op: "stream", Msg: fmt.Sprintf("stream %#x", s), Err: err}
	}
	e.streams[k] = st
	return st, nil
}

// Init implements abi.Engine.
func (e *Engine) Init(ctx context.Context, p abi.InitParams) (abi.EngineComm, error) {
	main, side, hasSide := split(p.ID)
	if b, ok := e.be.(*cuda.Backend); ok && b.Device() != p.Device {
		return nil, &comm.Error{Code: comm.InvalidUsage, Op: "init", Rank: p.Rank, Err: comm.ErrLayout,
			Msg: fmt.Sprintf("the current CUDA device is %d, but this process's CUDA backend runs on device %d (one device per process; set it before the first NCCL call)", p.Device, b.Device())}
	}
	c, err := comm.Init(ctx, main, p.Rank, p.NRanks, comm.Config{Backend: e.be, Device: p.Device})
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.family++
	f := e.family
	e.wraps++
	wr := e.wraps
	e.ranks[main]++
	several := e.ranks[main] > 1
	e.mu.Unlock()
	// Several ranks of one communicator in this process (grouped init,
	// ncclCommInitAll) share the backend's device context.
	if sh, ok := e.be.(device.ContextSharer); ok && several {
		sh.ShareContext()
	}
	return &Comm{e: e, c: c, family: f, wrap: wr, side: side, hasSide: hasSide}, nil
}

// Comm is abi.EngineComm over a runtime communicator.
type Comm struct {
	e       *Engine
	c       *comm.Comm
	family  uint64
	wrap    uint64 // key of this communicator's CUDA stream wrappers
	side    bootstrap.UniqueID
	hasSide bool
	used    bool
	// lastSt is the backend stream of the last cudaStream_t value this
	// communicator used (a cache of Engine.streams).
	lastSt atomic.Pointer[streamRef]
	// rec is the communicator's replay record (replay.go), made at the
	// first ArmReplay.
	rec atomic.Pointer[replay.Record]
	// streamMisses counts the calls ArmReplay refused because their stream
	// was not the last one the engine served (ReplayMisses).
	streamMisses atomic.Int64
	// p2pOps is RunP2P's list of the runtime's ops, reused by the next call
	// while p2pBusy is not taken (a concurrent call makes its own).
	p2pOps  []comm.P2POp
	p2pBusy atomic.Bool
}

type streamRef struct {
	value uintptr
	st    device.Stream
}

func (c *Comm) Rank() int   { return c.c.Rank() }
func (c *Comm) NRanks() int { return c.c.NRanks() }
func (c *Comm) Device() int { return c.c.Device() }

// Run implements abi.EngineComm: one collective on the client's stream.
func (c *Comm) Run(op abi.Op) (abi.Served, error) {
	coll, ok := op.Coll.IR()
	if !ok {
		return abi.Served{}, fmt.Errorf("%w (%s)", abi.ErrNoSchedule, op.Coll)
	}
	st, err := c.e.stream(c, op.Stream)
	if err != nil {
		return abi.Served{}, err
	}
	call := callOf(&op, coll, st)
	if err := c.c.Collective(context.Background(), &call); err != nil {
		if errors.Is(err, comm.ErrNoSchedule) {
			var ce *comm.Error
			if errors.As(err, &ce) && ce.Msg != "" {
				// "selection context DIR is missing (...)": say where the
				// schedules were looked for.
				return abi.Served{}, fmt.Errorf("%w: %s", abi.ErrNoSchedule, ce.Msg)
			}
			return abi.Served{}, fmt.Errorf("%w: %v", abi.ErrNoSchedule, err)
		}
		return abi.Served{}, err
	}
	if info := c.c.LastCall(); !info.Skipped {
		return abi.Served{Schedule: info.Schedule, Name: info.Name, Launch: info.Launch}, nil
	}
	return abi.Served{Text: "Theseus (count 0: nothing to run)"}, nil
}

// RunP2P implements abi.P2PEngine: a group's ncclSend/ncclRecv calls
// (their streams joined: comm.P2PCall.Join), or one ncclAlltoAllv, on the
// runtime's point-to-point engine. A backend without it (none today)
// answers ErrNoSchedule.
func (c *Comm) RunP2P(ops []abi.Op) (abi.Served, error) {
	if len(ops) == 0 {
		return abi.Served{}, nil
	}
	var err error
	if o := &ops[0]; o.Coll == abi.CollAlltoAllv {
		st, serr := c.e.stream(c, o.Stream)
		if serr != nil {
			return abi.Served{}, serr
		}
		counts := make([]int64, len(o.Counts))
		for i, v := range o.Counts {
			counts[i] = -1 // a size_t over 2^63 fails validation as negative
			if v <= math.MaxInt64 {
				counts[i] = int64(v)
			}
		}
		err = c.c.AlltoAllv(context.Background(), &comm.AlltoAllvCall{Send: device.Ptr(o.Send), Recv: device.Ptr(o.Recv), Counts: counts,
			GPU: device.Ptr(o.CountsGPU), DataType: o.DataType.IR(), Stream: st})
	} else {
		var call comm.P2PCall
		if c.p2pBusy.CompareAndSwap(false, true) {
			if cap(c.p2pOps) < len(ops) {
				c.p2pOps = make([]comm.P2POp, len(ops))
			}
			call.Ops = c.p2pOps[:len(ops)]
			defer c.p2pBusy.Store(false)
		} else {
			call.Ops = make([]comm.P2POp, len(ops))
		}
		for i := range ops {
			o := &ops[i]
			st, serr := c.e.stream(c, o.Stream)
			if serr != nil {
				return abi.Served{}, serr
			}
			switch {
			case call.Stream == nil:
				call.Stream = st
			case st != call.Stream && !slices.Contains(call.Join, st):
				call.Join = append(call.Join, st)
			}
			buf := o.Send
			if o.Coll == abi.CollRecv {
				buf = o.Recv
			}
			call.Ops[i] = comm.P2POp{Recv: o.Coll == abi.CollRecv, Peer: o.Root, Buf: device.Ptr(buf), Count: int64(min(o.Count, math.MaxInt64)), DataType: o.DataType.IR()}
		}
		err = c.c.P2P(context.Background(), &call)
	}
	if errors.Is(err, executor.ErrP2PUnsupported) {
		return abi.Served{}, fmt.Errorf("%w: %v", abi.ErrNoSchedule, err)
	}
	if err != nil {
		return abi.Served{}, err
	}
	return abi.Served{Text: c.c.LastCall().Name}, nil
}

// callOf is the runtime's call for op (coll is op.Coll's) on stream st.
func callOf(op *abi.Op, coll ir.Collective, st device.Stream) comm.Call {
	call := comm.Call{Coll: coll, Send: device.Ptr(op.Send), Recv: device.Ptr(op.Recv), Count: int64(op.Count),
		DataType: op.DataType.IR(), Root: max(op.Root, 0), Stream: st}
	if op.Coll.Reduces() {
		call.RedOp = op.RedOp.IR()
	}
	return call
}

// Split implements abi.EngineComm.
func (c *Comm) Split(ctx context.Context, color, key int, cfg abi.Config) (abi.EngineComm, error) {
	n, err := c.c.Split(ctx, color, key)
	if err != nil || n == nil {
		return nil, err
	}
	c.e.mu.Lock()
	c.e.wraps++
	wr := c.e.wraps
	c.e.mu.Unlock()
	return &Comm{e: c.e, c: n, family: c.family, wrap: wr}, nil
}

// Shrink implements abi.EngineComm with comm.Comm.Shrink. The new
// communicator is a family of its own: on the host backend it gets streams
// of its own, since the parent's may hold the sticky failure of the
// launches a lost peer or NCCL_SHRINK_ABORT stopped.
func (c *Comm) Shrink(ctx context.Context, exclude []int, abort bool, cfg abi.Config) (abi.EngineComm, error) {
	n, err := c.c.Shrink(ctx, exclude, abort)
	if err != nil {
		return nil, err
	}
	c.e.mu.Lock()
	c.e.family++
	f := c.e.family
	c.e.wraps++
	wr := c.e.wraps
	c.e.mu.Unlock()
	return &Comm{e: c.e, c: n, family: f, wrap: wr}, nil
}

// Revoke implements abi.EngineComm (comm.Comm.Revoke).
func (c *Comm) Revoke() { c.c.Revoke() }

// Register implements abi.EngineComm (comm.Comm.Register).
func (c *Comm) Register(buf uintptr, size uint64) (uint64, error) {
	return c.c.Register(device.Ptr(buf), int64(size))
}

// Deregister implements abi.EngineComm (comm.Comm.Deregister).
func (c *Comm) Deregister(id uint64) error { return c.c.Deregister(id) }

// AllGather implements abi.EngineComm over the id's second root, once per
// communicator; without one it returns ErrUnsupported (no agreement
// needed: the id's creator had no fallback NCCL).
func (c *Comm) AllGather(ctx context.Context, data []byte) ([][]byte, error) {
	if !c.hasSide || c.used {
		return nil, abi.ErrUnsupported
	}
	c.used = true
	b, err := bootstrap.Init(ctx, c.side, c.Rank(), c.NRanks(), bootstrap.Options{Timeout: env.TimeoutOrDefault()})
	if err != nil {
		return nil, &comm.Error{Code: comm.RemoteError, Op: "shadow id exchange", Rank: c.Rank(), Err: err}
	}
	defer b.Close()
	all, err := b.AllGather(ctx, data)
	if err != nil {
		return nil, &comm.Error{Code: comm.RemoteError, Op: "shadow id exchange", Rank: c.Rank(), Err: err}
	}
	return all, nil
}

// StreamSync implements abi.EngineComm.
func (c *Comm) StreamSync(s uintptr) error {
	st, err := c.e.stream(c, s)
	if err != nil {
		return err
	}
	if err := st.Synchronize(); err != nil {
		return c.c.StreamError("synchronize", err)
	}
	return nil
}

func (c *Comm) Finalize(ctx context.Context) error { return c.c.Finalize() }

// Destroy implements abi.EngineComm; on CUDA it also closes the
// communicator's stream wrappers (not the client's streams).
func (c *Comm) Destroy() error {
	err := c.c.Destroy()
	c.lastSt.Store(nil)
	if c.e.name == "cuda" {
		var ws []device.Stream
		c.e.mu.Lock()
		for k, st := range c.e.streams {
			if k.family == c.wrap {
				ws = append(ws, st)
				delete(c.e.streams, k)
			}
		}
		c.e.mu.Unlock()
		for _, st := range ws {
			st.Close()
		}
	}
	return err
}
func (c *Comm) Abort()            { c.c.Abort() }
func (c *Comm) AsyncError() error { return c.c.AsyncError() }
