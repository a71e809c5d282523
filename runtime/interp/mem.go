package interp

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// Buffers are one rank's input, output and scratch as byte slices. Input
// and Output are the NCCL send and receive buffers (in place they overlap
// as ir.md §3 says: see NewBuffers); a buffer the collective does not give
// the rank may be nil. Scratch must start on a 16-byte boundary (LL packets
// are accessed as aligned words). The slices may come from mmap'd shared
// memory.
type Buffers struct {
	Input, Output, Scratch []byte
}

// End is the memory of one channel end as the rank that owns it sees it.
// The words are accessed with sync/atomic only, so they may live in shared
// memory (8-byte aligned).
type End struct {
	// Inbound is this end's inbound semaphore: the peer's signals add to it,
	// this end's waits read it. Shared with the peer. Initialise it to the
	// end's Init once, before the first launch (InitEnds).
	Inbound *uint64
	// PeerInbound is the other end's inbound semaphore: this end's signals
	// add 1 to it.
	PeerInbound *uint64
	// Expected is this end's expected counter (waits so far); private to the
	// rank. Start it at 0.
	Expected *uint64
	// Peer is the peer's buffers as mapped in this process: remote refs
	// through this end read and write them. Buffers the table never reaches
	// through this end may be nil.
	Peer Buffers
	// Port, when set, makes this a port channel to a peer on another node
	// (docs/transport.md): nothing of the peer is mapped here (Peer and
	// PeerInbound are unused), remote refs through the end are puts the
	// proxy executes, signals and flushes go through the proxy, and the
	// peer's signals reach Inbound through it.
	Port *PortEnd
}

// RankMem is everything one rank's launch touches. Semaphores and
// dependency counters persist across launches: keep the same words for
// every launch of a communicator (each launch balances, so they are never
// reset).
type RankMem struct {
	Buffers
	// Ends has one entry per channel end of the table (index = channel).
	Ends []End
	// Publish holds one dependency counter per threadblock (private to the
	// rank; at least len(t.TBs) words). Nil: fresh counters for this launch.
	Publish []uint64
	// Abort, when set, is an abort word shared by the ranks: a nonzero value
	// stops every wait with ErrAborted, and a failing rank stores 1 in it.
	Abort *uint64
	// Trace, when set, is told when each op of each threadblock ran, and
	// when each threadblock started and finished (tracing: the host
	// backend's device.OpTrace).
	Trace OpRecorder
}

// OpRecorder receives the times (host wall clock, Unix ns) of a launch's
// ops (RankMem.Trace): RecordOp for op step of threadblock tb in slice
// slice, from its start (before its dependency waits) to its end; step -1
// for the threadblock's whole run. Called from the threadblocks'
// goroutines concurrently.
type OpRecorder interface {
	RecordOp(launch uint64, tb, step int, slice int64, op ir.Opcode, begin, end int64)
}

// InitEnds sets the inbound semaphores of t's channel ends to their Init
// values and the expected counters to 0: once per communicator and
// schedule, before the first launch, while no peer signals.
func InitEnds(t *optable.Table, ends []End) error {
	if len(ends) < len(t.Channels) {
		return fmt.Errorf("interp: %d channel ends for %d channels", len(ends), len(t.Channels))
	}
	for c, ch := range t.Channels {
		if ends[c].Inbound == nil || ends[c].Expected == nil {
			return fmt.Errorf("interp: channel %d: nil semaphore word", c)
		}
		atomic.StoreUint64(ends[c].Inbound, uint64(ch.Init))
		atomic.StoreUint64(ends[c].Expected, 0)
	}
	return nil
}

// Words views an 8-byte-aligned byte slice (for example a piece of an
// mmap'd shared segment) as n 64-bit words for semaphores and counters.
func Words(b []byte, n int) ([]uint64, error) {
	if n < 0 || len(b) < n*8 {
		return nil, fmt.Errorf("interp: %d bytes for %d words", len(b), n)
	}
	if n == 0 {
		return nil, nil
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return nil, errors.New("interp: words must be 8-byte aligned")
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// MaxAllocBytes bounds each buffer NewBuffers allocates (a table can ask
// for any scratch; larger requests are an error, not a crash).
const MaxAllocBytes = 1 << 36

// alloc returns n zero bytes starting on a 64-byte boundary.
func alloc(n int64) []byte {
	if n <= 0 {
		return nil
	}
	w := make([]uint64, (n+127)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
	off := (64 - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64)) % 64
	return b[off : off+int(n) : off+int(n)]
}

// NewBuffers allocates physical rank rank's buffers for req, laid out as
// NCCL lays out a request (ir.md §3): out of place, separate input and
// output; in place, one allocation holding both as
// runtime/launch.InPlaceOffsets arranges them (separate again where the
// rank's buffers do not alias). Scratch is zeroed and 64-byte aligned.
// req.Launch and req.Timeout are ignored.
func NewBuffers(t *optable.Table, rank int, req Request) (Buffers, error) {
	req.Launch = max(req.Launch, 1) // sizes do not depend on it
	g, err := resolve(t, rank, req)
	if err != nil {
		return Buffers{}, err
	}
	s, err := g.Sizes(t, rank)
	if err != nil {
		return Buffers{}, err
	}
	if s.Input > MaxAllocBytes || s.Output > MaxAllocBytes || s.Scratch > MaxAllocBytes {
		return Buffers{}, fmt.Errorf("interp: rank %d needs %d input, %d output and %d scratch bytes, over the %d-byte limit of NewBuffers",
			rank, s.Input, s.Output, s.Scratch, int64(MaxAllocBytes))
	}
	var b Buffers
	b.Scratch = alloc(s.Scratch)
	inOff, outOff, alias := launch.InPlaceOffsets(t.Collective, rank, req.Root, g.Layout.Count*g.ElemSize)
	if !req.InPlace || !alias {
		b.Input, b.Output = alloc(s.Input), alloc(s.Output)
		return b, nil
	}
	one := alloc(max(inOff+s.Input, outOff+s.Output))
	b.Input = one[inOff : inOff+s.Input : inOff+s.Input]
	b.Output = one[outOff : outOff+s.Output : outOff+s.Output]
	return b, nil
}

// World is the memory of every rank of a communicator whose ranks run as
// goroutines of this process (the simulator, tests, CI). Semaphores and
// dependency counters belong to the tables' channel ends and threadblocks
// (logical ranks) and persist across launches; buffers belong to physical
// ranks and are set per request.
type World struct {
	tables []*optable.Table
	// Bufs[p] are physical rank p's buffers; NewBuffers sizes them for a
	// request, or the caller sets them.
	Bufs     []Buffers
	inbound  [][]uint64 // [logical rank][channel]
	expected [][]uint64
	publish  [][]uint64 // [logical rank][tb]
	abort    uint64
}

// NewWorld checks tables (optable.CheckPeers; tables[r] is logical rank
// r's) and creates their semaphores, initialised to each end's Init, and
// dependency counters. Buffers are empty until AllocBuffers or the caller
// sets Bufs.
func NewWorld(tables []*optable.Table) (*World, error) {
	if err := optable.CheckPeers(tables); err != nil {
		return nil, err
	}
	n := len(tables)
	w := &World{tables: tables, Bufs: make([]Buffers, n),
		inbound: make([][]uint64, n), expected: make([][]uint64, n), publish: make([][]uint64, n)}
	for r, t := range tables {
		w.inbound[r] = make([]uint64, len(t.Channels))
		w.expected[r] = make([]uint64, len(t.Channels))
		w.publish[r] = make([]uint64, len(t.TBs))
		for c, ch := range t.Channels {
			w.inbound[r][c] = uint64(ch.Init)
		}
	}
	return w, nil
}

// AllocBuffers replaces every rank's buffers with NewBuffers for req.
func (w *World) AllocBuffers(req Request) error {
	for p := range w.Bufs {
		t := w.tables[w.logical(req, p)]
		b, err := NewBuffers(t, p, req)
		if err != nil {
			return err
		}
		w.Bufs[p] = b
	}
	return nil
}

func (w *World) placement(req Request) ir.Placement {
	return w.tables[0].Placement(req.Root, req.InPlace)
}

func (w *World) logical(req Request, p int) int {
	pl := w.placement(req)
	if pl.Collective.Rooted() && (req.Root < 0 || req.Root >= pl.NRanks) {
		return p
	}
	return pl.Logical(p)
}

// RankMem wires physical rank p's view of the world for req: its buffers,
// and for each channel end of the table it runs, the end's words and the
// peer's buffers.
func (w *World) RankMem(req Request, p int) (*RankMem, error) {
	if p < 0 || p >= len(w.Bufs) {
		return nil, fmt.Errorf("interp: rank %d outside 0..%d", p, len(w.Bufs)-1)
	}
	pl := w.placement(req)
	l := w.logical(req, p)
	t := w.tables[l]
	m := &RankMem{Buffers: w.Bufs[p], Ends: make([]End, len(t.Channels)), Publish: w.publish[l], Abort: &w.abort}
	for c, ch := range t.Channels {
		m.Ends[c] = End{
			Inbound:     &w.inbound[l][c],
			PeerInbound: &w.inbound[ch.Peer][ch.PeerChannel],
			Expected:    &w.expected[l][c],
			Peer:        w.Bufs[pl.Physical(ch.Peer)],
		}
	}
	return m, nil
}
