package launch

import (
	"errors"
	"fmt"
)

// The point-to-point engine's contract (docs/p2p.md): the memory of a
// connection between two ranks, the records the two ends write into each
// other's memory, and how a transfer is cut into chunks and spread over
// channels, as the host backend (runtime/host) and the CUDA kernel
// (cuda/kernel/p2p.cuh) both run them. The kernel's copy of these numbers
// is cuda/kernel/launch.h (a test in package cuda keeps the two equal).
//
// A connection joins an ordered pair of ranks {me, peer}: each rank
// allocates one block for it (P2PGeometry.ConnBytes), exports it to the
// peer and maps the peer's. Within this rank's block:
//
//   - the lane state (P2PGeometry.LaneState): per channel, this rank's own
//     counters as sender to the peer (chunks written, transfers done) and as
//     receiver from it (chunks consumed, transfers done), persistent across
//     launches (and across CUDA graph replays), written only by this rank;
//   - the send side (Post, Credit), written by the peer as receiver: the
//     post of the peer's current receive on each channel (where its buffer
//     is, for a zero-copy write) and the count of chunks it has consumed;
//   - the receive side (Header, Data), written by the peer as sender: a FIFO
//     of Slots slots of ChunkBytes bytes per channel, each with a 64-byte
//     header.
//
// Every record is published by a release store of its first word after its
// other words (and, for a header, after its slot's data); the reader
// acquires the first word, then reads the rest.

// P2PGeometry is the FIFO geometry of a connection: both ends of a pair
// must use the same (it decides where each record lies in the other's
// block), so it comes from the communicator's agreed selection snapshot
// (docs/p2p.md, "Parameters").
type P2PGeometry struct {
	// ChunkBytes is the size of one FIFO slot's data, a multiple of
	// P2PChunkAlign in [P2PMinChunk, P2PMaxChunk].
	ChunkBytes int64
	// Slots is the FIFO depth per channel, 1..P2PMaxSlots.
	Slots int
	// Channels is the number of parallel lanes per direction and pair,
	// 1..P2PMaxChannels.
	Channels int
}

// Geometry limits.
const (
	P2PChunkAlign  = 256
	P2PMinChunk    = 1 << 10
	P2PMaxChunk    = 64 << 20
	P2PMaxSlots    = 64
	P2PMaxChannels = 32
	// P2PLine is the size of every record (lane state, post, credit,
	// header): one 64-byte line each, so no two writers share a line.
	P2PLine = 64
)

// Check reports a geometry outside the limits.
func (g P2PGeometry) Check() error {
	switch {
	case g.ChunkBytes < P2PMinChunk || g.ChunkBytes > P2PMaxChunk || g.ChunkBytes%P2PChunkAlign != 0:
		return fmt.Errorf("chunk_bytes %d: want a multiple of %d in [%d, %d]", g.ChunkBytes, P2PChunkAlign, P2PMinChunk, P2PMaxChunk)
	case g.Slots < 1 || g.Slots > P2PMaxSlots:
		return fmt.Errorf("slots %d: want 1..%d", g.Slots, P2PMaxSlots)
	case g.Channels < 1 || g.Channels > P2PMaxChannels:
		return fmt.Errorf("channels %d: want 1..%d", g.Channels, P2PMaxChannels)
	}
	return nil
}

func (g P2PGeometry) String() string {
	return fmt.Sprintf("chunk_bytes %d, slots %d, channels %d", g.ChunkBytes, g.Slots, g.Channels)
}

// The byte offsets of the regions of a connection block.
func (g P2PGeometry) sendOff() int64 { return int64(2*g.Channels) * P2PLine }
func (g P2PGeometry) hdrOff() int64  { return g.sendOff() + int64(2*g.Channels)*P2PLine }
func (g P2PGeometry) dataOff() int64 {
	return (g.hdrOff() + int64(g.Channels*g.Slots)*P2PLine + P2PChunkAlign - 1) / P2PChunkAlign * P2PChunkAlign
}

// ConnBytes is the size of one connection block (a valid geometry).
func (g P2PGeometry) ConnBytes() int64 {
	return g.dataOff() + int64(g.Channels*g.Slots)*g.ChunkBytes
}

// LaneState is the offset of this rank's state line of channel ch as
// sender (recv false) or receiver (recv true): word P2PStateChunks, then
// word P2PStateTransfers.
func (g P2PGeometry) LaneState(ch int, recv bool) int64 {
	d := int64(0)
	if recv {
		d = 1
	}
	return (2*int64(ch) + d) * P2PLine
}

// Post is the offset of the post line of channel ch (written by the peer
// as receiver, read by this rank as sender).
func (g P2PGeometry) Post(ch int) int64 { return g.sendOff() + 2*int64(ch)*P2PLine }

// Credit is the offset of the credit word of channel ch: the chunks the
// peer, as receiver, has consumed from this rank's FIFO in its block.
func (g P2PGeometry) Credit(ch int) int64 { return g.Post(ch) + P2PLine }

// Header is the offset of the header of slot s of channel ch (written by
// the peer as sender).
func (g P2PGeometry) Header(ch, s int) int64 { return g.hdrOff() + int64(ch*g.Slots+s)*P2PLine }

// Data is the offset of the data of slot s of channel ch.
func (g P2PGeometry) Data(ch, s int) int64 { return g.dataOff() + int64(ch*g.Slots+s)*g.ChunkBytes }

// Word indices of the lane state line.
const (
	P2PStateChunks    = 0 // FIFO slots written (sender) or consumed (receiver) on the channel
	P2PStateTransfers = 1 // transfers of the pair done on the channel
	// P2PStateArrived (receiver's line, connections across nodes only):
	// the chunks the sender has published on the channel, incremented by
	// its signals through the proxy (device.P2PPort).
	P2PStateArrived = 2
)

// Word indices of a header (8-byte words of its 64-byte line).
const (
	P2PHdrFlag  = 0 // the slot's sequence number on the channel, 1-based: chunks written before it + 1
	P2PHdrTSeq  = 1 // the transfer's number on the pair, 1-based
	P2PHdrTotal = 2 // the transfer's bytes
	P2PHdrOff   = 3 // DATA: the chunk's byte offset in the transfer
	P2PHdrLen   = 4 // DATA: the bytes in the slot; DIRECT: the bytes the channel wrote directly
	P2PHdrKind  = 5 // kind (low 32 bits) | datatype << 32
	P2PHdrWant  = 6 // ERROR: the total the receiver posted
	P2PHdrWantT = 7 // ERROR: the receiver's datatype
)

// Word indices of a post.
const (
	P2PPostTSeq  = 0 // the receive's transfer number on the pair, 1-based (written last)
	P2PPostTotal = 1 // the bytes this receive expects
	P2PPostType  = 2 // its datatype (ir.DataType), | P2PPostError << 32 for an error post
	P2PPostAddr  = 3 // the receive buffer's address, in the receiver's address space
	P2PPostGen   = 4 // the id under which the allocation holding it was offered to the sender (0: none)
)

// Header kinds.
const (
	P2PKindData   = 1 // the slot holds a chunk of the transfer
	P2PKindDirect = 2 // the sender wrote the channel's share of the transfer into the posted buffer
	P2PKindError  = 3 // the sender found the post did not match its send: the receive fails too
	P2PKindAbort  = 4 // the sender's launch failed: the receive fails too (at once, not at its timeout)
)

// P2PPostError marks a post whose receive found a mismatch (high half of
// word P2PPostType): the send fails too. P2PPostAbort marks the post of a
// receiver whose launch failed, with transfer number P2PAbortSeq (it
// matches every send): the sender fails at once.
const (
	P2PPostError = 1
	P2PPostAbort = 2
	P2PAbortSeq  = 1<<63 - 1
)

// Chunks is the number of chunks of a transfer of total bytes.
func (g P2PGeometry) Chunks(total int64) int64 {
	return (total + g.ChunkBytes - 1) / g.ChunkBytes
}

// Used is the number of channels a transfer of total bytes uses: one
// per chunk up to Channels (0 for an empty transfer, which sends nothing).
// Chunk j goes to channel j mod Used; both ends compute the same from
// the transfer's bytes, which must agree (NCCL 2.25 semantics).
func (g P2PGeometry) Used(total int64) int {
	return int(min(int64(g.Channels), g.Chunks(total)))
}

// Share is the bytes channel ch carries of a transfer of total bytes
// (its chunks ch, ch+used, ...).
func (g P2PGeometry) Share(total int64, ch int) int64 {
	used := int64(g.Used(total))
	if int64(ch) >= used {
		return 0
	}
	n := g.Chunks(total)
	mine := (n - int64(ch) + used - 1) / used // chunks ch, ch+used, ... below n
	b := mine * g.ChunkBytes
	if last := n - 1; last%used == int64(ch) {
		b -= n*g.ChunkBytes - total // the last chunk is short
	}
	return b
}

// P2PRound is the round in which a rank processes its transfers with peer:
// (peer - rank) mod n for sends, (rank - peer) mod n for receives, so that
// both ends of a pair take it up in the same round. Every lane takes its
// peers in round order, which keeps a launch deadlock-free whatever the
// pattern (docs/p2p.md, "Rounds").
func P2PRound(rank, peer, n int, recv bool) int {
	if recv {
		return ((rank-peer)%n + n) % n
	}
	return ((peer-rank)%n + n) % n
}

// ErrP2PMismatch is wrapped by the error of a send and its receive that
// disagree on bytes or datatype (NCCL 2.25: they must agree), or that were
// matched out of order.
var ErrP2PMismatch = errors.New("a send and its receive disagree")

// ErrP2PAborted is wrapped by the error of a transfer whose peer's launch
// failed (the peer reports the cause).
var ErrP2PAborted = fmt.Errorf("%w: the peer's launch failed", ErrAborted)

// ErrP2PMatrix is wrapped by the error of an AlltoAllv launch whose GPU
// counts matrix exceeds the capacity its CPU matrix planned, or differs from
// it in checking mode (THESEUS_ALLTOALLV_CHECK).
var ErrP2PMatrix = errors.New("the GPU counts matrix does not fit the CPU matrix's plan")
