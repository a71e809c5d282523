package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
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

// Decode reads and validates a bundle (docs/bundle.md). Errors wrap
// ErrFormat (malformed bytes, a field out of range, trailing bytes),
// ErrVersion (a version other than Version) or ErrChecksum (the stored ID
// or source hash does not match). The returned bundle's tables and source
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

func decode(data []byte) (*Bundle, ID, error) {
	r := &reader{b: data}
	if len(data) < HeaderBytes {
		return nil, ID{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrFormat, len(data), HeaderBytes)
	}
	if string(r.take(8, "magic")) != Magic {
		return nil, ID{}, fmt.Errorf("%w: not a bundle (magic %q, want %q)", ErrFormat, data[:8], Magic)
	}
	if v := binary.LittleEndian.Uint16(r.take(2, "version")); v != Version {
		return nil, ID{}, fmt.Errorf("%w: version %d (this build reads version %d)", ErrVersion, v, Version)
	}
	flags := binary.LittleEndian.Uint16(r.take(2, "flags"))
	if flags&^flagSource != 0 {
		r.fail("unknown flags %#x", flags)
	}
	r.zeros(4, "reserved header bytes")
	bodyLen := r.u64("body length")
	var stored ID
	copy(stored[:], r.take(32, "ID"))
	if r.err != nil {
		return nil, ID{}, r.err
	}
	body := r.take(bodyLen, "body")
	if r.err != nil {
		return nil, ID{}, r.err
	}
	b := &Bundle{}
	br := &reader{b: body, off: HeaderBytes}
	b.decodeBody(br)
	if br.err == nil && len(br.b) != 0 {
		br.fail("%d bytes after the last rank", len(br.b))
	}
	if br.err != nil {
		return nil, ID{}, br.err
	}
	if flags&flagSource != 0 {
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
	if len(r.b) != 0 {
		return nil, ID{}, fmt.Errorf("%w: %d trailing bytes at byte %d", ErrFormat, len(r.b), r.off)
	}
	id := bodyID(body)
	if id != stored {
		got, want := distinct(id, stored)
		return nil, ID{}, fmt.Errorf("%w: the body hashes to %s, the header says %s", ErrChecksum, got, want)
	}
	if err := b.validate(); err != nil {
		return nil, ID{}, fmt.Errorf("%w: %s", ErrFormat, err)
	}
	return b, id, nil
}

func (b *Bundle) decodeBody(r *reader) {
	m := &b.Meta
	nameLen := r.u32("name length")
	if r.err == nil && nameLen > MaxName {
		r.fail("name of %d bytes (at most %d)", nameLen, MaxName)
	}
	m.Name = string(r.take(uint64(nameLen), "name"))
	coll, proto, arr := r.u8("collective"), r.u8("protocol"), r.u8("arrangements")
	r.zeros(1, "reserved meta byte")
	if r.err != nil {
		return
	}
	if coll >= uint8(ir.NumCollectives) || proto >= uint8(ir.NumProtocols) || arr&^(arrInPlace|arrOutOfPlace) != 0 {
		r.fail("collective %d, protocol %d or arrangements %#x undefined", coll, proto, arr)
		return
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
		return
	}
	// Each rank takes at least 3*8 + 4*4 bytes; check before allocating.
	const minRank = 3*8 + 3*4 + 8
	if uint64(nranks)*minRank > uint64(len(r.b)) {
		r.fail("%d ranks cannot fit in %d bytes", nranks, len(r.b))
		return
	}
	b.Ranks = make([]RankResources, nranks)
	b.Tables = make([][]byte, nranks)
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
		b.Tables[i] = bytes.Clone(r.take(r.u64("table length"), "table"))
		if b.Tables[i] == nil {
			b.Tables[i] = []byte{}
		}
		if r.err != nil {
			return
		}
	}
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
