// Package theseus is Theseus's public Go API: communicators created from a
// unique id, and NCCL's collectives (AllReduce, AllGather, ReduceScatter,
// Broadcast, Reduce, AlltoAll, Gather, Scatter) with NCCL's arguments —
// counts in elements, datatype and reduction-op values as in NCCL 2.25.1
// (ncclDataType_t, ncclRedOp_t), errors with ncclResult_t codes. Each call
// is validated, then a schedule is selected from the selection context
// (consistently on every rank), then the executor materialises what is
// missing (delta migration when the selection changes) and launches it on a
// backend: "host" (the CPU reference, ranks as goroutines or as processes of
// one node) or "cuda" (registered by importing
// github.com/theseus-ccl/theseus/cuda).
//
// Creating communicators:
//
//	id, _ := theseus.GetUniqueID()                       // rank 0, then send id to the others
//	c, err := theseus.NewComm(ctx, id, rank, nranks, theseus.Config{Backend: "host"})
//
//	comms, err := theseus.NewLocalComms(ctx, 4, cfg)     // 4 ranks as goroutines of this process
//
//	li, _ := theseus.LaunchInfoFromEnv()                 // RANK/WORLD_SIZE + MASTER_ADDR/PORT, as torchrun or mpirun set them
//	c, err := theseus.Join(ctx, li, cfg)                 // one rank per OS process
//
// A call:
//
//	send, _ := c.MemAlloc(n * 4)
//	recv, _ := c.MemAlloc(n * 4)
//	err := c.AllReduce(send, recv, n, theseus.Float32, theseus.Sum, nil)   // nil stream: wait for it
//	info := c.LastCall()                                                   // the schedule it ran
//
// A Comm's calls must be made in the same order on every rank and are not
// safe for concurrent use, as in NCCL.
package theseus

import (
	"context"
	"fmt"
	"sync"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/comm"
	"github.com/theseus-ccl/theseus/runtime/ctxdir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// DataType is an element type with ncclDataType_t's values.
type DataType int32

// NCCL 2.25.1 datatypes (nccl.h).
const (
	Int8       DataType = 0
	Char       DataType = 0
	Uint8      DataType = 1
	Int32      DataType = 2
	Int        DataType = 2
	Uint32     DataType = 3
	Int64      DataType = 4
	Uint64     DataType = 5
	Float16    DataType = 6
	Half       DataType = 6
	Float32    DataType = 7
	Float      DataType = 7
	Float64    DataType = 8
	Double     DataType = 8
	Bfloat16   DataType = 9
	Float8e4m3 DataType = 10
	Float8e5m2 DataType = 11
	NumTypes   DataType = 12
)

// RedOp is a reduction with ncclRedOp_t's values. Ops made by NCCL's
// ncclRedOpCreatePreMulSum (>= NumOps) are not supported.
type RedOp int32

// NCCL 2.25.1 reduction ops.
const (
	Sum    RedOp = 0
	Prod   RedOp = 1
	Max    RedOp = 2
	Min    RedOp = 3
	Avg    RedOp = 4
	NumOps RedOp = 5
)

// The mapping tables between NCCL's values and the IR's (the IR's numbering
// is internal; a test pins both).
var (
	dataTypes = [NumTypes]ir.DataType{ir.Int8, ir.Uint8, ir.Int32, ir.Uint32, ir.Int64, ir.Uint64,
		ir.Float16, ir.Float32, ir.Float64, ir.Bfloat16, ir.Fp8E4M3, ir.Fp8E5M2}
	redOps = [NumOps]ir.RedOp{ir.Sum, ir.Prod, ir.Max, ir.Min, ir.Avg}
)

// IR returns the IR datatype of d; ok is false out of range.
func (d DataType) IR() (ir.DataType, bool) {
	if d < 0 || d >= NumTypes {
		return ir.NumDataTypes, false
	}
	return dataTypes[d], true
}

// Size is the element size in bytes (0 out of range).
func (d DataType) Size() int {
	t, ok := d.IR()
	if !ok {
		return 0
	}
	return t.Size()
}

func (d DataType) String() string {
	if t, ok := d.IR(); ok {
		return t.String()
	}
	return fmt.Sprintf("datatype(%d)", int32(d))
}

// IR returns the IR reduction of o; ok is false out of range.
func (o RedOp) IR() (ir.RedOp, bool) {
	if o < 0 || o >= NumOps {
		return ir.NumRedOps, false
	}
	return redOps[o], true
}

func (o RedOp) String() string {
	if r, ok := o.IR(); ok {
		return r.String()
	}
	return fmt.Sprintf("redop(%d)", int32(o))
}

// Ptr is an address of the backend's memory (device memory on CUDA; host
// memory on the host backend).
type Ptr = device.Ptr

// Stream is an in-order stream of the communicator's backend.
type Stream = device.Stream

// Error is every error of this package: Code has ncclResult_t's value
// (CodeOf), Peers names the ranks concerned.
type Error = comm.Error

// Code is an ncclResult_t value.
type Code = comm.Code

// Result codes (ncclResult_t).
const (
	Success            = comm.Success
	UnhandledCudaError = comm.UnhandledCudaError
	SystemError        = comm.SystemError
	InternalError      = comm.InternalError
	InvalidArgument    = comm.InvalidArgument
	InvalidUsage       = comm.InvalidUsage
	RemoteError        = comm.RemoteError
	InProgress         = comm.InProgress
)

// Sentinels (errors.Is) of this package's errors.
var (
	ErrNoSchedule = comm.ErrNoSchedule
	ErrLayout     = comm.ErrLayout
	ErrState      = comm.ErrState
	ErrLostRank   = comm.ErrLostRank
)

// CodeOf returns err's ncclResult_t code (Success for nil).
func CodeOf(err error) Code { return comm.CodeOf(err) }

// CallInfo describes a communicator's last call (see Comm.LastCall).
type CallInfo = comm.CallInfo

// Stats are a communicator's counters (see Comm.Stats).
type Stats = comm.Stats

// UniqueID is NCCL's 128-byte ncclUniqueId: the root's address and a nonce.
type UniqueID = bootstrap.UniqueID

// GetUniqueID makes a unique id and starts its root (ncclGetUniqueId): one
// rank calls it and hands the id to the others (a file, MPI, the launcher's
// store; see Join). It listens on MSCCLPP_SOCKET_IFNAME's address (or the
// first usable interface), honouring MSCCLPP_SOCKET_FAMILY.
func GetUniqueID() (UniqueID, error) { return bootstrap.NewUniqueID(bootstrap.Options{}) }

// Config configures a communicator. Zero fields take the environment's
// values (docs/env.md).
type Config struct {
	// Backend is "host" or "cuda" (default THESEUS_BACKEND, "cuda").
	Backend string
	// Device is the device ordinal of this process (0 on the host
	// backend).
	Device int
	// ContextDir is the selection context (default: DefaultContext —
	// THESEUS_SELECTION_CONTEXT, else $HOME/.theseus/contexts/default if it
	// exists, else the context installed beside the library, else the
	// embedded default).
	ContextDir string
	// The rest override the environment: see comm.Config.
	Options comm.Config
}

// DefaultContextDir is the context a communicator reads when Config names
// none (DefaultContext's directory).
func DefaultContextDir() string { return ctxdir.Dir() }

// DefaultContext is the context a communicator reads when Config names
// none, and where it comes from (ctxdir.Default: the environment,
// the home context, the installed one or the embedded default, in that
// order). Errors: the embedded default could not be written anywhere.
func DefaultContext() (dir, source string, err error) {
	c, err := ctxdir.Default()
	return c.Dir, c.Source.String(), err
}

func (cfg Config) comm() (comm.Config, error) {
	c := cfg.Options
	name := cfg.Backend
	if name == "" {
		v, err := env.Backend.Enum()
		if err != nil {
			return c, err
		}
		name = v
	}
	if c.Backend == nil {
		var b device.Backend
		var err error
		if cfg.Device > 0 {
			// A process that names its device runs there, not on the
			// calling thread's current device.
			b, err = device.OpenOnDevice(name, cfg.Device)
		} else {
			b, err = device.Open(name)
		}
		if err != nil {
			return c, err
		}
		c.Backend = b
	}
	if cfg.Device != 0 {
		c.Device = cfg.Device
	}
	if cfg.ContextDir != "" {
		c.ContextDir = cfg.ContextDir
	}
	return c, nil
}

// Comm is one rank of a communicator.
type Comm struct {
	c      *comm.Comm
	ctx    context.Context
	cancel context.CancelFunc
	group  p2pGroup // the open group (p2p.go)
}

func wrap(c *comm.Comm) *Comm {
	ctx, cancel := context.WithCancel(context.Background())
	return &Comm{c: c, ctx: ctx, cancel: cancel}
}

// NewComm creates rank rank of an nranks-rank communicator from id
// (ncclCommInitRank): every rank calls it. Errors: see comm.Init
// (InvalidArgument, InvalidUsage for job-layout violations, RemoteError
// naming ranks that never joined).
func NewComm(ctx context.Context, id UniqueID, rank, nranks int, cfg Config) (*Comm, error) {
	cc, err := cfg.comm()
	if err != nil {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: rank, Msg: "configuration", Err: err}
	}
	return initComm(ctx, id, rank, nranks, cc)
}

// initComm is NewComm after the configuration's conversion.
func initComm(ctx context.Context, id UniqueID, rank, nranks int, cc comm.Config) (*Comm, error) {
	c, err := comm.Init(ctx, id, rank, nranks, cc)
	if err != nil {
		return nil, err
	}
	return wrap(c), nil
}

// NewLocalComms creates an nranks-rank communicator whose ranks are
// goroutines of this process (the host backend's in-process mode: tests,
// theseus-bench without a launcher), on a loopback unique id. comms[r] is
// rank r. On an error every rank created is destroyed.
func NewLocalComms(ctx context.Context, nranks int, cfg Config) ([]*Comm, error) {
	if nranks < 1 {
		return nil, &Error{Code: InvalidArgument, Op: "init", Rank: -1, Msg: fmt.Sprintf("%d ranks", nranks)}
	}
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: cfg.Options.Timeout})
	if err != nil {
		return nil, &Error{Code: SystemError, Op: "init", Rank: -1, Msg: "unique id", Err: err}
	}
	comms := make([]*Comm, nranks)
	errs := make([]error, nranks)
	var wg sync.WaitGroup
	for r := range nranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(ctx, id, r, nranks, cfg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			for _, c := range comms {
				if c != nil {
					c.Abort()
				}
			}
			return nil, err
		}
	}
	if sh, ok := comms[0].c.Backend().(device.ContextSharer); ok && nranks > 1 {
		sh.ShareContext()
	}
	return comms, nil
}

// Rank is this rank (ncclCommUserRank); NRanks the communicator size
// (ncclCommCount).
func (c *Comm) Rank() int   { return c.c.Rank() }
func (c *Comm) NRanks() int { return c.c.NRanks() }

// LocalRank is the rank's position on its node, NLocalRanks the ranks per
// node, Nodes the number of nodes (MSCCLPP_HOSTID groups ranks).
func (c *Comm) LocalRank() int   { return c.c.LocalRank() }
func (c *Comm) NLocalRanks() int { return c.c.NLocalRanks() }
func (c *Comm) Nodes() int       { return c.c.Nodes() }

// Device is the device ordinal (ncclCommCuDevice).
func (c *Comm) Device() int { return c.c.Device() }

// BackendName is "host" or "cuda".
func (c *Comm) BackendName() string { return c.c.Backend().Name() }

// ContextDir is the selection context the communicator reads.
func (c *Comm) ContextDir() string { return c.c.ContextDir() }

// Internal returns the runtime communicator (runtime/comm), for the NCCL
// layer and tools.
func (c *Comm) Internal() *comm.Comm { return c.c }

// LastCall says which schedule the last collective ran (Schedule is its
// entry id in the selection context, Name its file) and the launch counter.
func (c *Comm) LastCall() CallInfo { return c.c.LastCall() }

// Stats returns the communicator's counters: the executor's cache hits and
// misses per level, migrations and what they created (channel ends,
// semaphores, registrations, bootstrap messages), and the selector's.
func (c *Comm) Stats() Stats { return c.c.Stats() }

// AsyncError is ncclCommGetAsyncError: nil while healthy, else the error
// that broke the communicator (a lost peer, a launch that timed out).
func (c *Comm) AsyncError() error { return c.c.AsyncError() }

// Finalize waits for every launch (ncclCommFinalize).
func (c *Comm) Finalize() error { return c.c.Finalize() }

// Destroy releases the communicator (ncclCommDestroy).
func (c *Comm) Destroy() error {
	err := c.c.Destroy()
	c.cancel()
	return err
}

// Abort stops the communicator at once (ncclCommAbort); peers see this rank
// as lost. Safe from any goroutine.
func (c *Comm) Abort() error {
	c.cancel()
	return c.c.Abort()
}

// Split is ncclCommSplit: ranks with equal color form a new communicator,
// ordered by key then rank; a negative color (NoColor) returns nil.
func (c *Comm) Split(color, key int) (*Comm, error) {
	n, err := c.c.Split(c.ctx, color, key)
	if err != nil || n == nil {
		return nil, err
	}
	return wrap(n), nil
}

// NoColor is NCCL_SPLIT_NOCOLOR.
const NoColor = comm.NoColor

// ShrinkFlags are ncclCommShrink's shrinkFlags.
type ShrinkFlags int

const (
	// ShrinkDefault (NCCL_SHRINK_DEFAULT): every rank of the communicator
	// is alive; the communicator stays usable.
	ShrinkDefault ShrinkFlags = 0
	// ShrinkAbort (NCCL_SHRINK_ABORT): the excluded ranks may be dead or
	// hung; the communicator's pending work is aborted first and it is
	// revoked (only Finalize, Destroy and Abort remain).
	ShrinkAbort ShrinkFlags = 1
)

// Shrink is ncclCommShrink (NCCL 2.27 semantics): the ranks not in exclude
// (ranks of c, each at most once) form a new communicator, numbered in
// their order in c; every one of them calls Shrink with the same list, the
// excluded ranks do not. The survivors agree without the excluded ranks
// (comm.Comm.Shrink), so any rank may be excluded, rank 0 included, dead or
// alive. The new communicator selects from its selection context for its
// own size. Errors: InvalidArgument for a bad list or unknown flags,
// InvalidUsage for lists that differ between survivors or a communicator
// that is finalized or released, RemoteError when a survivor does not take
// part within the timeout.
func (c *Comm) Shrink(exclude []int, flags ShrinkFlags) (*Comm, error) {
	if flags&^ShrinkAbort != 0 {
		return nil, &Error{Code: InvalidArgument, Op: "shrink", Rank: c.Rank(), Msg: fmt.Sprintf("unknown shrink flags %#x", int(flags))}
	}
	n, err := c.c.Shrink(c.ctx, exclude, flags&ShrinkAbort != 0)
	if err != nil {
		return nil, err
	}
	return wrap(n), nil
}

// Register is ncclCommRegister: it records the allocation holding
// [p, p+n bytes) for the communicator (a local call) and returns the
// registration's id. Errors: InvalidArgument for a null or empty range.
func (c *Comm) Register(p Ptr, n int64) (uint64, error) { return c.c.Register(p, n) }

// Deregister is ncclCommDeregister: when id was its allocation's last
// registration, every cache entry of the allocation — this rank's and
// every peer's import of it — is gone when it returns, so the memory may be
// freed (on CUDA too: the seed's Known Issue 1). Errors: InvalidArgument
// for an unknown id; RemoteError when a peer does not confirm within the
// timeout.
func (c *Comm) Deregister(id uint64) error { return c.c.Deregister(id) }

// Revoke is ncclCommRevoke (NCCL 2.29 semantics): the communicator's work
// stops (running launches return at their next wait) and later
// collectives fail with InvalidUsage; it remains a parent for Split and
// Shrink and is released by Finalize, Destroy or Abort. Safe from any
// goroutine.
func (c *Comm) Revoke() { c.c.Revoke() }

// MemAlloc allocates size bytes of the backend's memory (ncclMemAlloc):
// exportable, so schedules that reach a peer's buffers need no staging.
func (c *Comm) MemAlloc(size int64) (Ptr, error) {
	p, err := c.c.Backend().Alloc(size)
	if err != nil {
		return 0, &Error{Code: SystemError, Op: "memalloc", Rank: c.Rank(), Msg: fmt.Sprintf("%d bytes", size), Err: err}
	}
	return p, nil
}

// MemFree frees memory from MemAlloc (ncclMemFree). Free buffers only
// after destroying the communicators that used them (seed Known Issue 1).
func (c *Comm) MemFree(p Ptr) error {
	if err := c.c.Backend().Free(p); err != nil {
		return &Error{Code: InvalidArgument, Op: "memfree", Rank: c.Rank(), Msg: "free", Err: err}
	}
	return nil
}

// NewStream creates a stream of the communicator's backend. Calls on it
// return once enqueued; Synchronize waits.
func (c *Comm) NewStream() (Stream, error) { return c.c.Backend().NewStream() }

// WrapStream returns a Stream on a stream handle of the backend's own API
// (a cudaStream_t from the NCCL layer), for backends that support it
// (device.StreamWrapper). Errors: InvalidUsage on other backends.
func (c *Comm) WrapStream(h uintptr) (Stream, error) {
	w, ok := c.c.Backend().(device.StreamWrapper)
	if !ok {
		return nil, &Error{Code: InvalidUsage, Op: "wrapstream", Rank: c.Rank(), Msg: "the " + c.BackendName() + " backend has no foreign streams"}
	}
	return w.WrapStream(h)
}

// HostBytes views [p, p+n) of host-backend memory as a byte slice (to fill
// inputs and read results). Errors on other backends.
func (c *Comm) HostBytes(p Ptr, n int64) ([]byte, error) {
	if c.BackendName() != host.Name {
		return nil, &Error{Code: InvalidUsage, Op: "hostbytes", Rank: c.Rank(), Msg: "not the host backend"}
	}
	return host.Bytes(p, n)
}

// HostPtr returns the address of b's first byte, to pass Go memory to the
// host backend. b must be heap memory that stays alive until every call
// using it has finished; the executor stages it through shared memory when a
// peer must reach it (when ranks are processes).
func HostPtr(b []byte) Ptr { return host.PtrOf(b) }

// PublishValue appends value to exogenous attribute name's log in the
// selection context dir: every communicator reading dir switches to the
// schedules the new value favours, all ranks at the same request, within
// THESEUS_CONTEXT_CHECK_PERIOD requests (the hot swap).
func PublishValue(dir, name string, value any) error { return comm.PublishValue(dir, name, value) }

func (c *Comm) call(coll ir.Collective, send, recv Ptr, count int64, dt DataType, op RedOp, root int, s Stream) error {
	t, ok := dt.IR()
	if !ok {
		return &Error{Code: InvalidArgument, Op: coll.String(), Rank: c.Rank(), Msg: fmt.Sprintf("datatype %d out of range (0..%d)", int32(dt), NumTypes-1)}
	}
	r := ir.Sum
	if coll.Reduces() {
		if r, ok = op.IR(); !ok {
			return &Error{Code: InvalidArgument, Op: coll.String(), Rank: c.Rank(), Msg: fmt.Sprintf("reduction op %d out of range (0..%d)", int32(op), NumOps-1)}
		}
	}
	call := comm.Call{Coll: coll, Send: send, Recv: recv, Count: count, DataType: t, RedOp: r, Root: root, Stream: s}
	return c.c.Collective(c.ctx, &call)
}

// AllReduce is ncclAllReduce: count elements of dt, reduced with op over
// every rank, in recv on every rank. send == recv is in place. s nil: the
// communicator's stream, and the call waits for the result.
func (c *Comm) AllReduce(send, recv Ptr, count int64, dt DataType, op RedOp, s Stream) error {
	return c.call(ir.AllReduce, send, recv, count, dt, op, 0, s)
}

// AllGather is ncclAllGather: every rank's count elements, concatenated by
// rank into recv (nranks*count). In place: send == recv + rank*count*size.
func (c *Comm) AllGather(send, recv Ptr, count int64, dt DataType, s Stream) error {
	return c.call(ir.AllGather, send, recv, count, dt, Sum, 0, s)
}

// ReduceScatter is ncclReduceScatter: send holds nranks*count elements;
// block r reduced over every rank lands in rank r's recv (count). In place:
// recv == send + rank*count*size.
func (c *Comm) ReduceScatter(send, recv Ptr, count int64, dt DataType, op RedOp, s Stream) error {
	return c.call(ir.ReduceScatter, send, recv, count, dt, op, 0, s)
}

// Broadcast is ncclBroadcast: root's send (count) in every rank's recv.
func (c *Comm) Broadcast(send, recv Ptr, count int64, dt DataType, root int, s Stream) error {
	return c.call(ir.Broadcast, send, recv, count, dt, Sum, root, s)
}

// Reduce is ncclReduce: count elements reduced over every rank into root's
// recv.
func (c *Comm) Reduce(send, recv Ptr, count int64, dt DataType, op RedOp, root int, s Stream) error {
	return c.call(ir.Reduce, send, recv, count, dt, op, root, s)
}

// AlltoAll is ncclAlltoAll: block q (count elements) of rank r's send lands
// as block r of rank q's recv.
func (c *Comm) AlltoAll(send, recv Ptr, count int64, dt DataType, s Stream) error {
	return c.call(ir.AllToAll, send, recv, count, dt, Sum, 0, s)
}

// Gather is ncclGather: every rank's count elements, concatenated by rank
// into root's recv.
func (c *Comm) Gather(send, recv Ptr, count int64, dt DataType, root int, s Stream) error {
	return c.call(ir.Gather, send, recv, count, dt, Sum, root, s)
}

// Scatter is ncclScatter: block r (count elements) of root's send lands in
// rank r's recv.
func (c *Comm) Scatter(send, recv Ptr, count int64, dt DataType, root int, s Stream) error {
	return c.call(ir.Scatter, send, recv, count, dt, Sum, root, s)
}

// Collective runs any collective by its IR kind (theseus-bench loops over
// them): the arguments the collective does not take are ignored.
func (c *Comm) Collective(coll ir.Collective, send, recv Ptr, count int64, dt DataType, op RedOp, root int, s Stream) error {
	return c.call(coll, send, recv, count, dt, op, root, s)
}
