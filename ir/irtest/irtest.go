// Package irtest builds ir.Programs for tests: a small fluent builder
// (New, Builder.Rank, RankBuilder.TB, TBBuilder op methods) and ready-made
// reference programs (RingAllReduce, PairsAllReducePrimitive, AllGatherRing)
// that the verifier, legaliser and interpreter tests share as fixtures.
//
// Builders panic on misuse (a rank index out of range, a Deps/Publish call
// before any op): they are for tests, whose programs are written by hand.
// They never check semantics; that is the verifier's job, so a test can build
// a deliberately broken program.
//
// CmpOpts compares programs with go-cmp, ignoring source positions.
//
// Simulate runs a program of either level symbolically (values are
// multisets of (launch, slice, rank, input chunk) contributions) over
// several slices and launches under a chosen interleaving, and checks the
// collective's postcondition (docs/design/ir.md §6): the test oracle that
// the importer, legaliser and generator tests share.
package irtest

import (
	"fmt"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
)

// CmpOpts are the go-cmp options for comparing ir.Programs structurally:
// every ir.Pos and Program.File are ignored (they say where a program came
// from, not what it is), and nil and empty slices and maps are equal.
//
//	if d := cmp.Diff(want, got, irtest.CmpOpts...); d != "" { t.Errorf(...) }
var CmpOpts = []cmp.Option{
	cmpopts.IgnoreTypes(ir.Pos{}),
	cmpopts.IgnoreFields(ir.Program{}, "File"),
	cmpopts.EquateEmpty(),
}

// Diff returns a go-cmp diff of two programs under CmpOpts ("" when equal).
func Diff(want, got *ir.Program) string { return cmp.Diff(want, got, CmpOpts...) }

// Builder builds one program. The zero value is not usable; call New.
type Builder struct {
	p *ir.Program
}

// New starts a program for collective coll on nranks ranks with
// chunksPerBlock chunks per block. It has nranks empty ranks (all buffer
// sizes 0, meaning "as the collective defines"), name "test", the Simple
// protocol, out-of-place support only, Root 0 for rooted collectives and -1
// otherwise, and no size window.
func New(coll ir.Collective, nranks int, chunksPerBlock int64) *Builder {
	if nranks < 0 || nranks > ir.MaxRanks {
		panic(fmt.Sprintf("irtest.New: nranks %d out of range", nranks))
	}
	root := -1
	if coll.Rooted() {
		root = 0
	}
	return &Builder{p: &ir.Program{
		Name:           "test",
		Collective:     coll,
		NRanks:         nranks,
		Root:           root,
		Protocol:       ir.Simple,
		ChunksPerBlock: chunksPerBlock,
		OutOfPlace:     true,
		Ranks:          make([]ir.Rank, nranks),
	}}
}

// Name sets Program.Name.
func (b *Builder) Name(s string) *Builder { b.p.Name = s; return b }

// Protocol sets Program.Protocol.
func (b *Builder) Protocol(p ir.Protocol) *Builder { b.p.Protocol = p; return b }

// Root sets Program.Root.
func (b *Builder) Root(r int) *Builder { b.p.Root = r; return b }

// NLocalRanks sets Program.NLocalRanks (ranks per node; 0 = any).
func (b *Builder) NLocalRanks(n int) *Builder { b.p.NLocalRanks = n; return b }

// Arrangements sets which buffer arrangements the program supports.
func (b *Builder) Arrangements(inPlace, outOfPlace bool) *Builder {
	b.p.InPlace, b.p.OutOfPlace = inPlace, outOfPlace
	return b
}

// Window sets the message-size window in bytes (max 0 = unlimited).
func (b *Builder) Window(minBytes, maxBytes int64) *Builder {
	b.p.MinBytes, b.p.MaxBytes = minBytes, maxBytes
	return b
}

// Threads sets Program.NumThreads (threads per threadblock; 0 = default).
func (b *Builder) Threads(n int) *Builder { b.p.NumThreads = n; return b }

// SliceBytes sets Program.SliceBytes (bytes; 0 = runtime default).
func (b *Builder) SliceBytes(n int64) *Builder { b.p.SliceBytes = n; return b }

// Meta sets one Program.Meta entry.
func (b *Builder) Meta(key, value string) *Builder {
	if b.p.Meta == nil {
		b.p.Meta = map[string]string{}
	}
	b.p.Meta[key] = value
	return b
}

// Program returns the program built so far (not a copy: later builder calls
// keep changing it).
func (b *Builder) Program() *ir.Program { return b.p }

// Build returns a deep copy of the program built so far.
func (b *Builder) Build() *ir.Program { return b.p.Clone() }

// Rank returns a builder for rank r (0 <= r < nranks).
func (b *Builder) Rank(r int) *RankBuilder {
	if r < 0 || r >= len(b.p.Ranks) {
		panic(fmt.Sprintf("irtest: rank %d out of range [0,%d)", r, len(b.p.Ranks)))
	}
	return &RankBuilder{b: b, r: r}
}

// Connect declares a paired channel between ranks a and b (one new end on
// each, each naming the other through Peer/PeerChannel) with the given
// transport and initial semaphore values (initA for a's end, initB for b's
// end). It returns the channel index on a and on b.
func (b *Builder) Connect(a, c int, typ ir.ChannelType, initA, initC int64) (chanA, chanC int) {
	ra, rc := b.Rank(a).rank(), b.Rank(c).rank()
	chanA = len(ra.Channels)
	chanC = len(rc.Channels)
	if a == c {
		chanC = chanA + 1
	}
	ra.Channels = append(ra.Channels, ir.Channel{Peer: c, PeerChannel: chanC, Type: typ, Init: initA})
	rc = b.Rank(c).rank()
	rc.Channels = append(rc.Channels, ir.Channel{Peer: a, PeerChannel: chanA, Type: typ, Init: initC})
	return chanA, chanC
}

// RankBuilder edits one rank.
type RankBuilder struct {
	b *Builder
	r int
}

func (rb *RankBuilder) rank() *ir.Rank { return &rb.b.p.Ranks[rb.r] }

// Chunks sets the declared input, output and scratch sizes in chunks.
func (rb *RankBuilder) Chunks(input, output, scratch int64) *RankBuilder {
	rb.rank().Chunks = [ir.NumBufKinds]int64{input, output, scratch}
	return rb
}

// Channel appends one channel end as given (no pairing is done; see
// Builder.Connect) and returns its index.
func (rb *RankBuilder) Channel(c ir.Channel) int {
	r := rb.rank()
	r.Channels = append(r.Channels, c)
	return len(r.Channels) - 1
}

// TB appends a threadblock with the given transfer peers and channel (-1
// for none) and returns a builder for it.
func (rb *RankBuilder) TB(sendPeer, recvPeer, ch int) *TBBuilder {
	r := rb.rank()
	r.TBs = append(r.TBs, ir.Threadblock{SendPeer: sendPeer, RecvPeer: recvPeer, Chan: ch})
	return &TBBuilder{b: rb.b, r: rb.r, t: len(r.TBs) - 1}
}

// PrimTB appends a threadblock with no transfer peers or channel (a
// primitive-level threadblock) and returns a builder for it.
func (rb *RankBuilder) PrimTB() *TBBuilder { return rb.TB(-1, -1, -1) }

// TBBuilder appends ops to one threadblock. Every op method returns the
// same builder; Deps and Publish modify the op appended last.
type TBBuilder struct {
	b    *Builder
	r, t int
}

func (tb *TBBuilder) tb() *ir.Threadblock { return &tb.b.p.Ranks[tb.r].TBs[tb.t] }

// Index is the threadblock's id within its rank.
func (tb *TBBuilder) Index() int { return tb.t }

// Len is the number of ops appended so far (the step index of the next op).
func (tb *TBBuilder) Len() int { return len(tb.tb().Ops) }

// Op appends op as given.
func (tb *TBBuilder) Op(op ir.Op) *TBBuilder {
	t := tb.tb()
	t.Ops = append(t.Ops, op)
	return tb
}

func (tb *TBBuilder) last() *ir.Op {
	t := tb.tb()
	if len(t.Ops) == 0 {
		panic("irtest: Deps/Publish before any op")
	}
	return &t.Ops[len(t.Ops)-1]
}

// Deps adds dependencies (threadblock, step) to the last op.
func (tb *TBBuilder) Deps(deps ...ir.Dep) *TBBuilder {
	op := tb.last()
	op.Deps = append(op.Deps, deps...)
	return tb
}

// Dep adds one dependency on step step of threadblock t to the last op.
func (tb *TBBuilder) Dep(t, step int) *TBBuilder { return tb.Deps(ir.Dep{TB: t, Step: step}) }

// Publish marks the last op as publishing its completion (MSCCL hasdep).
func (tb *TBBuilder) Publish() *TBBuilder { tb.last().Publish = true; return tb }

func refs(rs ...ir.Ref) []ir.Ref {
	if len(rs) == 0 {
		return nil
	}
	return append([]ir.Ref(nil), rs...)
}

// Nop appends a nop.
func (tb *TBBuilder) Nop() *TBBuilder { return tb.Op(ir.Op{Code: ir.OpNop}) }

// Copy appends copy src -> dsts of count chunks.
func (tb *TBBuilder) Copy(count int64, src ir.Ref, dsts ...ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpCopy, Srcs: refs(src), Dsts: refs(dsts...), Count: count})
}

// Reduce appends reduce srcs -> dsts of count chunks (srcs combined left to
// right).
func (tb *TBBuilder) Reduce(count int64, srcs []ir.Ref, dsts ...ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpReduce, Srcs: refs(srcs...), Dsts: refs(dsts...), Count: count})
}

// Send appends send src (count chunks) to the threadblock's SendPeer.
func (tb *TBBuilder) Send(count int64, src ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpSend, Srcs: refs(src), Count: count})
}

// Recv appends recv into dst (count chunks) from the threadblock's RecvPeer.
func (tb *TBBuilder) Recv(count int64, dst ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpRecv, Dsts: refs(dst), Count: count})
}

// RCS appends rcs dst: receive into dst and send the data on.
func (tb *TBBuilder) RCS(count int64, dst ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpRecvCopySend, Dsts: refs(dst), Count: count})
}

// RRS appends rrs src: receive x and send src ⊕ x on.
func (tb *TBBuilder) RRS(count int64, src ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpRecvReduceSend, Srcs: refs(src), Count: count})
}

// RRC appends rrc src -> dst: receive x, dst = src ⊕ x.
func (tb *TBBuilder) RRC(count int64, src, dst ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpRecvReduceCopy, Srcs: refs(src), Dsts: refs(dst), Count: count})
}

// RRCS appends rrcs src -> dst: receive x, dst = src ⊕ x, and send it on.
func (tb *TBBuilder) RRCS(count int64, src, dst ir.Ref) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpRecvReduceCopySend, Srcs: refs(src), Dsts: refs(dst), Count: count})
}

// Signal appends signal on this rank's channels chans.
func (tb *TBBuilder) Signal(chans ...int) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpSignal, Chans: append([]int(nil), chans...)})
}

// Wait appends wait on this rank's channels chans.
func (tb *TBBuilder) Wait(chans ...int) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpWait, Chans: append([]int(nil), chans...)})
}

// Flush appends flush on this rank's channels chans.
func (tb *TBBuilder) Flush(chans ...int) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpFlush, Chans: append([]int(nil), chans...)})
}

// Barrier appends barrier id among n threadblocks of this rank.
func (tb *TBBuilder) Barrier(id, n int) *TBBuilder {
	return tb.Op(ir.Op{Code: ir.OpBarrier, Barrier: id, BarrierTBs: n})
}

// I is a local ref to input chunk off.
func I(off int64) ir.Ref { return ir.Ref{Buf: ir.Input, Off: off, Chan: -1} }

// O is a local ref to output chunk off.
func O(off int64) ir.Ref { return ir.Ref{Buf: ir.Output, Off: off, Chan: -1} }

// S is a local ref to scratch chunk off.
func S(off int64) ir.Ref { return ir.Ref{Buf: ir.Scratch, Off: off, Chan: -1} }

// Remote returns r addressed to the peer at the other end of this rank's
// channel ch.
func Remote(r ir.Ref, ch int) ir.Ref { r.Chan = ch; return r }

// Packet returns r in the LL packet layout.
func Packet(r ir.Ref) ir.Ref { r.Packet = true; return r }
