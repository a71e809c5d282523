package device

import (
	"errors"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// P2PPreparer is implemented by backends that run the point-to-point
// engine (docs/p2p.md): the host backend and the CUDA backend. PrepareP2P
// turns one rank's launch of the engine into the backend's launch state, as
// Prepare does for an op table; the state is launched on a Stream like any
// other (Stream.Launch, CaptureLauncher.CaptureLaunch), with a launch
// counter the engine ignores and never fenced. The same rules as Prepare's
// apply (the Args must not change afterwards; it may run during a CUDA
// graph capture).
type P2PPreparer interface {
	PrepareP2P(a *P2PArgs) (Prepared, error)
}

// P2PRebaser is implemented by point-to-point backends whose prepared
// launches move to other buffers without preparing again (as Rebaser's do
// for op tables): the same call shape at other buffers, as nccl-tests
// moves its buffers every iteration. RebaseP2P returns p's launch (of
// PrepareP2P or RebaseP2P, of this backend) with every send-side buffer
// (the transfers to peers, the self copies' sources) moved by send bytes
// and every receive-side buffer (the receives from peers, the self copies'
// destinations) by recv bytes; nothing else changes (the counts, the
// offer ids the receives post, the connections and imports). It allocates
// and uploads nothing and shares p's resources: Release of the result
// releases nothing of p's, and p must be released only after every launch
// of both. Launches of p and of its rebased launches must not run
// concurrently (one rank's launches run in order). Errors: ErrNotRebasable
// when this launch cannot be moved (the caller prepares the call instead),
// or a p of another backend.
type P2PRebaser interface {
	RebaseP2P(p Prepared, send, recv int64) (Prepared, error)
}

// ErrNotRebasable is RebaseP2P's answer for a launch that cannot be moved
// to other buffers (for example, on CUDA, a kernel module whose engine
// does not read the launch's buffer offsets).
var ErrNotRebasable = errors.New("device: this point-to-point launch cannot be rebased")

// P2PArgs is one rank's launch of the point-to-point engine: the transfers
// of one group of ncclSend/ncclRecv calls (or of one ncclAlltoAllv), with
// the connections they use. The executor builds it (runtime/executor,
// p2p.go).
type P2PArgs struct {
	// Rank is this rank, NRanks the communicator size.
	Rank, NRanks int
	// Geometry is the connections' FIFO geometry (the same at both ends of
	// every pair).
	Geometry launch.P2PGeometry
	// EagerBytes: a transfer of at most this many bytes goes through the
	// FIFO at once, without waiting for the receiver's post.
	EagerBytes int64
	// Direct lets a larger transfer be written straight into the posted
	// receive buffer when this rank has imported its allocation (Imports).
	Direct bool
	// Threads is the threads per threadblock (CUDA; 0: the backend's
	// choice, by the largest transfer: docs/p2p.md, "Threads").
	Threads int
	// LocalRanks is the number of ranks on this rank's node (0: unknown,
	// taken as NRanks): the CUDA backend assumes that many launches like
	// this one may share the GPU when it checks that its threadblocks are
	// resident together.
	LocalRanks int
	// DeviceRanks is the number of ranks whose launches share this rank's
	// GPU, as the communicator counted them (same machine and device,
	// whatever their MSCCLPP_HOSTID: simulated nodes on one GPU share it);
	// 0: unknown, LocalRanks is used. The CUDA backend's residency check
	// takes it in place of LocalRanks.
	DeviceRanks int
	// Sends are the peers this launch sends to, Recvs those it receives
	// from, each in round order (launch.P2PRound); every peer appears at
	// most once per list, with its transfers in call order.
	Sends, Recvs []P2PPeer
	// Self are this rank's sends to itself, each matched with its receive
	// from itself in order: local copies (Dst may equal Src: in-place gather
	// and scatter).
	Self []P2PCopy
	// Matrix, when set, is an ncclAlltoAllv: every peer's one send and one
	// receive (and the self copy) take their bytes and offsets from the
	// counts matrix at launch time (the transfers' Matrix flag).
	Matrix *P2PMatrix
	// Abort is the communicator's abort word (8 bytes): nonzero stops every
	// wait; a failing launch sets it.
	Abort Ptr
	// Timeout bounds every wait on a peer (THESEUS_TIMEOUT).
	Timeout time.Duration
}

// P2PPeer is one peer of a launch, in one direction.
type P2PPeer struct {
	Peer int
	// Local is this rank's connection block for the peer; Remote the
	// peer's block for this rank, mapped here.
	Local, Remote Mem
	// Xfers are the transfers with the peer in this direction, in order.
	Xfers []P2PXfer
	// Imports (sends only) are the peer's allocations this rank has
	// imported: a post naming one of them lets a transfer be written
	// directly.
	Imports []P2PImport
	// Port, for a peer on another node, is the port-channel connection
	// that carries this rank's writes into the peer's block: Remote is
	// then this rank's own copy of that block (P2PPort), never a mapping
	// of the peer's memory (docs/p2p.md, "Across nodes").
	Port *P2PPort
}

// P2PPort is a point-to-point connection across nodes: the records and
// chunks this rank writes into the peer's block are written into the
// peer's block's copy here (P2PPeer.Remote, region Src of every lane's
// connection) and put from it into the peer's block (the peer's region
// Dst) through the proxy; channel ch goes through lane ch mod len(Lanes)
// (Lane), so that the channels spread over the rank's proxies. Publications
// become signals: a header is put, then a signal on Arrive[ch] increments
// the receiver's arrival word of channel ch (launch.P2PStateArrived of its
// lane state as receiver, which its receive waits on instead of the
// header's flag); a credit is a signal on Credit[ch], which increments the
// sender's credit word of channel ch. Arrive[ch] and Credit[ch] are
// channels of lane ch mod len(Lanes). Posts are not written across nodes
// (the sender never writes directly into the receiver's buffer there),
// except error and abort posts, which are put and flushed.
type P2PPort struct {
	// Lanes are the connections with the peer, one per proxy of the rank
	// (at least one), each region registered on all of them under the same
	// id.
	Lanes    []P2PLane
	Src, Dst uint16
	// Arrive and Credit are the proxy channels of each channel of the
	// connection (Geometry.Channels entries each).
	Arrive, Credit []uint16
}

// P2PLane is one proxy connection of a P2PPort.
type P2PLane struct {
	Conn PortConn
	// Head is the FIFO's ticket counter for device producers (8 bytes of
	// device memory, zero at creation; 0 on a backend without a
	// HostMapper, whose engine posts through Conn). On such a backend
	// (CUDA) the connection's own block (P2PPeer.Local) is pinned host
	// memory mapped into the device, which the peer's puts and signals
	// land in, and only the kernel posts to the FIFO (port.h: one ticket
	// counter per FIFO).
	Head Ptr
}

// Lane is the connection that carries channel ch (ch mod len(Lanes)).
func (p *P2PPort) Lane(ch int) PortConn { return p.Lanes[ch%len(p.Lanes)].Conn }

// Err is the first failure of a lane's connection, nil while every lane
// works.
func (p *P2PPort) Err() error {
	for _, l := range p.Lanes {
		if err := l.Conn.Err(); err != nil {
			return err
		}
	}
	return nil
}

// P2PXfer is one send (Buf is the source) or receive (Buf the
// destination): Bytes bytes of DataType. Offer is, for a receive, the id
// under which the allocation holding Buf was offered to the peer (0: not
// offered), which the receive posts so that a sender that imported that
// offer can write directly. Matrix: Bytes and the offset from
// Buf come from the launch's counts matrix (P2PArgs.Matrix).
type P2PXfer struct {
	Buf      Ptr
	Bytes    int64
	DataType ir.DataType
	Offer    uint64
	Matrix   bool
}

// P2PCopy is a self transfer: Bytes bytes from Src to Dst.
type P2PCopy struct {
	Dst, Src Ptr
	Bytes    int64
	Matrix   bool
}

// P2PImport is a peer's allocation (the id the peer offered it under, its
// base and size in the peer's address space) mapped here at Local.
type P2PImport struct {
	ID       uint64
	PeerBase Ptr
	Size     int64
	Local    Ptr
}

// P2PMatrix is an ncclAlltoAllv's matrix as a launch reads it (NCCL's
// seed extension: counts in elements, row = sender, column = receiver).
type P2PMatrix struct {
	// Counts is the GPU copy (NRanks x NRanks 64-bit counts) the launch
	// reads: this rank's row and column.
	Counts Ptr
	// Check, when set, is a device copy of the CPU matrix the launch
	// compares the GPU copy with (THESEUS_ALLTOALLV_CHECK), failing on
	// the first difference.
	Check Ptr
	// SendCap and RecvCap are the bytes this rank sends and receives by the
	// CPU matrix: the launch fails, writing nothing, if the GPU copy's row
	// or column adds up to more.
	SendCap, RecvCap int64
	// ElemSize is the datatype's size in bytes.
	ElemSize int64
	// MaxBytes is the largest cell of this rank's row and column by the
	// CPU matrix, in bytes (the launch's largest transfer as planned: the
	// CUDA backend's threads per threadblock follow it).
	MaxBytes int64
}
