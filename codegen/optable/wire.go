package optable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"unsafe"

	"github.com/theseus-ccl/theseus/ir"
)

// The wire records. Their Go layout is the binary layout (every field
// naturally aligned, explicit reserved fields, no implicit padding); tests
// pin sizes and offsets, and CHeader derives the C structs from them. The
// `c` tag is the C field name, `doc` its comment in the header.

type wireHeader struct {
	Magic          uint32 `c:"magic" doc:"THESEUS_OPTABLE_MAGIC (\"TSOT\")"`
	Version        uint16 `c:"version" doc:"THESEUS_OPTABLE_VERSION"`
	HeaderBytes    uint16 `c:"header_bytes" doc:"sizeof(theseus_optable_header)"`
	TotalBytes     uint64 `c:"total_bytes" doc:"bytes of the whole table, header included"`
	CRC            uint32 `c:"crc32c" doc:"CRC-32C (Castagnoli) of the whole table with this field zero"`
	Flags          uint32 `c:"flags" doc:"THESEUS_OPTABLE_INPLACE | THESEUS_OPTABLE_OUTOFPLACE | THESEUS_OPTABLE_FENCE | THESEUS_OPTABLE_SELF_FENCED"`
	Rank           int32  `c:"rank" doc:"logical rank of this table, 0..nranks-1"`
	NRanks         int32  `c:"nranks" doc:"world size of the program"`
	Collective     uint8  `c:"collective" doc:"THESEUS_COLL_*"`
	Protocol       uint8  `c:"protocol" doc:"THESEUS_PROTO_*"`
	Reserved0      uint16 `c:"reserved0" doc:"zero"`
	Root           int32  `c:"root" doc:"program root (rooted collectives) or -1"`
	NumThreads     int32  `c:"threads_per_block" doc:"0: executor default"`
	NLocalRanks    int32  `c:"nlocalranks" doc:"ranks per node required, 0: any"`
	ChunksPerBlock int64  `c:"chunks_per_block" doc:"C >= 1"`
	InputChunks    int64  `c:"input_chunks" doc:"chunks of the input buffer"`
	OutputChunks   int64  `c:"output_chunks" doc:"chunks of the output buffer"`
	ScratchChunks  int64  `c:"scratch_chunks" doc:"chunks of scratch this rank uses"`
	SliceBytes     int64  `c:"slice_bytes" doc:"bytes of one chunk per slice, 0: runtime default"`
	NumChannels    uint32 `c:"num_channels" doc:"channel-end records"`
	NumTBs         uint32 `c:"num_tbs" doc:"threadblock records"`
	NumOps         uint64 `c:"num_ops" doc:"op records (all threadblocks)"`
	NumRefs        uint64 `c:"num_refs" doc:"ref records"`
	NumDeps        uint64 `c:"num_deps" doc:"dependency records"`
	NumChanList    uint64 `c:"num_chan_list" doc:"int32 channel-list entries"`
	OffChannels    uint64 `c:"off_channels" doc:"byte offset of the channel-end section"`
	OffTBs         uint64 `c:"off_tbs" doc:"byte offset of the threadblock section"`
	OffOps         uint64 `c:"off_ops" doc:"byte offset of the op section"`
	OffRefs        uint64 `c:"off_refs" doc:"byte offset of the ref section"`
	OffDeps        uint64 `c:"off_deps" doc:"byte offset of the dependency section"`
	OffChanList    uint64 `c:"off_chan_list" doc:"byte offset of the channel-list section"`
	MaxScratch     int64  `c:"max_scratch_chunks" doc:"largest scratch_chunks of any rank: LL halves are this many chunks"`
	Reserved1      uint64 `c:"reserved1" doc:"zero"`
}

type wireChannel struct {
	Peer        int32    `c:"peer" doc:"logical rank at the other end"`
	PeerChannel int32    `c:"peer_channel" doc:"channel index of the other end on the peer"`
	Type        uint8    `c:"type" doc:"THESEUS_CHAN_*"`
	Reserved0   [7]uint8 `c:"reserved0" doc:"zero"`
	Init        int64    `c:"init" doc:"initial value of this end's inbound semaphore"`
	Reserved1   uint64   `c:"reserved1" doc:"zero"`
}

type wireTB struct {
	OpStart uint64 `c:"op_start" doc:"index of the first op of this threadblock"`
	OpCount uint64 `c:"op_count" doc:"number of ops (no cap)"`
}

type wireOp struct {
	Opcode     uint8  `c:"opcode" doc:"THESEUS_OP_*"`
	Flags      uint8  `c:"flags" doc:"THESEUS_OPF_PUBLISH"`
	Reserved0  uint16 `c:"reserved0" doc:"zero"`
	NSrc       uint32 `c:"nsrc" doc:"source refs, at refs[ref_start .. ref_start+nsrc)"`
	NDst       uint32 `c:"ndst" doc:"destination refs, following the sources"`
	NChan      uint32 `c:"nchan" doc:"channels of signal/wait/flush, at chan_list[chan_start ..]"`
	RefStart   uint64 `c:"ref_start" doc:"index of the first ref"`
	Count      int64  `c:"count" doc:"chunks (data ops, >= 1), else 0"`
	ChanStart  uint64 `c:"chan_start" doc:"index of the first channel-list entry"`
	DepStart   uint64 `c:"dep_start" doc:"index of the first dependency"`
	NDep       uint32 `c:"ndep" doc:"dependencies, waited for before the op starts"`
	Barrier    int32  `c:"barrier_id" doc:"barrier id (barrier op), else 0"`
	BarrierTBs int32  `c:"barrier_tbs" doc:"threadblocks taking part (barrier op), else 0"`
	Reserved1  uint32 `c:"reserved1" doc:"zero"`
}

type wireRef struct {
	Buf       uint8  `c:"buf" doc:"THESEUS_BUF_*"`
	Flags     uint8  `c:"flags" doc:"THESEUS_REF_REMOTE | THESEUS_REF_PACKET"`
	Reserved0 uint16 `c:"reserved0" doc:"zero"`
	Channel   int32  `c:"channel" doc:"channel of a remote ref, -1 for local"`
	Off       int64  `c:"off" doc:"first chunk"`
}

type wireDep struct {
	TB        int32  `c:"tb" doc:"threadblock of this rank"`
	Reserved0 uint32 `c:"reserved0" doc:"zero"`
	Step      int64  `c:"step" doc:"op index in that threadblock; it publishes"`
}

// Compile-time size checks (the tests check offsets too).
var (
	_ [HeaderBytes - unsafe.Sizeof(wireHeader{})]byte
	_ [unsafe.Sizeof(wireHeader{}) - HeaderBytes]byte
	_ [ChannelBytes - unsafe.Sizeof(wireChannel{})]byte
	_ [unsafe.Sizeof(wireChannel{}) - ChannelBytes]byte
	_ [TBBytes - unsafe.Sizeof(wireTB{})]byte
	_ [OpBytes - unsafe.Sizeof(wireOp{})]byte
	_ [unsafe.Sizeof(wireOp{}) - OpBytes]byte
	_ [RefBytes - unsafe.Sizeof(wireRef{})]byte
	_ [DepBytes - unsafe.Sizeof(wireDep{})]byte
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const crcOffset = 16 // offset of wireHeader.CRC

func align16(n uint64) uint64 { return (n + 15) &^ 15 }

// layout is the canonical placement of the sections for the given counts.
type layout struct {
	offChannels, offTBs, offOps, offRefs, offDeps, offChanList, total uint64
}

// sectionLayout computes the canonical offsets; ok is false on overflow
// or when the table would exceed limit bytes.
func sectionLayout(nch, ntb, nops, nrefs, ndeps, nchl, limit uint64) (layout, bool) {
	var l layout
	off := uint64(HeaderBytes)
	add := func(n, size uint64) (uint64, bool) {
		start := off
		if n > limit/size {
			return 0, false
		}
		off += align16(n * size)
		return start, off <= limit
	}
	var ok bool
	if l.offChannels, ok = add(nch, ChannelBytes); !ok {
		return l, false
	}
	if l.offTBs, ok = add(ntb, TBBytes); !ok {
		return l, false
	}
	if l.offOps, ok = add(nops, OpBytes); !ok {
		return l, false
	}
	if l.offRefs, ok = add(nrefs, RefBytes); !ok {
		return l, false
	}
	if l.offDeps, ok = add(ndeps, DepBytes); !ok {
		return l, false
	}
	if l.offChanList, ok = add(nchl, ChanListBytes); !ok {
		return l, false
	}
	l.total = off
	return l, true
}

// MarshalBinary encodes t in the binary format of docs/optable.md (current
// Version). It validates t first (see Validate) and returns its error, so
// it never writes a table that Decode would reject.
func (t *Table) MarshalBinary() ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	var nops, nrefs, ndeps, nchl uint64
	for _, tb := range t.TBs {
		nops += uint64(len(tb.Ops))
		for i := range tb.Ops {
			op := &tb.Ops[i]
			nrefs += uint64(len(op.Srcs) + len(op.Dsts))
			ndeps += uint64(len(op.Deps))
			nchl += uint64(len(op.Chans))
		}
	}
	e, err := newEncoder(t, len(t.TBs), nops, nrefs, ndeps, nchl)
	if err != nil {
		return nil, err
	}
	for ti := range t.TBs {
		e.tb(ti, len(t.TBs[ti].Ops))
		for k := range t.TBs[ti].Ops {
			e.op(&t.TBs[ti].Ops[k])
		}
	}
	return e.finish(), nil
}

// wireOpcode and wireBuf are wireOpcodes and wireBufKinds as arrays
// indexed by the ir value, for the encoder.
var (
	wireOpcode [ir.NumOpcodes]uint8
	wireBuf    [ir.NumBufKinds]uint8
)

func init() {
	for op, w := range wireOpcodes {
		wireOpcode[op] = w
	}
	for w, k := range wireBufKinds {
		wireBuf[k] = uint8(w)
	}
}

// encoder writes one table in the wire format: newEncoder the header and
// the channel ends, then tb for each threadblock followed by op for each of
// its ops, then finish. The records are written in place into one buffer of
// the final size, field by field; nothing is allocated per op.
type encoder struct {
	b                     []byte
	l                     layout
	opi, refi, depi, chli uint64
}

// newEncoder allocates a table with the given record counts and writes the
// header of t (all but the CRC) and t's channel ends. t's fields must be
// valid (validateHeader).
func newEncoder(t *Table, ntbs int, nops, nrefs, ndeps, nchl uint64) (*encoder, error) {
	l, ok := sectionLayout(uint64(len(t.Channels)), uint64(ntbs), nops, nrefs, ndeps, nchl, math.MaxInt64)
	if !ok {
		return nil, errors.New("optable: table too large")
	}
	e := &encoder{b: make([]byte, l.total), l: l}
	h := wireHeader{
		Magic: Magic, Version: Version, HeaderBytes: HeaderBytes, TotalBytes: l.total,
		Rank: int32(t.Rank), NRanks: int32(t.NRanks), Root: int32(t.Root),
		NumThreads: int32(t.NumThreads), NLocalRanks: int32(t.NLocalRanks),
		ChunksPerBlock: t.ChunksPerBlock, InputChunks: t.Chunks[ir.Input], OutputChunks: t.Chunks[ir.Output],
		ScratchChunks: t.Chunks[ir.Scratch], SliceBytes: t.SliceBytes,
		NumChannels: uint32(len(t.Channels)), NumTBs: uint32(ntbs),
		NumOps: nops, NumRefs: nrefs, NumDeps: ndeps, NumChanList: nchl,
		OffChannels: l.offChannels, OffTBs: l.offTBs, OffOps: l.offOps, OffRefs: l.offRefs,
		OffDeps: l.offDeps, OffChanList: l.offChanList, MaxScratch: t.MaxScratchChunks,
	}
	h.Collective, _ = toWire(wireCollectives[:], t.Collective)
	h.Protocol, _ = toWire(wireProtocols[:], t.Protocol)
	if t.InPlace {
		h.Flags |= FlagInPlace
	}
	if t.OutOfPlace {
		h.Flags |= FlagOutOfPlace
	}
	if t.FenceLaunches {
		h.Flags |= FlagFence
	}
	if t.SelfFenced {
		h.Flags |= FlagSelfFenced
	}
	h.put(e.b)
	for c, ch := range t.Channels {
		w := wireChannel{Peer: int32(ch.Peer), PeerChannel: int32(ch.PeerChannel), Init: ch.Init}
		w.Type, _ = toWire(wireChannelTypes[:], ch.Type)
		w.put(e.b[l.offChannels+uint64(c)*ChannelBytes:])
	}
	return e, nil
}

// tb writes threadblock ti's record: its ops are the next nops ops.
func (e *encoder) tb(ti, nops int) {
	wireTB{OpStart: e.opi, OpCount: uint64(nops)}.put(e.b[e.l.offTBs+uint64(ti)*TBBytes:])
}

// op writes the next op record and its refs, dependencies and channel list
// (reserved fields stay zero).
func (e *encoder) op(op *Op) {
	le := binary.LittleEndian
	w := e.b[e.l.offOps+e.opi*OpBytes:][:OpBytes]
	w[0] = wireOpcode[op.Code]
	if op.Publish {
		w[1] = OpFlagPublish
	}
	le.PutUint32(w[4:], uint32(len(op.Srcs)))
	le.PutUint32(w[8:], uint32(len(op.Dsts)))
	le.PutUint32(w[12:], uint32(len(op.Chans)))
	le.PutUint64(w[16:], e.refi)
	le.PutUint64(w[24:], uint64(op.Count))
	le.PutUint64(w[32:], e.chli)
	le.PutUint64(w[40:], e.depi)
	le.PutUint32(w[48:], uint32(len(op.Deps)))
	le.PutUint32(w[52:], uint32(int32(op.Barrier)))
	le.PutUint32(w[56:], uint32(int32(op.BarrierTBs)))
	e.opi++
	e.refs(op.Srcs)
	e.refs(op.Dsts)
	for _, d := range op.Deps {
		r := e.b[e.l.offDeps+e.depi*DepBytes:][:DepBytes]
		le.PutUint32(r[0:], uint32(int32(d.TB)))
		le.PutUint64(r[8:], uint64(int64(d.Step)))
		e.depi++
	}
	for _, c := range op.Chans {
		le.PutUint32(e.b[e.l.offChanList+e.chli*ChanListBytes:], uint32(int32(c)))
		e.chli++
	}
}

func (e *encoder) refs(refs []ir.Ref) {
	le := binary.LittleEndian
	for _, r := range refs {
		w := e.b[e.l.offRefs+e.refi*RefBytes:][:RefBytes]
		w[0] = wireBuf[r.Buf]
		var f uint8
		if r.Chan >= 0 {
			f |= RefFlagRemote
		}
		if r.Packet {
			f |= RefFlagPacket
		}
		w[1] = f
		le.PutUint32(w[4:], uint32(int32(r.Chan)))
		le.PutUint64(w[8:], uint64(r.Off))
		e.refi++
	}
}

// finish writes the CRC and returns the table.
func (e *encoder) finish() []byte {
	binary.LittleEndian.PutUint32(e.b[crcOffset:], crc32.Checksum(e.b, castagnoli))
	return e.b
}

// DecodeError is the error of Decode for a malformed table: Offset is the
// byte offset of the offending field or record (-1 when not one place).
type DecodeError struct {
	Offset int64
	Msg    string
}

func (e *DecodeError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("optable: byte %d: %s", e.Offset, e.Msg)
	}
	return "optable: " + e.Msg
}

func derr(off uint64, format string, args ...any) error {
	return &DecodeError{Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// Decode decodes and validates a table written by MarshalBinary. It
// checks, in order: the magic, the version (exactly Version), the header
// size, the total size against len(b), the CRC-32C, that reserved fields
// and padding are zero, that the section offsets are the canonical ones for
// the counts, that every threadblock's op range and every op's ref, channel
// and dependency ranges follow one another without gaps or overlaps, that
// every enum value is known, and then everything Validate checks. It
// allocates in proportion to len(b) only, never panics, and returns a
// *DecodeError or a *ValidationError.
func Decode(b []byte) (*Table, error) {
	h, l, t, err := decodeHeader(b)
	if err != nil {
		return nil, err
	}
	if err := decodeChannels(b, l, h, t); err != nil {
		return nil, err
	}
	d := newOpDecoder(b, l, h)
	if err := d.tbs(t); err != nil {
		return nil, err
	}
	if d.opi != h.NumOps || d.refi != h.NumRefs || d.depi != h.NumDeps || d.chli != h.NumChanList {
		return nil, derr(96, "threadblocks use %d ops, %d refs, %d deps and %d channel-list entries; the header says %d, %d, %d, %d",
			d.opi, d.refi, d.depi, d.chli, h.NumOps, h.NumRefs, h.NumDeps, h.NumChanList)
	}
	for i := l.offChanList + h.NumChanList*ChanListBytes; i < l.total; i++ {
		if b[i] != 0 {
			return nil, derr(i, "section padding is not zero")
		}
	}
	// Padding between the other sections: each section's records end exactly
	// on a 16-byte boundary except the channel list, so nothing else to check.
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// decodeHeader checks b's header (the magic, version, sizes, CRC, flags,
// counts and canonical section offsets) and returns it, the layout of the
// sections and a Table with the header's fields.
func decodeHeader(b []byte) (h wireHeader, l layout, t *Table, err error) {
	if len(b) < HeaderBytes {
		return h, l, nil, derr(0, "%d bytes is shorter than the %d-byte header", len(b), HeaderBytes)
	}
	h.get(b)
	switch {
	case h.Magic != Magic:
		return h, l, nil, derr(0, "bad magic %#x (want %#x, \"TSOT\")", h.Magic, Magic)
	case h.Version != Version:
		return h, l, nil, derr(4, "unsupported format version %d (this build reads version %d)", h.Version, Version)
	case h.HeaderBytes != HeaderBytes:
		return h, l, nil, derr(6, "header size %d, want %d", h.HeaderBytes, HeaderBytes)
	case h.TotalBytes != uint64(len(b)):
		return h, l, nil, derr(8, "header says %d bytes, have %d", h.TotalBytes, len(b))
	}
	sum := crc32.Update(0, castagnoli, b[:crcOffset])
	sum = crc32.Update(sum, castagnoli, []byte{0, 0, 0, 0})
	sum = crc32.Update(sum, castagnoli, b[crcOffset+4:])
	if sum != h.CRC {
		return h, l, nil, derr(crcOffset, "CRC-32C %#08x does not match the contents (%#08x)", h.CRC, sum)
	}
	if h.Reserved0 != 0 || h.Reserved1 != 0 {
		return h, l, nil, derr(34, "reserved header fields are not zero")
	}
	if h.Flags&^(FlagInPlace|FlagOutOfPlace|FlagFence|FlagSelfFenced) != 0 {
		return h, l, nil, derr(20, "unknown header flags %#x", h.Flags)
	}
	var ok bool
	l, ok = sectionLayout(uint64(h.NumChannels), uint64(h.NumTBs), h.NumOps, h.NumRefs, h.NumDeps, h.NumChanList, uint64(len(b)))
	if !ok || l.total != uint64(len(b)) {
		return h, l, nil, derr(88, "record counts (%d channels, %d tbs, %d ops, %d refs, %d deps, %d channel-list entries) do not fill the %d bytes",
			h.NumChannels, h.NumTBs, h.NumOps, h.NumRefs, h.NumDeps, h.NumChanList, len(b))
	}
	if l.offChannels != h.OffChannels || l.offTBs != h.OffTBs || l.offOps != h.OffOps || l.offRefs != h.OffRefs ||
		l.offDeps != h.OffDeps || l.offChanList != h.OffChanList {
		return h, l, nil, derr(128, "section offsets are not the canonical ones for the counts")
	}
	t = &Table{
		Rank: int(h.Rank), NRanks: int(h.NRanks), Root: int(h.Root), NumThreads: int(h.NumThreads),
		NLocalRanks: int(h.NLocalRanks), ChunksPerBlock: h.ChunksPerBlock, SliceBytes: h.SliceBytes, MaxScratchChunks: h.MaxScratch,
		InPlace: h.Flags&FlagInPlace != 0, OutOfPlace: h.Flags&FlagOutOfPlace != 0, FenceLaunches: h.Flags&FlagFence != 0,
		SelfFenced: h.Flags&FlagSelfFenced != 0,
	}
	t.Chunks[ir.Input], t.Chunks[ir.Output], t.Chunks[ir.Scratch] = h.InputChunks, h.OutputChunks, h.ScratchChunks
	if t.Collective, ok = fromWire(wireCollectives[:], h.Collective); !ok {
		return h, l, nil, derr(32, "unknown collective code %d", h.Collective)
	}
	if t.Protocol, ok = fromWire(wireProtocols[:], h.Protocol); !ok {
		return h, l, nil, derr(33, "unknown protocol code %d", h.Protocol)
	}
	if t.SelfFenced && (t.FenceLaunches || t.Protocol != ir.LL) {
		return h, l, nil, derr(20, "header flags %#x: self-fenced is only for an LL program that is not fenced at every launch", h.Flags)
	}
	return h, l, t, nil
}

// decodeChannels decodes the channel records into t.Channels.
func decodeChannels(b []byte, l layout, h wireHeader, t *Table) error {
	if h.NumChannels > 0 {
		t.Channels = make([]Channel, h.NumChannels)
	}
	for c := range t.Channels {
		off := l.offChannels + uint64(c)*ChannelBytes
		var w wireChannel
		w.get(b[off:])
		if w.Reserved0 != [7]uint8{} || w.Reserved1 != 0 {
			return derr(off, "channel %d: reserved fields are not zero", c)
		}
		typ, ok := fromWire(wireChannelTypes[:], w.Type)
		if !ok {
			return derr(off+8, "channel %d: unknown channel type %d", c, w.Type)
		}
		t.Channels[c] = Channel{Peer: int(w.Peer), PeerChannel: int(w.PeerChannel), Type: typ, Init: w.Init}
	}
	return nil
}

// opDecoder decodes the threadblock, op, ref, dependency and channel-list
// records into backing arrays sized by the header's counts (bounded by
// len(b)), each threadblock's and op's slices cut from them in order.
type opDecoder struct {
	b                     []byte
	l                     layout
	h                     wireHeader
	ops                   []Op
	refs                  []ir.Ref
	deps                  []ir.Dep
	chans                 []int
	opi, refi, depi, chli uint64 // the next record of each kind
}

func newOpDecoder(b []byte, l layout, h wireHeader) *opDecoder {
	d := &opDecoder{b: b, l: l, h: h}
	if h.NumOps > 0 {
		d.ops = make([]Op, h.NumOps)
	}
	if h.NumRefs > 0 {
		d.refs = make([]ir.Ref, h.NumRefs)
	}
	if h.NumDeps > 0 {
		d.deps = make([]ir.Dep, h.NumDeps)
	}
	if h.NumChanList > 0 {
		d.chans = make([]int, h.NumChanList)
	}
	return d
}

// tbs decodes the threadblock records into t.TBs and their ops.
func (d *opDecoder) tbs(t *Table) error {
	if d.h.NumTBs > 0 {
		t.TBs = make([]TB, d.h.NumTBs)
	}
	for ti := range t.TBs {
		off := d.l.offTBs + uint64(ti)*TBBytes
		var w wireTB
		w.get(d.b[off:])
		if w.OpStart != d.opi || w.OpCount > d.h.NumOps-d.opi {
			return derr(off, "tb %d: ops [%d, +%d) do not follow the previous threadblock's (next op %d of %d)", ti, w.OpStart, w.OpCount, d.opi, d.h.NumOps)
		}
		if w.OpCount > 0 {
			t.TBs[ti].Ops = d.ops[d.opi : d.opi+w.OpCount : d.opi+w.OpCount]
		}
		for k := range t.TBs[ti].Ops {
			if err := d.op(ti, k, &t.TBs[ti].Ops[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// op decodes the next op record, step k of threadblock ti, into op, with
// its refs, dependencies and channel list.
func (d *opDecoder) op(ti, k int, op *Op) error {
	ooff := d.l.offOps + d.opi*OpBytes
	var wo wireOp
	wo.get(d.b[ooff:])
	d.opi++
	if wo.Reserved0 != 0 || wo.Reserved1 != 0 {
		return derr(ooff, "tb %d step %d: reserved fields are not zero", ti, k)
	}
	if int(wo.Opcode) >= len(irOpcodes) {
		return derr(ooff, "tb %d step %d: unknown opcode %d", ti, k, wo.Opcode)
	}
	if wo.Flags&^OpFlagPublish != 0 {
		return derr(ooff+1, "tb %d step %d: unknown op flags %#x", ti, k, wo.Flags)
	}
	nref := uint64(wo.NSrc) + uint64(wo.NDst)
	switch {
	case wo.RefStart != d.refi || nref > d.h.NumRefs-d.refi:
		return derr(ooff+16, "tb %d step %d: refs [%d, +%d) do not follow the previous op's (next ref %d of %d)", ti, k, wo.RefStart, nref, d.refi, d.h.NumRefs)
	case wo.ChanStart != d.chli || uint64(wo.NChan) > d.h.NumChanList-d.chli:
		return derr(ooff+32, "tb %d step %d: channel list [%d, +%d) does not follow the previous op's (next entry %d of %d)", ti, k, wo.ChanStart, wo.NChan, d.chli, d.h.NumChanList)
	case wo.DepStart != d.depi || uint64(wo.NDep) > d.h.NumDeps-d.depi:
		return derr(ooff+40, "tb %d step %d: dependencies [%d, +%d) do not follow the previous op's (next %d of %d)", ti, k, wo.DepStart, wo.NDep, d.depi, d.h.NumDeps)
	}
	op.Code = irOpcodes[wo.Opcode]
	op.Publish = wo.Flags&OpFlagPublish != 0
	op.Count = wo.Count
	op.Barrier, op.BarrierTBs = int(wo.Barrier), int(wo.BarrierTBs)
	for i := uint64(0); i < nref; i++ {
		roff := d.l.offRefs + (d.refi+i)*RefBytes
		var wr wireRef
		wr.get(d.b[roff:])
		buf, ok := fromWire(wireBufKinds[:], wr.Buf)
		switch {
		case !ok:
			return derr(roff, "tb %d step %d: ref %d: unknown buffer code %d", ti, k, i, wr.Buf)
		case wr.Flags&^(RefFlagRemote|RefFlagPacket) != 0 || wr.Reserved0 != 0:
			return derr(roff+1, "tb %d step %d: ref %d: unknown flags %#x or reserved bits set", ti, k, i, wr.Flags)
		case (wr.Flags&RefFlagRemote != 0) != (wr.Channel >= 0):
			return derr(roff+4, "tb %d step %d: ref %d: remote flag and channel %d disagree", ti, k, i, wr.Channel)
		case wr.Channel < -1:
			return derr(roff+4, "tb %d step %d: ref %d: channel %d (want -1 or a channel index)", ti, k, i, wr.Channel)
		}
		d.refs[d.refi+i] = ir.Ref{Buf: buf, Off: wr.Off, Chan: int(wr.Channel), Packet: wr.Flags&RefFlagPacket != 0}
	}
	if wo.NSrc > 0 {
		op.Srcs = d.refs[d.refi : d.refi+uint64(wo.NSrc) : d.refi+uint64(wo.NSrc)]
	}
	if wo.NDst > 0 {
		op.Dsts = d.refs[d.refi+uint64(wo.NSrc) : d.refi+nref : d.refi+nref]
	}
	d.refi += nref
	for i := uint64(0); i < uint64(wo.NDep); i++ {
		doff := d.l.offDeps + (d.depi+i)*DepBytes
		var wd wireDep
		wd.get(d.b[doff:])
		if wd.Reserved0 != 0 {
			return derr(doff, "tb %d step %d: dependency %d: reserved field not zero", ti, k, i)
		}
		if wd.Step < 0 || uint64(wd.Step) >= d.h.NumOps { // Validate checks the exact range
			return derr(doff+8, "tb %d step %d: dependency %d: step %d out of range", ti, k, i, wd.Step)
		}
		d.deps[d.depi+i] = ir.Dep{TB: int(wd.TB), Step: int(wd.Step)}
	}
	if wo.NDep > 0 {
		op.Deps = d.deps[d.depi : d.depi+uint64(wo.NDep) : d.depi+uint64(wo.NDep)]
	}
	d.depi += uint64(wo.NDep)
	for i := uint64(0); i < uint64(wo.NChan); i++ {
		d.chans[d.chli+i] = int(int32(binary.LittleEndian.Uint32(d.b[d.l.offChanList+(d.chli+i)*ChanListBytes:])))
	}
	if wo.NChan > 0 {
		op.Chans = d.chans[d.chli : d.chli+uint64(wo.NChan) : d.chli+uint64(wo.NChan)]
	}
	d.chli += uint64(wo.NChan)
	return nil
}

// Field access. Each put/get writes or reads every field at its offset in
// the Go struct, which is the wire offset (the tests pin them).

func (h *wireHeader) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.Magic)
	le.PutUint16(b[4:], h.Version)
	le.PutUint16(b[6:], h.HeaderBytes)
	le.PutUint64(b[8:], h.TotalBytes)
	le.PutUint32(b[16:], h.CRC)
	le.PutUint32(b[20:], h.Flags)
	le.PutUint32(b[24:], uint32(h.Rank))
	le.PutUint32(b[28:], uint32(h.NRanks))
	b[32] = h.Collective
	b[33] = h.Protocol
	le.PutUint16(b[34:], h.Reserved0)
	le.PutUint32(b[36:], uint32(h.Root))
	le.PutUint32(b[40:], uint32(h.NumThreads))
	le.PutUint32(b[44:], uint32(h.NLocalRanks))
	le.PutUint64(b[48:], uint64(h.ChunksPerBlock))
	le.PutUint64(b[56:], uint64(h.InputChunks))
	le.PutUint64(b[64:], uint64(h.OutputChunks))
	le.PutUint64(b[72:], uint64(h.ScratchChunks))
	le.PutUint64(b[80:], uint64(h.SliceBytes))
	le.PutUint32(b[88:], h.NumChannels)
	le.PutUint32(b[92:], h.NumTBs)
	le.PutUint64(b[96:], h.NumOps)
	le.PutUint64(b[104:], h.NumRefs)
	le.PutUint64(b[112:], h.NumDeps)
	le.PutUint64(b[120:], h.NumChanList)
	le.PutUint64(b[128:], h.OffChannels)
	le.PutUint64(b[136:], h.OffTBs)
	le.PutUint64(b[144:], h.OffOps)
	le.PutUint64(b[152:], h.OffRefs)
	le.PutUint64(b[160:], h.OffDeps)
	le.PutUint64(b[168:], h.OffChanList)
	le.PutUint64(b[176:], uint64(h.MaxScratch))
	le.PutUint64(b[184:], h.Reserved1)
}

func (h *wireHeader) get(b []byte) {
	le := binary.LittleEndian
	h.Magic = le.Uint32(b[0:])
	h.Version = le.Uint16(b[4:])
	h.HeaderBytes = le.Uint16(b[6:])
	h.TotalBytes = le.Uint64(b[8:])
	h.CRC = le.Uint32(b[16:])
	h.Flags = le.Uint32(b[20:])
	h.Rank = int32(le.Uint32(b[24:]))
	h.NRanks = int32(le.Uint32(b[28:]))
	h.Collective = b[32]
	h.Protocol = b[33]
	h.Reserved0 = le.Uint16(b[34:])
	h.Root = int32(le.Uint32(b[36:]))
	h.NumThreads = int32(le.Uint32(b[40:]))
	h.NLocalRanks = int32(le.Uint32(b[44:]))
	h.ChunksPerBlock = int64(le.Uint64(b[48:]))
	h.InputChunks = int64(le.Uint64(b[56:]))
	h.OutputChunks = int64(le.Uint64(b[64:]))
	h.ScratchChunks = int64(le.Uint64(b[72:]))
	h.SliceBytes = int64(le.Uint64(b[80:]))
	h.NumChannels = le.Uint32(b[88:])
	h.NumTBs = le.Uint32(b[92:])
	h.NumOps = le.Uint64(b[96:])
	h.NumRefs = le.Uint64(b[104:])
	h.NumDeps = le.Uint64(b[112:])
	h.NumChanList = le.Uint64(b[120:])
	h.OffChannels = le.Uint64(b[128:])
	h.OffTBs = le.Uint64(b[136:])
	h.OffOps = le.Uint64(b[144:])
	h.OffRefs = le.Uint64(b[152:])
	h.OffDeps = le.Uint64(b[160:])
	h.OffChanList = le.Uint64(b[168:])
	h.MaxScratch = int64(le.Uint64(b[176:]))
	h.Reserved1 = le.Uint64(b[184:])
}

func (w wireChannel) put(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], uint32(w.Peer))
	le.PutUint32(b[4:], uint32(w.PeerChannel))
	b[8] = w.Type
	copy(b[9:16], w.Reserved0[:])
	le.PutUint64(b[16:], uint64(w.Init))
	le.PutUint64(b[24:], w.Reserved1)
}

func (w *wireChannel) get(b []byte) {
	le := binary.LittleEndian
	w.Peer = int32(le.Uint32(b[0:]))
	w.PeerChannel = int32(le.Uint32(b[4:]))
	w.Type = b[8]
	copy(w.Reserved0[:], b[9:16])
	w.Init = int64(le.Uint64(b[16:]))
	w.Reserved1 = le.Uint64(b[24:])
}

func (w wireTB) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], w.OpStart)
	binary.LittleEndian.PutUint64(b[8:], w.OpCount)
}

func (w *wireTB) get(b []byte) {
	w.OpStart = binary.LittleEndian.Uint64(b[0:])
	w.OpCount = binary.LittleEndian.Uint64(b[8:])
}

func (w wireOp) put(b []byte) {
	le := binary.LittleEndian
	b[0] = w.Opcode
	b[1] = w.Flags
	le.PutUint16(b[2:], w.Reserved0)
	le.PutUint32(b[4:], w.NSrc)
	le.PutUint32(b[8:], w.NDst)
	le.PutUint32(b[12:], w.NChan)
	le.PutUint64(b[16:], w.RefStart)
	le.PutUint64(b[24:], uint64(w.Count))
	le.PutUint64(b[32:], w.ChanStart)
	le.PutUint64(b[40:], w.DepStart)
	le.PutUint32(b[48:], w.NDep)
	le.PutUint32(b[52:], uint32(w.Barrier))
	le.PutUint32(b[56:], uint32(w.BarrierTBs))
	le.PutUint32(b[60:], w.Reserved1)
}

func (w *wireOp) get(b []byte) {
	le := binary.LittleEndian
	w.Opcode = b[0]
	w.Flags = b[1]
	w.Reserved0 = le.Uint16(b[2:])
	w.NSrc = le.Uint32(b[4:])
	w.NDst = le.Uint32(b[8:])
	w.NChan = le.Uint32(b[12:])
	w.RefStart = le.Uint64(b[16:])
	w.Count = int64(le.Uint64(b[24:]))
	w.ChanStart = le.Uint64(b[32:])
	w.DepStart = le.Uint64(b[40:])
	w.NDep = le.Uint32(b[48:])
	w.Barrier = int32(le.Uint32(b[52:]))
	w.BarrierTBs = int32(le.Uint32(b[56:]))
	w.Reserved1 = le.Uint32(b[60:])
}

func (w wireRef) put(b []byte) {
	b[0] = w.Buf
	b[1] = w.Flags
	binary.LittleEndian.PutUint16(b[2:], w.Reserved0)
	binary.LittleEndian.PutUint32(b[4:], uint32(w.Channel))
	binary.LittleEndian.PutUint64(b[8:], uint64(w.Off))
}

func (w *wireRef) get(b []byte) {
	w.Buf = b[0]
	w.Flags = b[1]
	w.Reserved0 = binary.LittleEndian.Uint16(b[2:])
	w.Channel = int32(binary.LittleEndian.Uint32(b[4:]))
	w.Off = int64(binary.LittleEndian.Uint64(b[8:]))
}

func (w wireDep) put(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], uint32(w.TB))
	binary.LittleEndian.PutUint32(b[4:], w.Reserved0)
	binary.LittleEndian.PutUint64(b[8:], uint64(w.Step))
}

func (w *wireDep) get(b []byte) {
	w.TB = int32(binary.LittleEndian.Uint32(b[0:]))
	w.Reserved0 = binary.LittleEndian.Uint32(b[4:])
	w.Step = int64(binary.LittleEndian.Uint64(b[8:]))
}

// flagsOffset is the offset of wireHeader.Flags.
const flagsOffset = 20

// MarkFence sets FenceLaunches in the encoded table b, in place, and
// rewrites its CRC. Errors: b is not an encoded table (Decode's checks).
func MarkFence(b []byte) error { return markFlag(b, FlagFence) }

// MarkSelfFenced sets SelfFenced in the encoded table b, in place, and
// rewrites its CRC. Errors: b is not an encoded table (Decode's checks),
// or not one of an LL program, or one marked FenceLaunches.
func MarkSelfFenced(b []byte) error { return markFlag(b, FlagSelfFenced) }

// markFlag sets the header flag f of the encoded table b and rewrites its
// CRC; the result must decode.
func markFlag(b []byte, f uint32) error {
	if _, err := Decode(b); err != nil {
		return err
	}
	old := binary.LittleEndian.Uint32(b[flagsOffset:])
	put := func(flags uint32) {
		binary.LittleEndian.PutUint32(b[flagsOffset:], flags)
		binary.LittleEndian.PutUint32(b[crcOffset:], 0)
		binary.LittleEndian.PutUint32(b[crcOffset:], crc32.Checksum(b, castagnoli))
	}
	put(old | f)
	if _, err := Decode(b); err != nil {
		put(old)
		return err
	}
	return nil
}
