package bundle

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"unicode/utf8"

	"github.com/theseus-ccl/theseus/ir"
)

// Field sizes of the body records (docs/bundle.md).
const (
	metaFixedBytes = 4 + 4*4 + 4*8 // enums, four 32-bit fields, four 64-bit fields
	channelBytes   = 20
	regBytes       = 8
	tbBytes        = 12
	flagSource     = 1 << 0
	arrInPlace     = 1 << 0
	arrOutOfPlace  = 1 << 1
)

// Validate checks that b can be encoded: every field in the range that
// Decode accepts (see Meta and RankResources), len(Ranks) and len(Tables)
// equal to Meta.NRanks, registrations sorted and unique, and every channel
// end paired with the end it names. Errors wrap ErrInvalid.
func (b *Bundle) Validate() error {
	if err := b.validate(); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, err)
	}
	return nil
}

func (b *Bundle) validate() error {
	m := &b.Meta
	switch {
	case len(m.Name) > MaxName:
		return fmt.Errorf("name of %d bytes (at most %d)", len(m.Name), MaxName)
	case !utf8.ValidString(m.Name):
		return fmt.Errorf("name %q is not UTF-8", m.Name)
	case m.Collective >= ir.NumCollectives:
		return fmt.Errorf("collective %d undefined", m.Collective)
	case m.Protocol >= ir.NumProtocols:
		return fmt.Errorf("protocol %d undefined", m.Protocol)
	case !m.InPlace && !m.OutOfPlace:
		return fmt.Errorf("neither in-place nor out-of-place")
	case m.NRanks < 1 || m.NRanks > ir.MaxRanks:
		return fmt.Errorf("nranks %d outside [1,%d]", m.NRanks, ir.MaxRanks)
	case m.NLocalRanks < 0 || m.NLocalRanks > m.NRanks:
		return fmt.Errorf("nlocalranks %d outside [0,%d]", m.NLocalRanks, m.NRanks)
	case m.Collective.Rooted() && (m.Root < 0 || m.Root >= m.NRanks):
		return fmt.Errorf("root %d of a %s outside [0,%d)", m.Root, m.Collective, m.NRanks)
	case !m.Collective.Rooted() && m.Root != -1:
		return fmt.Errorf("root %d on %s, which has none (want -1)", m.Root, m.Collective)
	case m.NumThreads < 0 || m.NumThreads > MaxThreads:
		return fmt.Errorf("threads %d outside [0,%d]", m.NumThreads, MaxThreads)
	case m.ChunksPerBlock < 1:
		return fmt.Errorf("chunks per block %d < 1", m.ChunksPerBlock)
	case m.MinBytes < 0 || m.MaxBytes < 0 || (m.MaxBytes != 0 && m.MaxBytes < m.MinBytes):
		return fmt.Errorf("message-size window [%d,%d] invalid", m.MinBytes, m.MaxBytes)
	case m.SliceBytes < 0:
		return fmt.Errorf("slice bytes %d < 0", m.SliceBytes)
	case len(b.Ranks) != m.NRanks || len(b.Tables) != m.NRanks:
		return fmt.Errorf("%d rank summaries and %d tables for nranks %d", len(b.Ranks), len(b.Tables), m.NRanks)
	}
	for r := range b.Ranks {
		res := &b.Ranks[r]
		for k, c := range res.Chunks {
			if c < 0 {
				return fmt.Errorf("rank %d: %s of %d chunks", r, ir.BufKind(k).LongName(), c)
			}
		}
		if len(res.Channels) > math.MaxUint32 || len(res.TBs) > math.MaxUint32 {
			return fmt.Errorf("rank %d: too many channels or threadblocks", r)
		}
		for c, ch := range res.Channels {
			switch {
			case ch.Peer < 0 || ch.Peer >= m.NRanks:
				return fmt.Errorf("rank %d channel %d: peer %d outside [0,%d)", r, c, ch.Peer, m.NRanks)
			case ch.Type >= ir.NumChannelTypes:
				return fmt.Errorf("rank %d channel %d: type %d undefined", r, c, ch.Type)
			case ch.Init < 0:
				return fmt.Errorf("rank %d channel %d: init %d < 0", r, c, ch.Init)
			}
		}
		for i, reg := range res.Registrations {
			switch {
			case reg.Peer < 0 || reg.Peer >= m.NRanks:
				return fmt.Errorf("rank %d registration %d: peer %d outside [0,%d)", r, i, reg.Peer, m.NRanks)
			case reg.Buf != ir.Input && reg.Buf != ir.Output:
				return fmt.Errorf("rank %d registration %d: buffer %v is not input or output", r, i, reg.Buf)
			case i > 0 && cmpReg(res.Registrations[i-1], reg) >= 0:
				return fmt.Errorf("rank %d registration %d: not sorted by (peer, buffer) or repeated", r, i)
			}
		}
		for t, tb := range res.TBs {
			if tb.Ops < 0 || tb.Ops > math.MaxUint32 {
				return fmt.Errorf("rank %d threadblock %d: %d ops", r, t, tb.Ops)
			}
		}
	}
	// Pairing, once every peer index is known to be in range.
	for r := range b.Ranks {
		for c, ch := range b.Ranks[r].Channels {
			pc := b.Ranks[ch.Peer].Channels
			if ch.PeerChannel < 0 || ch.PeerChannel >= len(pc) {
				return fmt.Errorf("rank %d channel %d: peer channel %d, rank %d has %d", r, c, ch.PeerChannel, ch.Peer, len(pc))
			}
			if o := pc[ch.PeerChannel]; o.Peer != r || o.PeerChannel != c || o.Type != ch.Type {
				return fmt.Errorf("rank %d channel %d: the other end (rank %d channel %d) does not name it back", r, c, ch.Peer, ch.PeerChannel)
			}
		}
	}
	return nil
}

// concurrentHash is the body size (bytes) from which Encode hashes on a
// second goroutine.
const concurrentHash = 1 << 20

// Encode returns the bundle's bytes (docs/bundle.md). Errors wrap ErrInvalid
// (see Validate).
//
// It allocates the result once and writes the body into it in place (each
// table is copied once) and hashes the body once; for a large body the hash
// runs on a second goroutine, beside the copy.
func Encode(b *Bundle) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	bodyLen := b.bodySize()
	size := HeaderBytes + bodyLen
	if b.Source != nil {
		size += 8 + len(b.Source) + sha256.Size
	}
	out := make([]byte, HeaderBytes, size)
	copy(out, Magic)
	le := binary.LittleEndian
	le.PutUint16(out[8:], Version)
	flags := uint16(0)
	if b.Source != nil {
		flags |= flagSource
	}
	le.PutUint16(out[10:], flags)
	// out[12:16] reserved, zero
	le.PutUint64(out[16:], uint64(bodyLen))
	var id ID
	if bodyLen < concurrentHash || runtime.GOMAXPROCS(0) < 2 {
		b.writeBody(func(p []byte) { out = append(out, p...) })
		id = bodyID(out[HeaderBytes:])
	} else {
		// Hash the body from the bundle's own slices on a second goroutine
		// while this one copies them: the two passes overlap.
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			h := idHash()
			b.writeBody(func(p []byte) { h.Write(p) })
			h.Sum(id[:0])
		}()
		b.writeBody(func(p []byte) { out = append(out, p...) })
		if v := <-done; v != nil {
			panic(v)
		}
	}
	copy(out[24:HeaderBytes], id[:])
	if b.Source != nil {
		out = le.AppendUint64(out, uint64(len(b.Source)))
		out = append(out, b.Source...)
		sum := sha256.Sum256(b.Source)
		out = append(out, sum[:]...)
	}
	return out, nil
}

// WriteTo writes the bundle's bytes (exactly Encode's) to w without
// building them in memory: it hashes the body once, then writes the header,
// the body's records and tables, and the source, piece by piece. It returns
// the bytes written and the first error: ErrInvalid (see Validate) before
// anything is written, or w's.
func (b *Bundle) WriteTo(w io.Writer) (int64, error) {
	id, err := b.ID() // validates
	if err != nil {
		return 0, err
	}
	var n int64
	var werr error
	emit := func(p []byte) {
		if werr == nil {
			var k int
			k, werr = w.Write(p)
			n += int64(k)
		}
	}
	var hdr [HeaderBytes]byte
	copy(hdr[:], Magic)
	le := binary.LittleEndian
	le.PutUint16(hdr[8:], Version)
	if b.Source != nil {
		le.PutUint16(hdr[10:], flagSource)
	}
	le.PutUint64(hdr[16:], uint64(b.bodySize()))
	copy(hdr[24:], id[:])
	emit(hdr[:])
	b.writeBody(emit)
	if b.Source != nil {
		emit(le.AppendUint64(nil, uint64(len(b.Source))))
		emit(b.Source)
		sum := sha256.Sum256(b.Source)
		emit(sum[:])
	}
	return n, werr
}

// bodySize is the length of the body in bytes.
func (b *Bundle) bodySize() int {
	size := 4 + len(b.Meta.Name) + metaFixedBytes
	for r := range b.Ranks {
		res := &b.Ranks[r]
		size += 3*8 + 4 + channelBytes*len(res.Channels) + 4 + regBytes*len(res.Registrations) +
			4 + tbBytes*len(res.TBs) + 8 + len(b.Tables[r])
	}
	return size
}

// encodeBody validates b and returns the body: metadata, then per rank its
// resources and table.
func (b *Bundle) encodeBody() ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	w := make([]byte, 0, b.bodySize())
	b.writeBody(func(p []byte) { w = append(w, p...) })
	return w, nil
}

// writeBody passes the body of a valid bundle to emit, in order: the
// metadata and resource records in short pieces from one reused buffer,
// each table as it is (emit must not keep the slices).
func (b *Bundle) writeBody(emit func([]byte)) {
	m := &b.Meta
	le := binary.LittleEndian
	w := make([]byte, 0, 4096)
	flush := func() {
		if len(w) > 0 {
			emit(w)
			w = w[:0]
		}
	}
	w = le.AppendUint32(w, uint32(len(m.Name)))
	w = append(w, m.Name...)
	arr := byte(0)
	if m.InPlace {
		arr |= arrInPlace
	}
	if m.OutOfPlace {
		arr |= arrOutOfPlace
	}
	w = append(w, byte(m.Collective), byte(m.Protocol), arr, 0)
	w = le.AppendUint32(w, uint32(m.NRanks))
	w = le.AppendUint32(w, uint32(m.NLocalRanks))
	w = le.AppendUint32(w, uint32(int32(m.Root)))
	w = le.AppendUint32(w, uint32(m.NumThreads))
	w = le.AppendUint64(w, uint64(m.ChunksPerBlock))
	w = le.AppendUint64(w, uint64(m.MinBytes))
	w = le.AppendUint64(w, uint64(m.MaxBytes))
	w = le.AppendUint64(w, uint64(m.SliceBytes))
	for r := range b.Ranks {
		res := &b.Ranks[r]
		for _, c := range res.Chunks {
			w = le.AppendUint64(w, uint64(c))
		}
		w = le.AppendUint32(w, uint32(len(res.Channels)))
		for _, ch := range res.Channels {
			w = le.AppendUint32(w, uint32(ch.Peer))
			w = le.AppendUint32(w, uint32(ch.PeerChannel))
			w = append(w, byte(ch.Type), 0, 0, 0)
			w = le.AppendUint64(w, uint64(ch.Init))
			if len(w) >= 4000 {
				flush()
			}
		}
		w = le.AppendUint32(w, uint32(len(res.Registrations)))
		for _, reg := range res.Registrations {
			w = le.AppendUint32(w, uint32(reg.Peer))
			w = append(w, byte(reg.Buf), 0, 0, 0)
			if len(w) >= 4000 {
				flush()
			}
		}
		w = le.AppendUint32(w, uint32(len(res.TBs)))
		for _, tb := range res.TBs {
			w = le.AppendUint32(w, uint32(tb.Ops))
			w = le.AppendUint64(w, tb.OpsHash)
			if len(w) >= 4000 {
				flush()
			}
		}
		w = le.AppendUint64(w, uint64(len(b.Tables[r])))
		flush()
		emit(b.Tables[r])
	}
	flush()
}
