// Package optable is the per-rank operation table: what the executor
// uploads and what the host interpreter (runtime/interp) and the CUDA
// kernel (cuda/kernel) run. A Table is one rank's part of a primitive-level
// program (docs/design/ir.md), flattened into fixed-size records.
//
// The binary form is documented in docs/optable.md: little-endian, a
// 192-byte header, then six sections (channel ends, threadblocks, ops,
// refs, dependencies, channel lists) of fixed-size records, each section
// starting on a 16-byte boundary. Offsets, counts and chunk offsets are
// 64-bit; there is no cap on ops per threadblock. The format is versioned
// (Version); Decode accepts exactly the versions it knows and validates
// every field. cuda/kernel/optable.h, generated from this package by
// `go generate`, repeats the layout for the kernel with static_asserts.
//
// Lower turns one rank of an ir.Program into a Table, MarshalBinary encodes
// it, Decode decodes and validates it; Decode(MarshalBinary(t)) equals t,
// and MarshalBinary(Decode(b)) equals b for every b that Decode accepts (the
// encoding is canonical).
package optable

import (
	"github.com/theseus-ccl/theseus/ir"
)

// Version is the binary format version this package writes and reads.
const Version = 1

// Magic is the first four bytes of every table, "TSOT" (little-endian
// uint32 0x544f5354).
const Magic uint32 = 0x544f5354

// Record sizes in bytes (docs/optable.md). A test pins them with
// unsafe.Sizeof, and the C header repeats them with static_assert.
const (
	HeaderBytes   = 192
	ChannelBytes  = 32
	TBBytes       = 16
	OpBytes       = 64
	RefBytes      = 16
	DepBytes      = 16
	ChanListBytes = 4 // one int32 per entry; the section is padded to 16 bytes
)

// Table is one rank's operation table, decoded: the header fields of
// docs/optable.md, the rank's channel ends and its threadblocks with their
// ops. Indices are positions (channel c is Channels[c], threadblock t is
// TBs[t], step k is TBs[t].Ops[k]), as in the IR.
type Table struct {
	// Rank is the logical rank this table runs (the program's rank index);
	// NRanks the program's world size, 1..ir.MaxRanks.
	Rank, NRanks int
	Collective   ir.Collective
	Protocol     ir.Protocol
	// Root is the root the program is written for (rooted collectives), or
	// -1 (ir.Program.Root).
	Root int
	// ChunksPerBlock is C: chunks per count-element block, >= 1.
	ChunksPerBlock int64
	// Chunks are this rank's buffer sizes in chunks, indexed by ir.BufKind:
	// input and output as the collective defines them for this logical rank
	// (blocks * C; declared sizes for custom), and the scratch the program
	// declares (after legalisation). Scratch bytes follow from the request's
	// layout (ir.Layout.ScratchBytes).
	Chunks [ir.NumBufKinds]int64
	// MaxScratchChunks is the largest scratch (in chunks) of any rank of the
	// program, the same in every rank's table. LL scratch is two halves of
	// this many chunks on every rank, so the half a launch uses starts at the
	// same byte offset in every rank's scratch and a packet write into a
	// peer's scratch finds the peer's half without knowing its table.
	MaxScratchChunks int64
	// NumThreads is the threads per threadblock the program asks for (0:
	// the executor's default). NLocalRanks is the ranks per node it needs (0:
	// any). SliceBytes caps one chunk's bytes per pipeline slice (0: the
	// runtime's default; Simple only).
	NumThreads  int
	NLocalRanks int
	SliceBytes  int64
	// InPlace and OutOfPlace are the buffer arrangements the program
	// supports (at least one).
	InPlace, OutOfPlace bool
	// FenceLaunches: every launch must wait for the peers' previous launch
	// (the runtime's launch fence), because the verifier found a race that
	// only consecutive launches or slices can have (TS0206) on a Simple
	// program (verify.NeedsLaunchFence; docs/known-issues.md §14).
	FenceLaunches bool
	// SelfFenced: the program is LL and its own packets order the reuse
	// of every scratch half, so repeated launches need no launch fence
	// (verify.SelfFencedLL; docs/executor.md, "Fences"). Never set with
	// FenceLaunches.
	SelfFenced bool
	Channels   []Channel
	TBs        []TB
}

// Channel is one channel end of this rank: the other end is channel
// PeerChannel of logical rank Peer. Its inbound semaphore starts at Init.
type Channel struct {
	Peer        int
	PeerChannel int
	Type        ir.ChannelType
	Init        int64
}

// TB is one threadblock: its ops run in order (and, over S slices, the
// whole list once per slice).
type TB struct {
	Ops []Op
}

// Op is one primitive op (ir.md §5). Code is nop, copy, reduce, signal,
// wait, flush or barrier; which other fields are set follows ir.OpInfo:
// Srcs/Dsts and Count (chunks, >= 1) for copy and reduce, Chans for signal,
// wait and flush, Barrier and BarrierTBs for barrier, and Deps and Publish
// for any op. Unused fields are zero (nil slices).
type Op struct {
	Code       ir.Opcode
	Publish    bool
	Srcs, Dsts []ir.Ref
	Count      int64
	Chans      []int
	Deps       []ir.Dep
	Barrier    int
	BarrierTBs int
}

// Wire codes. The binary format has its own enum values, independent of
// the ir package's internal numbering; the tables below map between them
// and a test pins both.
const (
	WireNop     uint8 = 0
	WireCopy    uint8 = 1
	WireReduce  uint8 = 2
	WireSignal  uint8 = 3
	WireWait    uint8 = 4
	WireFlush   uint8 = 5
	WireBarrier uint8 = 6
)

// Header flags (Header.Flags), op flags and ref flags.
const (
	FlagInPlace    uint32 = 1 << 0 // the program supports in-place requests
	FlagOutOfPlace uint32 = 1 << 1 // the program supports out-of-place requests
	FlagFence      uint32 = 1 << 2 // fence every launch (Table.FenceLaunches)
	FlagSelfFenced uint32 = 1 << 3 // repeated LL launches need no fence (Table.SelfFenced)

	OpFlagPublish uint8 = 1 << 0 // the op publishes its completion (ir.Op.Publish)

	RefFlagRemote uint8 = 1 << 0 // the ref names the peer's buffer through Channel
	RefFlagPacket uint8 = 1 << 1 // the ref uses the LL packet layout (scratch only)
)

// wireOpcodes maps ir opcodes that may appear in a table to wire codes.
var wireOpcodes = map[ir.Opcode]uint8{
	ir.OpNop: WireNop, ir.OpCopy: WireCopy, ir.OpReduce: WireReduce, ir.OpSignal: WireSignal,
	ir.OpWait: WireWait, ir.OpFlush: WireFlush, ir.OpBarrier: WireBarrier,
}

// irOpcodes is the inverse of wireOpcodes, indexed by wire code.
var irOpcodes = [...]ir.Opcode{
	WireNop: ir.OpNop, WireCopy: ir.OpCopy, WireReduce: ir.OpReduce, WireSignal: ir.OpSignal,
	WireWait: ir.OpWait, WireFlush: ir.OpFlush, WireBarrier: ir.OpBarrier,
}

// OpcodeOfWire is the ir opcode of wire code w (the kernel's
// THESEUS_OP_*), and false for a code no table holds.
func OpcodeOfWire(w uint8) (ir.Opcode, bool) {
	if int(w) >= len(irOpcodes) {
		return 0, false
	}
	return irOpcodes[w], true
}

// Wire values of the other enums, in wire order.
var (
	wireCollectives = [...]ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast, ir.Reduce,
		ir.AllToAll, ir.Gather, ir.Scatter, ir.SendRecv, ir.Custom}
	wireProtocols    = [...]ir.Protocol{ir.Simple, ir.LL}
	wireBufKinds     = [...]ir.BufKind{ir.Input, ir.Output, ir.Scratch}
	wireChannelTypes = [...]ir.ChannelType{ir.MemoryChannel, ir.PortChannel}
)

func toWire[T comparable](tab []T, v T) (uint8, bool) {
	for i, x := range tab {
		if x == v {
			return uint8(i), true
		}
	}
	return 0, false
}

func fromWire[T any](tab []T, w uint8) (T, bool) {
	if int(w) < len(tab) {
		return tab[w], true
	}
	var z T
	return z, false
}

// ref returns the i-th ref of the op: sources first, then destinations.
func (op *Op) ref(i int) ir.Ref {
	if i < len(op.Srcs) {
		return op.Srcs[i]
	}
	return op.Dsts[i-len(op.Srcs)]
}

// Placement is how a request of this table places its blocks
// (docs/design/ir.md §3): rooted at root (a physical rank; ignored, and
// zeroed with the program's root, unless the collective is rooted), in
// place or not.
func (t *Table) Placement(root int, inPlace bool) ir.Placement {
	pl := ir.Placement{Collective: t.Collective, NRanks: t.NRanks, ChunksPerBlock: t.ChunksPerBlock,
		ProgRoot: t.Root, Root: root, InPlace: inPlace}
	if !t.Collective.Rooted() {
		pl.ProgRoot, pl.Root = 0, 0
	}
	return pl
}
