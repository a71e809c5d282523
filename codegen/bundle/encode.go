package bundle

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"unicode/utf8"

	"github.com/theseus-ccl/theseus/ir"
)

// Field sizes of the body records (docs/bundle.md).
const (
	metaFixedBytes = 4 + 4*4 + 4*8 // enums, four 32-bit fields, four 64-bit fields
	channelBytes   = 20
	regBytes       = 8
	tbBytes        = 12
	indexBytes     = 8 + 8 + sha256.Size // per rank: section offset, length, SHA-256
	flagSource     = 1 << 0
	flagVerified   = 1 << 1
	arrInPlace     = 1 << 0
	arrOutOfPlace  = 1 << 1
)

// Validate checks that b can be encoded: every field in the range that
// Decode accepts (see Meta and RankResources), len(Ranks) and len(Tables)
// equal to Meta.NRanks, registrations sorted and unique, and every channel
// end paired with the end it names. It reads no section of an opened
// bundle. Errors wrap ErrInvalid.
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
	if err := b.validateKernels(); err != nil {
		return err
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

// parallelHash is the total table size (bytes) from which the sections are
// hashed on several goroutines.
const parallelHash = 1 << 20

// tableLens returns each rank's table length: the table's, or, for a section
// of an opened bundle not read yet, the index's. The caller holds no lock.
func (b *Bundle) tableLens() []int64 {
	lens := make([]int64, len(b.Tables))
	b.withTables(func(ts [][]byte) {
		for r, t := range ts {
			if t == nil && b.lazy != nil {
				lens[r] = b.lazy.len[r]
			} else {
				lens[r] = int64(len(t))
			}
		}
	})
	return lens
}

// withTables calls f with b.Tables, under the lock of an opened bundle.
func (b *Bundle) withTables(f func([][]byte)) {
	if b.lazy != nil {
		b.lazy.mu.Lock()
		defer b.lazy.mu.Unlock()
	}
	f(b.Tables)
}

// sectionSums returns each section's SHA-256: of its table, or, for a
// section of an opened bundle not read yet, the index's. Large tables are
// hashed on up to GOMAXPROCS goroutines.
func (b *Bundle) sectionSums() []ID {
	sums := make([]ID, len(b.Tables))
	b.withTables(func(ts [][]byte) {
		total := 0
		for _, t := range ts {
			total += len(t)
		}
		hashOne := func(r int) {
			if ts[r] == nil && b.lazy != nil {
				sums[r] = b.lazy.sums[r]
			} else {
				sums[r] = sha256.Sum256(ts[r])
			}
		}
		workers := min(runtime.GOMAXPROCS(0), len(ts))
		if total < parallelHash || workers < 2 {
			for r := range ts {
				hashOne(r)
			}
			return
		}
		var next sync.Mutex
		r0 := 0
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					next.Lock()
					r := r0
					r0++
					next.Unlock()
					if r >= len(ts) {
						return
					}
					hashOne(r)
				}
			}()
		}
		wg.Wait()
	})
	return sums
}

// allTables returns every rank's table, reading the sections of an opened
// bundle that were not read yet (each checked against its hash).
func (b *Bundle) allTables() ([][]byte, error) {
	out := make([][]byte, len(b.Tables))
	for r := range b.Tables {
		t, err := b.TableBytes(r)
		if err != nil {
			return nil, err
		}
		out[r] = t
	}
	return out, nil
}

// header returns the 56-byte file header.
func (b *Bundle) header(headLen int, id ID) []byte {
	hdr := make([]byte, HeaderBytes)
	copy(hdr, Magic)
	le := binary.LittleEndian
	le.PutUint16(hdr[8:], Version)
	flags := uint16(0)
	if b.Source != nil {
		flags |= flagSource
	}
	if b.Verified {
		flags |= flagVerified
	}
	if len(b.Kernels) > 0 {
		flags |= flagKernels
	}
	le.PutUint16(hdr[10:], flags)
	// hdr[12:16] reserved, zero
	le.PutUint64(hdr[16:], uint64(headLen))
	copy(hdr[24:], id[:])
	return hdr
}

// Encode returns the bundle's bytes (docs/bundle.md), reading every section
// of an opened bundle first (its Source, which Open does not read, is
// left out). Errors wrap ErrInvalid (see Validate), or are those of reading
// a section.
//
// It hashes the tables once (on several goroutines when they are large),
// allocates the result once and copies each table into it once.
func Encode(b *Bundle) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	tables, err := b.allTables()
	if err != nil {
		return nil, err
	}
	sums := b.sectionSums()
	lens := make([]int64, len(tables))
	size := 0
	for r, t := range tables {
		lens[r] = int64(len(t))
		size += len(t)
	}
	head := b.appendHead(nil, lens, sums)
	size += HeaderBytes + len(head)
	if b.Source != nil {
		size += 8 + len(b.Source) + sha256.Size
	}
	if len(b.Kernels) > 0 {
		size += b.kernelBytes()
	}
	out := make([]byte, 0, size)
	out = append(out, b.header(len(head), headID(head))...)
	out = append(out, head...)
	for _, t := range tables {
		out = append(out, t...)
	}
	if b.Source != nil {
		out = binary.LittleEndian.AppendUint64(out, uint64(len(b.Source)))
		out = append(out, b.Source...)
		sum := sha256.Sum256(b.Source)
		out = append(out, sum[:]...)
	}
	if len(b.Kernels) > 0 {
		b.emitKernels(func(p []byte) { out = append(out, p...) }, sums)
	}
	return out, nil
}

// WriteTo writes the bundle's bytes (exactly Encode's) to w without
// building them in memory: it hashes the tables once, then writes the
// header, the head, each table and the source, piece by piece. It returns
// the bytes written and the first error: ErrInvalid (see Validate) or a
// section's read error before anything is written, or w's.
func (b *Bundle) WriteTo(w io.Writer) (int64, error) {
	if err := b.Validate(); err != nil {
		return 0, err
	}
	tables, err := b.allTables()
	if err != nil {
		return 0, err
	}
	sums := b.sectionSums()
	lens := make([]int64, len(tables))
	for r, t := range tables {
		lens[r] = int64(len(t))
	}
	head := b.appendHead(nil, lens, sums)
	var n int64
	var werr error
	emit := func(p []byte) {
		if werr == nil {
			var k int
			k, werr = w.Write(p)
			n += int64(k)
		}
	}
	emit(b.header(len(head), headID(head)))
	emit(head)
	for _, t := range tables {
		emit(t)
	}
	if b.Source != nil {
		emit(binary.LittleEndian.AppendUint64(nil, uint64(len(b.Source))))
		emit(b.Source)
		sum := sha256.Sum256(b.Source)
		emit(sum[:])
	}
	if len(b.Kernels) > 0 {
		b.emitKernels(emit, sums)
	}
	return n, werr
}

// headSize is the length of the head in bytes.
func (b *Bundle) headSize() int {
	size := 4 + len(b.Meta.Name) + metaFixedBytes
	for r := range b.Ranks {
		res := &b.Ranks[r]
		size += 3*8 + 4 + channelBytes*len(res.Channels) + 4 + regBytes*len(res.Registrations) +
			4 + tbBytes*len(res.TBs) + indexBytes
	}
	return size
}

// appendHead appends the head of a valid bundle to w: the metadata, every
// rank's resource summary, then the section index (lens and sums are the
// tables' lengths and SHA-256s, in rank order).
func (b *Bundle) appendHead(w []byte, lens []int64, sums []ID) []byte {
	if w == nil {
		w = make([]byte, 0, b.headSize())
	}
	m := &b.Meta
	le := binary.LittleEndian
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
		}
		w = le.AppendUint32(w, uint32(len(res.Registrations)))
		for _, reg := range res.Registrations {
			w = le.AppendUint32(w, uint32(reg.Peer))
			w = append(w, byte(reg.Buf), 0, 0, 0)
		}
		w = le.AppendUint32(w, uint32(len(res.TBs)))
		for _, tb := range res.TBs {
			w = le.AppendUint32(w, uint32(tb.Ops))
			w = le.AppendUint64(w, tb.OpsHash)
		}
	}
	var off int64
	for r := range b.Ranks {
		w = le.AppendUint64(w, uint64(off))
		w = le.AppendUint64(w, uint64(lens[r]))
		w = append(w, sums[r][:]...)
		off += lens[r]
	}
	return w
}
