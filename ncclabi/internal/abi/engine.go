package abi

import (
	"context"
	"errors"

	"github.com/theseus-ccl/theseus/runtime/replay"
)

// UniqueID is ncclUniqueId: 128 opaque bytes, passed by value.
type UniqueID [128]byte

// ErrNoSchedule is returned (wrapped) by EngineComm.Run when no Theseus
// schedule serves the request; the library then runs it on the fallback
// NCCL, or rejects it with InvalidUsage when there is none.
var ErrNoSchedule = errors.New("no Theseus schedule serves this request")

// ErrUnsupported is returned (wrapped) by engine calls that the backend
// does not implement (for example Shrink); the library maps it to
// InvalidUsage with the engine's reason.
var ErrUnsupported = errors.New("not supported by this Theseus build")

// InitParams are the arguments of one rank's communicator creation.
type InitParams struct {
	ID     UniqueID
	Rank   int
	NRanks int
	// Device is the CUDA device current on the calling thread when the
	// client called the init function (0 on the host backend).
	Device int
	Config Config
}

// Engine is what the NCCL layer needs from the Theseus runtime: the seam
// between NCCL semantics (this package) and runtime/theseus. Every method
// may be called from any goroutine unless it says otherwise.
type Engine interface {
	// Backend is "host" or "cuda".
	Backend() string
	// NewUniqueID makes an id and starts its bootstrap root. With side, the
	// id also carries what EngineComm.AllGather needs (the library asks for
	// it when it has a fallback NCCL, to agree on the shadow's id).
	NewUniqueID(side bool) (UniqueID, error)
	// CurrentDevice is the device current on the calling OS thread: the
	// CUDA device of the thread's current context (-1 when it has none) on
	// cuda; always 0 on the host backend, which has no devices.
	CurrentDevice() (int, error)
	// MemAlloc allocates bytes of backend memory (device memory, or a
	// shared-memory segment on the host backend); MemFree frees it.
	MemAlloc(bytes uint64) (uintptr, error)
	MemFree(ptr uintptr) error
	// Init creates one rank's communicator; it blocks until every rank has
	// joined or the bootstrap timeout passes.
	Init(ctx context.Context, p InitParams) (EngineComm, error)
	// OnDevice runs f on a goroutine locked to an OS thread where device
	// dev is current (cuda), and waits for it. The host backend just runs f.
	OnDevice(dev int, f func())
	// Classify maps a runtime error to the NCCL result it stands for.
	Classify(err error) Result
}

// EngineComm is one rank's Theseus communicator.
type EngineComm interface {
	Rank() int
	NRanks() int
	Device() int
	// Run enqueues one collective on op.Stream (counts in elements, NCCL
	// semantics), after selecting a schedule, and says what ran it. It
	// returns an error wrapping ErrNoSchedule when no schedule serves op. It
	// may block while resources are set up with the peers. op is passed by
	// value so that the caller's Op stays on its stack (a pointer through
	// this interface would put every call's Op on the heap).
	Run(op Op) (Served, error)
	// Split is ncclCommSplit: collective over this communicator; color < 0
	// (NCCL_SPLIT_NOCOLOR) returns (nil, nil).
	Split(ctx context.Context, color, key int, cfg Config) (EngineComm, error)
	// Shrink is ncclCommShrink over the ranks not in exclude (called by
	// those ranks only); abort is NCCL_SHRINK_ABORT (this communicator's
	// pending work is aborted first and it is revoked). Engines without it
	// return ErrUnsupported.
	Shrink(ctx context.Context, exclude []int, abort bool, cfg Config) (EngineComm, error)
	// Revoke is ncclCommRevoke: pending work stops, later data calls fail
	// with InvalidUsage, and the communicator stays a parent for Split and
	// Shrink until it is finalized, destroyed or aborted. Never blocks on
	// peers.
	Revoke()
	// Register is ncclCommRegister: it records the allocation holding
	// [buf, buf+size) and returns a nonzero id. Deregister is
	// ncclCommDeregister of that id: when it returns, every cache entry of
	// the allocation is gone, on every peer, so that the buffer may be
	// freed. Engines without them return ErrUnsupported.
	Register(buf uintptr, size uint64) (uint64, error)
	Deregister(id uint64) error
	// AllGather is a small-message allgather among the communicator's
	// ranks (the shadow NCCL communicator's id travels through it), used at
	// most once, right after Init. It returns ErrUnsupported (on every rank
	// alike) when the communicator's id was made without side.
	AllGather(ctx context.Context, data []byte) ([][]byte, error)
	// StreamSync waits for this communicator's work on stream.
	StreamSync(stream uintptr) error
	// Finalize waits for this communicator's in-flight work.
	Finalize(ctx context.Context) error
	// Destroy releases local resources.
	Destroy() error
	// Abort stops in-flight work (waiting kernels return) and releases
	// resources without waiting for peers.
	Abort()
	// AsyncError is the first asynchronous failure (a peer lost, a wait
	// that timed out), nil if none.
	AsyncError() error
}

// Replayer is implemented by engine communicators whose repeated calls
// the library's C side can launch without entering Go, from the calls'
// launch plans (runtime/replay, the C launcher; docs/ncclabi.md, "Launches
// from C"). The C side packs each data call's arguments as Op.ReplayKey
// does and launches from the record whose address ArmReplay returned
// while the record accepts that key.
type Replayer interface {
	// ArmReplay arms the communicator's replay record to repeat op, the
	// call Run has just served outside a group, with C key k. It returns
	// the record's address (a th_replay*), or 0 when op's repeats cannot
	// be launched from C (the engine's reasons: no valid plan a launcher
	// outside Go may repeat, another backend, an epoch due).
	ArmReplay(op *Op, k replay.Key) uintptr
	// DisarmReplay stops calls made from C (waiting for one in progress);
	// the engine counts them at its communicator's next use. Safe from any
	// goroutine.
	DisarmReplay()
	// SyncReplay counts the calls made from C so far and returns how many
	// there have been in all (the library adds them to its native count).
	SyncReplay() uint64
	// ReplayMisses says why calls of the communicator took the Go path
	// instead of the C launcher ("" when there is nothing to say): the
	// engine's refusals to arm its record, by reason, and the calls the
	// armed record did not launch (no entry's key; declined by the launch
	// function). The destroy line at INFO INIT shows it.
	ReplayMisses() string
}

// P2PEngine is implemented by engine communicators with the
// point-to-point engine (docs/p2p.md): RunP2P runs one group's ncclSend and
// ncclRecv calls on the communicator, in call order (each with its own
// stream: the group's streams are joined), or one ncclAlltoAllv (a single
// op), and says what ran them. It returns an error wrapping ErrNoSchedule
// when the backend cannot run them (the library then tries the fallback);
// other errors as Run's.
type P2PEngine interface {
	RunP2P(ops []Op) (Served, error)
}

// LaunchTimer is implemented by engine communicators that account the
// time their launches spend inside the driver's launch call
// (theseusCommLaunchTime; THESEUS_TIME_LAUNCHES=1 on the CUDA backend):
// how many launches were timed and the nanoseconds inside it.
type LaunchTimer interface {
	LaunchTime() (launches, ns int64)
}

// Fallback is the real NCCL named by THESEUS_NCCL_LIB_PATH, reached
// through dlsym. Handles are the real library's ncclComm_t values. Calls
// run on the calling OS thread, whose current CUDA device the real NCCL
// uses.
type Fallback interface {
	// Path is the library's path as opened.
	Path() string
	// Has reports whether the library exports the named function.
	Has(name string) bool
	GetUniqueID() (UniqueID, Result)
	CommInitRank(id UniqueID, nranks, rank int, blocking bool) (uintptr, Result)
	CommInitAll(ndev int, devs []int) ([]uintptr, Result)
	CommSplit(parent uintptr, color, key int) (uintptr, Result)
	CommShrink(parent uintptr, exclude []int, flags int) (uintptr, Result)
	CommFinalize(c uintptr) Result
	CommDestroy(c uintptr) Result
	CommAbort(c uintptr) Result
	CommGetAsyncError(c uintptr) (Result, Result)
	GroupStart() Result
	GroupEnd() Result
	// Run forwards one data call (collective, Send, Recv; AlltoAllv as a
	// grouped Send/Recv loop) on shadow communicator c.
	Run(c uintptr, op *Op) Result
	Register(c uintptr, buf uintptr, size uint64) (uintptr, Result)
	Deregister(c uintptr, handle uintptr) Result
	RedOpCreatePreMulSum(c uintptr, scalar uintptr, dt DataType, residence int32) (RedOp, Result)
	RedOpDestroy(c uintptr, op RedOp) Result
	// LastError is the real library's ncclGetLastError text.
	LastError() string
}
