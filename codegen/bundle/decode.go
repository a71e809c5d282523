package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/theseus-ccl/theseus/ir"
)

// reader walks a byte slice; the first failure sticks.
type reader struct {
	b   []byte
	off int // offset of b[0] in the file, for messages
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: at byte %d: %s", ErrFormat, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) take(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("%s of %d bytes, only %d left", what, n, len(r.b))
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	r.off += int(n)
	return out
}

func (r *reader) u8(what string) byte {
	if b := r.take(1, what); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if b := r.take(4, what); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if b := r.take(8, what); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// i64 reads a signed 64-bit value that must be >= 0.
func (r *reader) nonneg(what string) int64 {
	v := r.u64(what)
	if v > math.MaxInt64 {
		r.fail("%s %d is negative", what, int64(v))
	}
	return int64(v)
}

func (r *reader) zeros(n uint64, what string) {
	for _, c := range r.take(n, what) {
		if c != 0 {
			r.fail("%s must be zero", what)
			return
		}
	}
}

// count reads a 32-bit element count and checks that count records of
// size bytes fit in what is left, so that no allocation exceeds the input.
func (r *reader) count(size int, what string) int {
	n := r.u32(what)
	if r.err == nil && uint64(n)*uint64(size) > uint64(len(r.b)) {
		r.fail("%d %s of %d bytes each, only %d bytes left", n, what, size, len(r.b))
		return 0
	}
	return int(n)
}

// Decode reads and validates a whole bundle (docs/bundle.md): the header,
// the head, every section and the source. Errors wrap ErrFormat (malformed
// bytes, a field out of range, trailing bytes), ErrVersion (a version
// other than Version) or ErrChecksum (the stored ID, a section's or the
// source's hash does not match). The returned bundle's tables and source
// are copies; it shares no memory with data. Decode never panics, and
// allocates at most a small multiple of len(data).
func Decode(data []byte) (*Bundle, error) {
	b, _, err := decode(data)
	return b, err
}

// DecodeID is Decode that also returns the bundle's ID (verified).
func DecodeID(data []byte) (*Bundle, ID, error) {
	return decode(data)
}

// index is one rank's entry of the section index.
type index struct {
	off, len int64 // offset from the first section, length, bytes
	sum      ID
}

// fileHeader is the parsed 56-byte header.
type fileHeader struct {
	flags   uint16
	headLen uint64
	stored  ID
}

func parseHeader(data []byte) (fileHeader, error) {
	var h fileHeader
	r := &reader{b: data}
	if len(data) < HeaderBytes {
		return h, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrFormat, len(data), HeaderBytes)
	}
	if string(r.take(8, "magic")) != Magic {
		return h, fmt.Errorf("%w: not a bundle (magic %q, want %q)", ErrFormat, data[:8], Magic)
	}
	if v := binary.LittleEndian.Uint16(r.take(2, "version")); v != Version {
		return h, fmt.Errorf("%w: version %d (this build reads version %d: recompile the schedule with theseusc compile)", ErrVersion, v, Version)
	}
	h.flags = binary.LittleEndian.Uint16(r.take(2, "flags"))
	if h.flags&^(flagSource|flagVerified|flagKernels) != 0 {
		r.fail("unknown flags %#x", h.flags)
	}
	r.zeros(4, "reserved header bytes")
	h.headLen = r.u64("head length")
	copy(h.stored[:], r.take(32, "ID"))
	return h, r.err
}

// parseHead decodes a head (metadata, resources, section index) into a
// bundle with nil tables; it checks the index's offsets (contiguous, from
// 0) and returns the entries and the sections' total length.
func parseHead(head []byte) (*Bundle, []index, int64, error) {
	b := &Bundle{}
	br := &reader{b: head, off: HeaderBytes}
	idx := b.decodeHead(br)
	if br.err == nil && len(br.b) != 0 {
		br.fail("%d bytes after the section index", len(br.b))
	}
	if br.err != nil {
		return nil, nil, 0, br.err
	}
	var total int64
	for r, e := range idx {
		if e.off != total {
			return nil, nil, 0, fmt.Errorf("%w: section index: rank %d's section at offset %d, want %d (sections are contiguous, in rank order)", ErrFormat, r, e.off, total)
		}
		if e.len > math.MaxInt64-total {
			return nil, nil, 0, fmt.Errorf("%w: section index: rank %d's section of %d bytes overflows", ErrFormat, r, e.len)
		}
		total += e.len
	}
	b.Tables = make([][]byte, len(b.Ranks))
	return b, idx, total, nil
}

func checkID(head []byte, stored ID) error {
	if id := headID(head); id != stored {
		got, want := distinct(id, stored)
		return fmt.Errorf("%w: the head hashes to %s, the header says %s", ErrChecksum, got, want)
	}
	return nil
}

func decode(data []byte) (*Bundle, ID, error) {
	h, err := parseHeader(data)
	if err != nil {
		return nil, ID{}, err
	}
	r := &reader{b: data[HeaderBytes:], off: HeaderBytes}
	head := r.take(h.headLen, "head")
	if r.err != nil {
		return nil, ID{}, r.err
	}
	b, idx, _, err := parseHead(head)
	if err != nil {
		return nil, ID{}, err
	}
	b.Verified = h.flags&flagVerified != 0
	for i, e := range idx {
		t := r.take(uint64(e.len), fmt.Sprintf("rank %d's section", i))
		if r.err != nil {
			return nil, ID{}, r.err
		}
		if sha256.Sum256(t) != e.sum {
			return nil, ID{}, fmt.Errorf("%w: rank %d's section does not match its SHA-256 in the index", ErrChecksum, i)
		}
		b.Tables[i] = bytes.Clone(t)
		if b.Tables[i] == nil {
			b.Tables[i] = []byte{}
		}
	}
	if h.flags&flagSource != 0 {
		n := r.u64("source length")
		src := r.take(n, "source")
		sum := r.take(sha256.Size, "source hash")
		if r.err != nil {
			return nil, ID{}, r.err
		}
		if got := sha256.Sum256(src); !bytes.Equal(got[:], sum) {
			return nil, ID{}, fmt.Errorf("%w: the embedded source does not match its SHA-256", ErrChecksum)
		}
		b.Source = bytes.Clone(src)
		if b.Source == nil {
			b.Source = []byte{}
		}
	}
	if h.flags&flagKernels != 0 {
		if err := b.decodeKernels(r, idx); err != nil {
			return nil, ID{}, err
		}
		if len(b.Kernels) == 0 {
			return nil, ID{}, fmt.Errorf("%w: a kernels section without kernels", ErrFormat)
		}
	}
	if len(r.b) != 0 {
		return nil, ID{}, fmt.Errorf("%w: %d trailing bytes at byte %d", ErrFormat, len(r.b), r.off)
	}
	if err := checkID(head, h.stored); err != nil {
		return nil, ID{}, err
	}
	if err := b.validate(); err != nil {
		return nil, ID{}, fmt.Errorf("%w: %s", ErrFormat, err)
	}
	return b, h.stored, nil
}

// MaxHeadBytes bounds the head Open reads (metadata, resource summaries and
// section index; a 1024-rank ring's is 137 KB).
const MaxHeadBytes = 1 << 30

// Open reads a bundle of size bytes from r without reading its sections:
// the header, then the head, which it validates as Decode does (every
// range, channel pairing, the ID over the head), and the file's length
// against the index (and the source section's length, when there is one).
// Each rank's section is read when asked for (TableBytes, Table), checked
// against its SHA-256 in the index. The source is not read (Source is nil).
// r must stay readable while the bundle is used; reads through it are
// serialised. Errors are Decode's, or r's.
func Open(r io.ReaderAt, size int64) (*Bundle, error) {
	b, _, err := OpenID(r, size)
	return b, err
}

// OpenID is Open that also returns the bundle's ID (verified over the head).
func OpenID(r io.ReaderAt, size int64) (*Bundle, ID, error) {
	var hdr [HeaderBytes]byte
	if size < HeaderBytes {
		return nil, ID{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrFormat, size, HeaderBytes)
	}
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return nil, ID{}, err
	}
	h, err := parseHeader(hdr[:])
	if err != nil {
		return nil, ID{}, err
	}
	if h.headLen > uint64(size-HeaderBytes) || h.headLen > MaxHeadBytes {
		return nil, ID{}, fmt.Errorf("%w: at byte %d: head of %d bytes, only %d left", ErrFormat, HeaderBytes, h.headLen, size-HeaderBytes)
	}
	head := make([]byte, h.headLen)
	if _, err := r.ReadAt(head, HeaderBytes); err != nil {
		return nil, ID{}, err
	}
	b, idx, total, err := parseHead(head)
	if err != nil {
		return nil, ID{}, err
	}
	b.Verified = h.flags&flagVerified != 0
	start := HeaderBytes + int64(h.headLen)
	end := start + total
	if total > size-start {
		return nil, ID{}, fmt.Errorf("%w: the sections take %d bytes, only %d left after the head", ErrFormat, total, size-start)
	}
	want := end
	if h.flags&flagSource != 0 {
		var n [8]byte
		if size-end < 8 {
			return nil, ID{}, fmt.Errorf("%w: at byte %d: source length of 8 bytes, only %d left", ErrFormat, end, size-end)
		}
		if _, err := r.ReadAt(n[:], end); err != nil {
			return nil, ID{}, err
		}
		m := binary.LittleEndian.Uint64(n[:])
		if m > uint64(size-end-8) || uint64(size-end-8)-m < sha256.Size {
			return nil, ID{}, fmt.Errorf("%w: at byte %d: source of %d bytes and its hash, only %d left", ErrFormat, end+8, m, size-end-8)
		}
		want = end + 8 + int64(m) + sha256.Size
	}
	var kernels []lazyKernel
	if h.flags&flagKernels != 0 {
		if kernels, want, err = b.openKernels(r, want, size, idx); err != nil {
			return nil, ID{}, err
		}
		if len(kernels) == 0 {
			return nil, ID{}, fmt.Errorf("%w: a kernels section without kernels", ErrFormat)
		}
	}
	if size != want {
		return nil, ID{}, fmt.Errorf("%w: %d trailing bytes at byte %d", ErrFormat, size-want, want)
	}
	if err := checkID(head, h.stored); err != nil {
		return nil, ID{}, err
	}
	if err := b.validate(); err != nil {
		return nil, ID{}, fmt.Errorf("%w: %s", ErrFormat, err)
	}
	lz := &lazySections{r: r, off: make([]int64, len(idx)), len: make([]int64, len(idx)), sums: make([]ID, len(idx)), kernels: kernels}
	for i, e := range idx {
		lz.off[i], lz.len[i], lz.sums[i] = start+e.off, e.len, e.sum
	}
	b.lazy = lz
	return b, h.stored, nil
}

// TableBytes returns rank's section: its op table in the codegen/optable
// encoding (not decoded: Table decodes and checks it). A section of an
// opened bundle is read on first use and checked against its SHA-256 in
// the index; one of a NewLazy bundle is built on first use. Safe for
// concurrent use. Errors wrap ErrFormat (rank out of range), ErrChecksum
// (the section does not match its hash), or are the reader's or builder's.
func (b *Bundle) TableBytes(rank int) ([]byte, error) {
	if rank < 0 || rank >= len(b.Tables) {
		return nil, fmt.Errorf("%w: rank %d outside [0,%d)", ErrFormat, rank, len(b.Tables))
	}
	lz := b.lazy
	if lz == nil {
		return b.Tables[rank], nil
	}
	lz.mu.Lock()
	defer lz.mu.Unlock()
	if t := b.Tables[rank]; t != nil {
		return t, nil
	}
	if lz.build != nil {
		t, tbs, err := lz.build(rank)
		if err != nil {
			return nil, err
		}
		if t == nil {
			t = []byte{}
		}
		b.Ranks[rank].TBs, b.Tables[rank] = tbs, t
		return t, nil
	}
	t := make([]byte, lz.len[rank])
	if _, err := lz.r.ReadAt(t, lz.off[rank]); err != nil {
		return nil, fmt.Errorf("bundle: reading rank %d's section: %w", rank, err)
	}
	if sha256.Sum256(t) != lz.sums[rank] {
		return nil, fmt.Errorf("%w: rank %d's section does not match its SHA-256 in the index", ErrChecksum, rank)
	}
	b.Tables[rank] = t
	return t, nil
}

func (b *Bundle) decodeHead(r *reader) []index {
	m := &b.Meta
	nameLen := r.u32("name length")
	if r.err == nil && nameLen > MaxName {
		r.fail("name of %d bytes (at most %d)", nameLen, MaxName)
	}
	m.Name = string(r.take(uint64(nameLen), "name"))
	coll, proto, arr := r.u8("collective"), r.u8("protocol"), r.u8("arrangements")
	r.zeros(1, "reserved meta byte")
	if r.err != nil {
		return nil
	}
	if coll >= uint8(ir.NumCollectives) || proto >= uint8(ir.NumProtocols) || arr&^(arrInPlace|arrOutOfPlace) != 0 {
		r.fail("collective %d, protocol %d or arrangements %#x undefined", coll, proto, arr)
		return nil
	}
	m.Collective, m.Protocol = ir.Collective(coll), ir.Protocol(proto)
	m.InPlace, m.OutOfPlace = arr&arrInPlace != 0, arr&arrOutOfPlace != 0
	nranks := r.u32("nranks")
	nlocal := r.u32("nlocalranks")
	root := int32(r.u32("root"))
	threads := r.u32("threads")
	if r.err == nil && (nranks < 1 || nranks > ir.MaxRanks || nlocal > nranks || threads > MaxThreads) {
		r.fail("nranks %d, nlocalranks %d or threads %d out of range", nranks, nlocal, threads)
	}
	m.NRanks, m.NLocalRanks, m.Root, m.NumThreads = int(nranks), int(nlocal), int(root), int(threads)
	m.ChunksPerBlock = r.nonneg("chunks per block")
	m.MinBytes = r.nonneg("min bytes")
	m.MaxBytes = r.nonneg("max bytes")
	m.SliceBytes = r.nonneg("slice bytes")
	if r.err != nil {
		return nil
	}
	// Each rank takes at least 3*8 + 3*4 bytes of summary and its index
	// entry; check before allocating.
	const minRank = 3*8 + 3*4 + indexBytes
	if uint64(nranks)*minRank > uint64(len(r.b)) {
		r.fail("%d ranks cannot fit in %d bytes", nranks, len(r.b))
		return nil
	}
	b.Ranks = make([]RankResources, nranks)
	for i := range b.Ranks {
		res := &b.Ranks[i]
		for k := range res.Chunks {
			res.Chunks[k] = r.nonneg(ir.BufKind(k).LongName() + " chunks")
		}
		if n := r.count(channelBytes, "channels"); n > 0 {
			res.Channels = make([]ChannelEnd, n)
			for c := range res.Channels {
				ch := &res.Channels[c]
				peer, pc := r.u32("channel peer"), r.u32("peer channel")
				typ := r.u8("channel type")
				r.zeros(3, "reserved channel bytes")
				ch.Init = r.nonneg("channel init")
				if r.err == nil && (peer >= nranks || pc > math.MaxInt32 || typ >= uint8(ir.NumChannelTypes)) {
					r.fail("rank %d channel %d: peer %d, peer channel %d or type %d out of range", i, c, peer, pc, typ)
				}
				ch.Peer, ch.PeerChannel, ch.Type = int(peer), int(pc), ir.ChannelType(typ)
			}
		}
		if n := r.count(regBytes, "registrations"); n > 0 {
			res.Registrations = make([]Registration, n)
			for k := range res.Registrations {
				peer := r.u32("registration peer")
				buf := r.u8("registration buffer")
				r.zeros(3, "reserved registration bytes")
				if r.err == nil && (peer >= nranks || buf > uint8(ir.Output)) {
					r.fail("rank %d registration %d: peer %d or buffer %d out of range", i, k, peer, buf)
				}
				res.Registrations[k] = Registration{Peer: int(peer), Buf: ir.BufKind(buf)}
			}
		}
		if n := r.count(tbBytes, "threadblocks"); n > 0 {
			res.TBs = make([]TBSummary, n)
			for t := range res.TBs {
				res.TBs[t] = TBSummary{Ops: int(r.u32("op count")), OpsHash: r.u64("ops hash")}
			}
		}
		if r.err != nil {
			return nil
		}
	}
	if uint64(nranks)*indexBytes > uint64(len(r.b)) {
		r.fail("a section index of %d ranks cannot fit in %d bytes", nranks, len(r.b))
		return nil
	}
	idx := make([]index, nranks)
	for i := range idx {
		e := &idx[i]
		e.off = r.nonneg("section offset")
		e.len = r.nonneg("section length")
		copy(e.sum[:], r.take(sha256.Size, "section hash"))
	}
	return idx
}

// distinct returns prefixes of a and b's hex forms long enough to differ:
// Short's 12 characters, or up to two past the first difference.
func distinct(a, b ID) (string, string) {
	x, y := a.String(), b.String()
	n := 12
	for i := range x {
		if x[i] != y[i] {
			n = min(max(n, i+2), len(x))
			break
		}
	}
	return x[:n], y[:n]
}
