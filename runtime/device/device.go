// Package device is the narrow interface between the executor
// (runtime/executor) and an execution backend: the host backend
// (runtime/host, the CPU reference) and the CUDA backend (cuda). A backend
// allocates exportable memory, maps its peers' exports, copies small host
// data in and out, and runs one rank's op table per launch on an in-order
// stream (ARCHITECTURE.md §7, docs/design/runtime.md "Launch").
//
// The executor owns every decision (what to allocate, when to exchange,
// which peer words a channel end signals into, the LL flag, the scratch
// half); a backend only turns an Args into whatever its launches need once
// (Prepare, at executor level L3) and then launches that prepared state
// with a launch counter (Stream.Launch), so a cache hit costs the backend
// nothing but the enqueue.
//
// Backends register themselves by name (Register) in an init function; the
// runtime finds them with Lookup. The host backend registers as "host", the
// CUDA backend as "cuda".
package device

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
)

// Ptr is an address in this process's view of a backend's memory: a device
// virtual address on CUDA, a host virtual address on the host backend. 0 is
// the null pointer.
type Ptr uintptr

// Mem is a range of memory: Size bytes from Ptr. The zero Mem is "no
// buffer".
type Mem struct {
	Ptr  Ptr
	Size int64
}

// End returns the first address past the range.
func (m Mem) End() Ptr { return m.Ptr + Ptr(m.Size) }

// Region is the identity of one backend allocation: its base, its size in
// bytes and a generation that the backend never reuses within a process, so
// that an allocation freed and replaced at the same address is a different
// Region (executor level L2 keys by Region, never by address alone).
type Region struct {
	Base Ptr
	Size int64
	Gen  uint64
}

// Contains reports whether [p, p+n) lies inside r.
func (r Region) Contains(p Ptr, n int64) bool {
	return p >= r.Base && n >= 0 && int64(p-r.Base) <= r.Size-n
}

// Handle is an exported allocation: opaque bytes (at most MaxHandle) that a
// peer passes to Backend.Import, possibly in another process on the same
// node. It travels over the bootstrap network.
type Handle []byte

// MaxHandle bounds the size of a Handle in bytes.
const MaxHandle = 512

// Errors that backends return (wrapped).
var (
	// ErrNotExportable: the memory is not a backend allocation (for
	// example plain Go or malloc memory on the host backend); the executor
	// then stages it through a backend allocation.
	ErrNotExportable = errors.New("device: memory is not an exportable backend allocation")
	// ErrBadHandle: a handle that this backend did not make, or whose
	// allocation no longer exists.
	ErrBadHandle = errors.New("device: bad handle")
	// ErrClosed: a call on a closed stream.
	ErrClosed = errors.New("device: stream closed")
)

// Backend is one execution backend in this process. Methods are safe for
// concurrent use (several communicators, and on the host backend several
// ranks, share one backend).
type Backend interface {
	// Name is the backend's registry name ("host", "cuda").
	Name() string
	// Alloc returns size >= 1 bytes of zeroed memory, aligned to 64 bytes,
	// that can be exported.
	Alloc(size int64) (Ptr, error)
	// Free releases an allocation made by Alloc (its base). Peers that
	// imported it keep a valid mapping until they Unimport it.
	Free(p Ptr) error
	// Lookup returns the backend allocation that contains [p, p+n), or
	// false when the range is not (entirely) inside one: foreign memory.
	Lookup(p Ptr, n int64) (Region, bool)
	// Export returns the handle of allocation r (a Region from Lookup).
	// Errors: ErrNotExportable.
	Export(r Region) (Handle, error)
	// Import maps a peer's exported allocation into this process and
	// returns it as a Region of this process's address space. Importing the
	// same handle twice returns the same mapping (reference counted).
	// Errors: ErrBadHandle.
	Import(h Handle) (Region, error)
	// Unimport drops one reference to a mapping Import returned.
	Unimport(base Ptr) error
	// Upload copies src to dst synchronously (host to device); Download
	// copies back. Both are for small control data (tables, counters),
	// never on the per-call path.
	Upload(dst Ptr, src []byte) error
	Download(dst []byte, src Ptr) error
	// NewStream creates an in-order stream of launches.
	NewStream() (Stream, error)
	// Prepare turns one rank's launch arguments into the backend's launch
	// state, once per executor L3 entry. The Args (and the slices it holds)
	// must not change afterwards. It may be called while a stream of the
	// backend is being captured into a CUDA graph, and must then enqueue
	// nothing on that stream and make no call the capture forbids.
	Prepare(a *Args) (Prepared, error)
}

// Rebaser is implemented by backends whose prepared launches move to other
// input and output buffers cheaply (executor level L3: a call whose
// buffers moved within known allocations, as nccl-tests shifts them and
// PyTorch's caching allocator hands them out, costs a repeat plus this).
// Rebase returns the prepared launch of a, where a differs from the Args p
// was prepared with only in Buf[Input] and Buf[Output] and p has no
// staging copies. The result shares p's backend state (what Prepare
// allocated and uploaded): Rebase allocates no backend memory, makes no
// driver call and waits for nothing, which also makes it safe during a
// CUDA graph capture; the result's Release releases nothing, and it is
// valid as long as p is (the executor releases p only after every launch
// of both). Launches of p and of its rebased launches must not run
// concurrently (they share p's per-launch device words, as repeated
// launches of p do: one rank's launches run in order). Errors: a p of
// another backend, or one with staging copies.
type Rebaser interface {
	Rebase(p Prepared, a *Args) (Prepared, error)
}

// StreamWrapper is implemented by backends whose callers bring their own
// streams (the NCCL layer passes a cudaStream_t): WrapStream returns a
// Stream that launches on the foreign stream handle h. Closing it does not
// destroy the foreign stream.
type StreamWrapper interface {
	WrapStream(h uintptr) (Stream, error)
}

// StreamOrderer is implemented by streams that can be made to wait, on the
// device and without the host waiting, for everything enqueued so far on
// another stream of the same backend (CUDA: an event recorded on prev and
// waited on by this stream). The executor uses it so that one rank's
// launches run in call order when consecutive calls of a communicator use
// different streams, as NCCL orders one communicator's operations. After
// on a closed prev does nothing.
type StreamOrderer interface {
	After(prev Stream) error
}

// CaptureLauncher is implemented by streams whose capture check is a
// driver call (CUDA: cuStreamIsCapturing, with the context made current).
// CaptureLaunch does what Capturing followed by Launch does, under one
// switch to the device's context: it checks whether the stream is being
// captured into a CUDA graph, then launches p with launch counter launch,
// fenced when fence is set, or when the stream is captured and
// fenceCaptured is set. It returns whether the stream was being captured
// (false on a closed stream). Errors: Launch's. The executor uses it on a
// cache hit when the previous launch of the communicator was on the same
// stream (no StreamOrderer.After between the check and the launch).
type CaptureLauncher interface {
	CaptureLaunch(p Prepared, launch uint64, fence, fenceCaptured bool) (capturing bool, err error)
}

// ImageExporter is implemented by streams whose launches a launcher
// outside Go can repeat: the NCCL layer's C launcher (runtime/replay;
// docs/design/runtime.md, "Launchers"), fed from the executor's plans.
// LaunchImage describes p's launch as CaptureLaunch(p, launch, fence, true)
// would make it on this stream when the stream is not being captured, for
// any launch counter and fence (the outside launcher writes both): the
// same kernel, grid and argument, and p's fence count. It reports false,
// describing nothing, when such a launch cannot be made outside Go
// (staging copies, ranks sharing the device context, a closed stream).
//
// The stream keeps stop until it is closed: before anything the image
// names goes away (Close, and ShareContext for every stream) it calls
// stop.Stop, after which the outside launcher launches nothing from the
// image (Stop waits for a launch in progress). The caller makes stop
// ready to be stopped (its poison cleared) before it calls LaunchImage,
// so that a Stop during the call is not lost.
type ImageExporter interface {
	LaunchImage(p Prepared, stop Stopper) (LaunchImage, bool)
}

// Stopper is an outside launcher's handle on the launch images it holds
// (ImageExporter): Stop makes it launch none of them from now on, waiting
// for a launch in progress. Safe from any goroutine, at any time.
type Stopper interface {
	Stop()
}

// LaunchImage is a prepared launch as plain data, for a launcher outside
// Go (ImageExporter).
type LaunchImage struct {
	// Fn is the C function that makes the launch (for the CUDA backend, a
	// th_replay_launch_fn of runtime/replay/replay.h); Ctx and Queue are
	// what it launches in and on (a CUcontext and a CUstream).
	Fn, Ctx, Queue uintptr
	// Err is the address of the stream's 32-bit failure code (memory
	// outside Go's heap that outlives the image until Stop): a nonzero
	// code declines every launch.
	Err uintptr
	// Timed asks Fn to time its launch call (THESEUS_TIME_LAUNCHES).
	Timed bool
	// Func is the kernel; Grid, Threads and Shmem its grid and block sizes
	// and dynamic shared memory in bytes.
	Func                 uintptr
	Grid, Threads, Shmem uint32
	// NFence is the fence count a fenced launch writes.
	NFence int32
	// Arg is the kernel's by-value argument; OffLaunch and OffNFence are
	// the byte offsets in it of the 64-bit launch counter and the 32-bit
	// fence count, which the outside launcher writes before each launch.
	Arg                  []byte
	OffLaunch, OffNFence int
}

// ResidentBackend is implemented by backends that can run a persistent
// executor for a communicator rank (THESEUS_EXECUTOR=persistent;
// docs/design/runtime.md, "The persistent executor"): a resident
// consumer (CUDA: a kernel of Blocks threadblocks; host: a goroutine)
// fed with the rank's launches through a queue in host memory, each
// launch ordered with the caller's stream by stream memory operations
// instead of a kernel launch. NewResident allocates the queue; the
// consumer starts with the first launch and exits when idle, when
// stopped and on the abort word.
type ResidentBackend interface {
	NewResident(cfg ResidentConfig) (Resident, error)
}

// ResidentConfig configures a Resident.
type ResidentConfig struct {
	// Rank is the physical rank (for messages).
	Rank int
	// Blocks and Threads are the resident kernel's threadblocks (1 to
	// resident.MaxBlocks) and threads per block (a multiple of 32 up to
	// 1024) on CUDA; the host backend ignores them. A launch of more
	// threadblocks than Blocks is made as a kernel launch instead
	// (Resident's streams fall back to their own launch); every launch
	// runs with Threads threads (the kernel computes the same results at
	// any block size).
	Blocks, Threads int
	// Slots is the queue's depth (a power of two; 0: the default): how far
	// the launching thread may run ahead of the device.
	Slots int
	// Idle is how long the consumer waits without work before it exits
	// (0: until Stop, Close or the abort word): a kernel that spins on
	// its queue holds threadblocks, and every cuMemFree of the process
	// waits for it to end.
	Idle time.Duration
	// Abort is the communicator's abort word (8 bytes): nonzero ends the
	// consumer, and the queue's waits return.
	Abort Ptr
	// Timeout bounds the launching thread's wait for a free queue slot.
	Timeout time.Duration
}

// Resident is a persistent executor of one communicator rank
// (ResidentBackend). Its methods are called by the rank's launching
// goroutine (the executor's), except Stats.
type Resident interface {
	// Stream returns the stream that launches on st through the queue:
	// its Launch and CaptureLaunch describe the prepared launch in the
	// queue and order it with st; a launch the consumer cannot take (more
	// threadblocks than Blocks, staging copies, a capture into a CUDA
	// graph: a graph is replayed without the host, so a captured launch
	// is a kernel launch) is st's own. Synchronize, Err and Capturing are
	// st's, with the failures of the queue's launches. The same st gives
	// the same Stream; closing it does not close st.
	Stream(st Stream) (Stream, error)
	// Stop waits until the consumer has run every launch issued so far,
	// then ends it; the next launch starts another. Errors: a consumer
	// that does not end within the timeout.
	Stop() error
	// Close stops the consumer and frees the queue. The streams of
	// Stream must not be used afterwards.
	Close() error
	// Stats counts the queue's work.
	Stats() ResidentStats
}

// ResidentStats are a Resident's counters.
type ResidentStats struct {
	// Queued are launches made through the queue, Fallback launches its
	// streams made as kernel launches, Starts consumers started.
	Queued, Fallback, Starts uint64
}

// ContextSharer is implemented by backends whose ranks in one process
// share one device context (CUDA). ShareContext tells the backend that
// several ranks of a communicator run as goroutines of this process, so a
// rank must never block on a driver call that waits for the context's
// running kernels (cuMemFree does): those kernels may be waiting for that
// very rank. The CUDA backend then defers frees until its streams are idle.
type ContextSharer interface {
	ShareContext()
}

// Rebinder is implemented by prepared launches whose peers' buffers can
// be moved after Prepare (executor level L2: a peer moved its buffers).
// RebindPeer makes channel end end's peer buffer kind (Input or Output) m,
// as mapped in this process (the zero Mem: none), for the launches of p
// that have not yet passed their pairing wait (Args.Pair). The executor
// calls it only while no launch of p is between its pairing wait and its
// end; it may run concurrently with launches of other prepared launches.
type Rebinder interface {
	RebindPeer(end, kind int, m Mem) error
}

// WordLoader is implemented by backends that read an 8-byte word of their
// memory that launches update concurrently (the host backend: an atomic
// load). Backends without it are read with Download.
type WordLoader interface {
	LoadWord(p Ptr) (uint64, error)
}

// Prepared is a backend's ready-to-launch state for one request shape.
type Prepared interface {
	// Release frees what Prepare allocated. The executor calls it only when
	// no launch of it is in flight.
	Release()
}

// Stream runs launches in the order they were enqueued.
type Stream interface {
	// Launch enqueues one launch of p with launch counter launch (>= 1,
	// identical on every rank of the communicator). With fence set, the
	// launch first waits until every peer's done word (Args.Fence) has
	// reached launch-1, so that it never touches scratch that a peer's
	// previous launch may still read. (The CUDA backend waits for this
	// rank's own done word instead, which is launch-1 unless launches
	// captured into a CUDA graph were never run: docs/design/cuda.md.) Launch returns at once; the launch's
	// failure is reported by Err and Synchronize.
	Launch(p Prepared, launch uint64, fence bool) error
	// Synchronize waits until every launch enqueued so far has finished and
	// returns the stream's error, if any.
	Synchronize() error
	// Err returns the first failure of a launch on this stream (sticky),
	// without waiting. After a failure, later launches are skipped.
	Err() error
	// Capturing reports whether the stream is being captured into a CUDA
	// graph, when the executor must refuse anything but cache hits.
	Capturing() bool
	// Close waits for the stream and releases it.
	Close() error
}

// Buffer indices of Args.Buf and End.PeerBuf (the ir.BufKind order).
const (
	Input   = int(ir.Input)
	Output  = int(ir.Output)
	Scratch = int(ir.Scratch)
)

// Args is everything one rank's launches of one request shape need
// (docs/design/runtime.md, "Launch"). The executor builds it at level L3.
type Args struct {
	// Table is the rank's op table (the logical rank that physical rank
	// Rank runs), decoded; TableMem holds its encoding (codegen/optable),
	// uploaded with Backend.Upload, for backends that read it on the device.
	Table    *optable.Table
	TableMem Mem
	// Rank is the physical rank and NRanks the communicator size; Shift is
	// the root rotation (physical = logical + Shift mod NRanks, ir.md §3).
	Rank, NRanks int
	Shift        int
	// The request, as every rank sees it.
	Count      int64 // elements per block
	DataType   ir.DataType
	RedOp      ir.RedOp
	Root       int // physical root (rooted collectives), else 0
	InPlace    bool
	PacketType ir.PacketType
	// Layout is the request's geometry (ir.NewLayout) with its slices.
	Layout ir.Layout
	// Buf are this rank's input, output and scratch. Input and output are
	// the NCCL buffers (aliased in place as ir.md §3 says; the zero Mem when
	// the rank has no such buffer); scratch is the communicator's whole
	// scratch buffer.
	Buf [3]Mem
	// ScratchHalf, when nonzero, is the byte offset of the second scratch
	// half: a launch with an odd counter uses scratch from ScratchHalf on,
	// an even one from 0 (LL requests, and every request with
	// THESEUS_ALTERNATE_SCRATCH_BUFFER). It is the same on every rank
	// (capacity/2).
	ScratchHalf int64
	// Ends has one entry per channel end of Table (index = channel).
	Ends []End
	// Publish holds one persistent dependency counter per threadblock
	// (8 bytes each).
	Publish Mem
	// Abort is the communicator's abort word (8 bytes): nonzero stops every
	// wait; a failing launch stores 1.
	Abort Ptr
	// Done is this rank's done word (8 bytes): the backend stores the
	// launch counter there when a launch has finished. Peers read it.
	Done Ptr
	// Fence are the peers' done words (mapped here) that a fenced launch
	// waits on.
	Fence []PeerWord
	// PortFence are the fences of a fenced launch with the peers on other
	// nodes, whose done words are not mapped here: the launch signals each
	// one's Channel (this rank has finished its previous launch), then
	// increments its Expected counter and waits until Inbound, which the
	// peer's signal increments, reaches it.
	PortFence []PortFence
	// PortMirror is set on the staged path when peers on other nodes put
	// into this rank's scratch (nil otherwise).
	PortMirror *PortMirror
	// PortStage is set on the staged path with kernel staging: the rank's
	// buffer that threadblocks copy their puts' device sources into (nil
	// otherwise: the proxy stages).
	PortStage *PortStage
	// HDone, when nonzero, is this rank's finished word (8 bytes): a
	// launch that has finished raises it to its launch counter as the host
	// gave it (an atomic maximum; the done word holds the device's
	// counter, which a CUDA graph's replays move on). The executor waits
	// on it before repointing a prepared launch (Rebinder).
	HDone Ptr
	// Started, when nonzero, is this rank's started word (8 bytes): a
	// launch first raises it to its launch counter (the host's; an atomic
	// maximum). Pair are the started words of the peers whose input or
	// output the launch reaches: before it reads its channel ends it waits
	// until each of them has reached its launch counter (bounded by the
	// timeout, stopped by the abort word), since a peer starts a launch
	// only after its new buffers for it were bound here (Rebinder). Set
	// only for launches that reach peers' buffers.
	Started Ptr
	Pair    []PeerWord
	// Timeout bounds every wait of a launch (THESEUS_TIMEOUT).
	Timeout time.Duration
	// StageIn are copies done before the launch's ops, StageOut after them
	// (user buffers that are not backend allocations, staged through
	// backend memory because a peer reads or writes them).
	StageIn, StageOut []Copy
	// Kernel, when not nil, is the table's specialised kernel for the
	// request's datatype (the schedule's bundle carries it: `theseusc
	// compile --specialize`, docs/specialize.md): a backend that can load
	// it launches it instead of its generic executor, with the same
	// arguments. Others ignore it.
	Kernel *Kernel
	// Trace, when set, is the buffer (of this backend's OpTracer) that
	// every launch records its ops' times into; nil: nothing is recorded.
	Trace OpTrace
}

// Kernel is a specialised kernel of one rank's op table (Args.Kernel).
type Kernel struct {
	// Key identifies the code (the SHA-256 of PTX): a backend loads each
	// key once.
	Key [32]byte
	// PTX is the module (CUDA: sm_80 PTX whose one entry takes the generic
	// executor's launch argument).
	PTX []byte
	// Peers are the other ranks' kernels of the same table set and
	// datatype. A backend whose context several ranks of this process
	// share loads them with this one, before this rank's first launch of
	// it: loading a module may wait for the context's running kernels, and
	// a peer's kernel already running waits for this rank's (CUDA: the
	// first launches of a 2-rank World timed out on the H200).
	Peers []*Kernel
}

// OpTracer is implemented by backends whose launches can record when each
// op of each threadblock ran (docs/trace.md): the CUDA kernel with
// %globaltimer into host-mapped memory, the host interpreter with the
// host clock. NewOpTrace returns a buffer of records op records for one
// rank's launches (Args.Trace).
type OpTracer interface {
	NewOpTrace(records int) (OpTrace, error)
}

// OpTrace is the per-op record buffer of one rank's launches.
type OpTrace interface {
	// Drain calls f for each record written since the last Drain, and
	// empties the buffer. The caller makes sure that no launch writing it
	// runs (it has waited for every stream it launched on); a record a
	// launch was still writing is skipped. It returns how many records did
	// not fit the buffer since the last Drain.
	Drain(f func(OpSpan)) (dropped uint64)
	// Close frees the buffer, after the launches that write it are done.
	Close()
}

// OpSpan is one record of an OpTrace: when one op of one threadblock ran
// in one pipeline slice of a launch, or (Step -1) the threadblock's whole
// part of the launch, from its start to its done word.
type OpSpan struct {
	Launch uint64 // the launch counter
	TB     int
	Step   int // the op's index in the threadblock's list; -1: the whole launch
	Slice  int64
	Op     ir.Opcode
	// Begin and End are host wall-clock times in Unix nanoseconds (the
	// GPU's %globaltimer mapped to it: docs/trace.md, "Clocks").
	Begin, End int64
}

// End is one channel end as this rank's launches see it.
type End struct {
	// Peer is the physical rank at the other end.
	Peer int
	// PeerBuf are the peer's input, output and scratch as mapped here;
	// buffers the table never reaches through this end are the zero Mem.
	PeerBuf [3]Mem
	// Inbound is this end's inbound semaphore (the peer signals into it),
	// PeerInbound the other end's (this end signals into it), Expected this
	// end's private expected counter. 8-byte words.
	Inbound, PeerInbound, Expected Ptr
	// Port is set for a port channel to a peer on another node: nothing of
	// the peer is mapped here (PeerBuf and PeerInbound are zero), remote
	// refs through the end are puts that the process's proxy executes, its
	// signals and flushes go through the proxy, and Inbound is host memory
	// (on CUDA pinned and mapped into the device, HostMapper) that the
	// peer's signals increment (docs/transport.md, "Integration").
	Port *PortEnd
}

// PortEnd is a channel end through the port-channel proxy.
type PortEnd struct {
	// Conn is the connection to the peer (one per pair of ranks of the
	// communicator).
	Conn PortConn
	// Channel is the connection's channel id of this end (its signals).
	Channel uint16
	// Local and Peer place this rank's and the peer's input, output and
	// scratch (device.Input, Output, Scratch) in the connection's regions;
	// a zero Size: not reachable through this end. The scratch is the
	// whole scratch buffer, as Args.Buf[Scratch] is.
	Local, Peer [3]PortBuf
	// Head is the ticket counter of Conn's FIFO for device producers: 8
	// bytes of device memory, zero at first, shared by every end of Conn
	// (port.h). 0 for Go producers.
	Head Ptr
	// Mirror is the staged path's scratch mirror (Args.PortMirror) as a
	// source region of Conn: a relay puts the chunks the peers wrote from
	// there. Size 0: no mirror.
	Mirror PortBuf
	// Stage is the kernel staging buffer (Args.PortStage) as a source
	// region of Conn. Size 0: none.
	Stage PortBuf
}

// PortStage is the kernel staging buffer of the staged path
// (THESEUS_PROXY_STAGING=kernel): pinned host memory mapped into the
// device, TBs areas of TBBytes bytes (even), one per threadblock, which
// the kernel copies what it puts from device memory into (two halves in
// turn) and puts from, so that the proxy makes no device-to-host copy.
// Threadblocks from TBs on use the proxy's staging.
type PortStage struct {
	Mem     MappedMem
	TBs     int
	TBBytes int64
}

// PortMirror is the staged path's copy of the scratch (device memory
// with a UCX build that lacks CUDA support): pinned host memory mapped
// into the device, of the scratch's size, that the peers on other nodes
// put into. The scratch chunks they write (Map: bit i of word i/32 is
// chunk i, Chunks of them) are read and written there by the launches.
type PortMirror struct {
	Mem    MappedMem
	Map    []uint32
	Chunks int64
}

// PortFence is a fence with a peer on another node (Args.PortFence): a
// port channel of the connection Conn of its own, Inbound this rank's
// semaphore of it (host memory, as a port end's) and Expected its
// counter, Head the FIFO's device ticket counter (PortEnd.Head).
type PortFence struct {
	Peer              int
	Conn              PortConn
	Channel           uint16
	Inbound, Expected Ptr
	Head              Ptr
}

// PortBuf is a buffer's place in a region registered with a port-channel
// connection: Size bytes from byte Off of region Region.
type PortBuf struct {
	Region uint16
	Off    int64
	Size   int64
}

// PortConn is one rank's port-channel connection to a peer on another
// node (runtime/transport/proxy.Conn, as the executor adapts it): Go
// producers (the host backend) call Put, Signal, Flush, Wait and
// WaitSignal; device producers post descriptors into the FIFO whose
// device address FIFO gives (port.h). Every wait is bounded by
// THESEUS_TIMEOUT and ends early when the connection fails; errors name
// both ranks and carry UCX's status text.
type PortConn interface {
	// Put queues size bytes from this rank's region src at srcOff to the
	// peer's region dst at dstOff, with a signal on channel ch after it
	// when signal is set, and returns the descriptor's ticket; the source
	// may be overwritten once Wait(ticket) has returned.
	Put(ch, src uint16, srcOff uint64, dst uint16, dstOff uint64, size uint32, signal bool) (uint64, error)
	// Wait waits until the ticket's descriptor is complete.
	Wait(ticket uint64) error
	// Signal adds 1 to the peer's semaphore of channel ch after the
	// channel's earlier puts.
	Signal(ch uint16) error
	// Flush waits until the channel's earlier puts and signals are
	// complete at the peer.
	Flush(ch uint16) error
	// WaitSignal waits until the semaphore word sem (host memory of this
	// rank) reaches want; it ends early when the connection or the
	// endpoint to peer fails or stop returns an error.
	WaitSignal(sem *uint64, want uint64, peer int, stop func() error) error
	// WaitUntil waits, as WaitSignal does (helping the proxy progress,
	// bounded by THESEUS_TIMEOUT, ended by a failure or stop), until cond
	// holds: a condition on this rank's memory that peer's puts and
	// signals write (the point-to-point engine's credit and arrival
	// words).
	WaitUntil(cond func() bool, peer int, stop func() error) error
	// Help runs one round of the proxy from the caller.
	Help()
	// Kick wakes the proxy before a launch whose kernel posts.
	Kick()
	// Err is the connection's failure, nil while it works.
	Err() error
	// FIFO is the device address of the connection's FIFO block (port.h
	// theseus_port_ctrl), for device producers.
	FIFO() Ptr
}

// HostMapper is implemented by backends whose launches poll and post to
// host memory that the proxy writes and reads (CUDA): AllocMapped returns
// size bytes of zeroed, pinned host memory mapped into the device (Host is
// its host address, Dev its device address), FreeMapped releases it.
// ToHost copies n bytes of device memory at src to host memory at dst and
// returns once they are there (the proxy's staging of device memory, from
// any goroutine). Backends without it (host) use their ordinary memory,
// which is host memory already.
type HostMapper interface {
	AllocMapped(size int64) (MappedMem, error)
	FreeMapped(m MappedMem) error
	ToHost(dst unsafe.Pointer, src Ptr, n int64) error
	// BindThread makes the backend's device context current on the
	// calling OS thread, which the caller has locked (the proxy's: a UCX
	// built with CUDA copies device memory in its progress).
	BindThread() error
}

// AsyncToHost is implemented by HostMappers that can start device-to-host
// copies without waiting (ToHostAsync: queued in order on one stream of the
// backend's, dst pinned) and wait for every copy started so far
// (SyncToHost): the proxy batches the staging copies of a round
// (proxy.BatchStager). Calls come from one goroutine at a time (the
// proxy's).
type AsyncToHost interface {
	ToHostAsync(dst unsafe.Pointer, src Ptr, n int64) error
	SyncToHost() error
}

// MappedMem is host memory mapped into the device (HostMapper).
type MappedMem struct {
	Host unsafe.Pointer
	Dev  Ptr
	Size int64
}

// PeerWord is a peer's 8-byte word mapped here, with the peer's physical
// rank (for error messages).
type PeerWord struct {
	Peer int
	Word Ptr
}

// Copy is a copy of N bytes from Src to Dst.
type Copy struct {
	Dst, Src Ptr
	N        int64
}

var (
	regMu    sync.RWMutex
	backends = map[string]func() (Backend, error){}
)

// Register makes a backend available under name. It is called from the
// backend package's init; registering a name twice panics (a programming
// error).
func Register(name string, open func() (Backend, error)) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := backends[name]; dup {
		panic("device: backend " + name + " registered twice")
	}
	backends[name] = open
}

// Open returns the backend registered under name. Errors: a name that no
// linked-in package registered (the CUDA backend registers when a program
// imports github.com/theseus-ccl/theseus/cuda), or the backend's own
// failure to start.
func Open(name string) (Backend, error) {
	regMu.RLock()
	open, ok := backends[name]
	regMu.RUnlock()
	if !ok {
		hint := ""
		if name == "cuda" {
			hint = ": a program uses CUDA when it imports github.com/theseus-ccl/theseus/cuda; without a GPU choose the host backend (Config.Backend \"host\", or THESEUS_BACKEND=host)"
		}
		return nil, fmt.Errorf("device: no backend %q in this program (have %v)%s", name, Names(), hint)
	}
	return open()
}

var onDevice = map[string]func(dev int) (Backend, error){}

// RegisterOnDevice registers, for a backend of several devices (CUDA), how
// to open the process's backend on device ordinal dev. Called from the
// backend package's init, after Register.
func RegisterOnDevice(name string, open func(dev int) (Backend, error)) {
	regMu.Lock()
	defer regMu.Unlock()
	onDevice[name] = open
}

// OpenOnDevice returns the backend registered under name, bound to device
// ordinal dev, for a process that chooses its device itself
// (theseus-bench's --device, LOCAL_RANK) rather than through the calling
// thread's current device. Backends of one device (host) ignore dev.
// Errors: Open's, and for CUDA a process whose backend already runs on
// another device (one device per process).
func OpenOnDevice(name string, dev int) (Backend, error) {
	regMu.RLock()
	open, ok := onDevice[name]
	regMu.RUnlock()
	if !ok {
		return Open(name)
	}
	return open(dev)
}

// Names lists the registered backends, sorted.
func Names() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]string, 0, len(backends))
	for n := range backends {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
