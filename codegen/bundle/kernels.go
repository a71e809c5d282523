package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/theseus-ccl/theseus/ir"
)

// Kernel is a rank's specialised kernel for one datatype: PTX that runs
// the rank's table, compiled in as constants (`theseusc compile
// --specialize`, codegen/specialize; docs/specialize.md). A runtime that
// can load it launches it instead of its generic executor; one that
// cannot ignores it. Kernels describe how a schedule runs, not what it
// computes: like the source they are not part of the ID, and each names
// the SHA-256 of the table it was built from (the section index's), which
// Decode and Open check.
type Kernel struct {
	Rank     int
	DataType ir.DataType
	PTX      []byte
}

// The kernels section (docs/bundle.md): flag bit 2, after the source.
const (
	flagKernels      = 1 << 2
	kernelEntryBytes = 4 + 1 + 3 + sha256.Size + 8 // rank, datatype, reserved, table SHA-256, PTX length
)

// validateKernels checks Kernels: ranks in range, datatypes defined, PTX
// not empty, sorted by (rank, datatype) and unique.
func (b *Bundle) validateKernels() error {
	for i, k := range b.Kernels {
		switch {
		case k.Rank < 0 || k.Rank >= b.Meta.NRanks:
			return fmt.Errorf("kernel %d: rank %d outside [0,%d)", i, k.Rank, b.Meta.NRanks)
		case k.DataType.Size() == 0:
			return fmt.Errorf("kernel %d: datatype %d undefined", i, k.DataType)
		case len(k.PTX) == 0:
			return fmt.Errorf("kernel %d: empty", i)
		case i > 0 && cmpKernel(b.Kernels[i-1], k) >= 0:
			return fmt.Errorf("kernel %d: not sorted by (rank, datatype) or repeated", i)
		}
	}
	return nil
}

func cmpKernel(a, b Kernel) int {
	if a.Rank != b.Rank {
		return a.Rank - b.Rank
	}
	return int(a.DataType) - int(b.DataType)
}

// SortKernels sorts ks by (rank, datatype), the order a bundle keeps them in.
func SortKernels(ks []Kernel) { slices.SortFunc(ks, cmpKernel) }

// kernelBytes is the kernels section's size.
func (b *Bundle) kernelBytes() int {
	n := 4
	for _, k := range b.Kernels {
		n += kernelEntryBytes + len(k.PTX) + sha256.Size
	}
	return n
}

// emitKernels writes the kernels section, each entry naming its rank's
// section SHA-256 from sums.
func (b *Bundle) emitKernels(emit func([]byte), sums []ID) {
	le := binary.LittleEndian
	emit(le.AppendUint32(nil, uint32(len(b.Kernels))))
	for _, k := range b.Kernels {
		e := make([]byte, kernelEntryBytes)
		le.PutUint32(e[0:], uint32(k.Rank))
		e[4] = uint8(k.DataType)
		copy(e[8:], sums[k.Rank][:])
		le.PutUint64(e[8+sha256.Size:], uint64(len(k.PTX)))
		emit(e)
		emit(k.PTX)
		sum := sha256.Sum256(k.PTX)
		emit(sum[:])
	}
}

// decodeKernels reads the kernels section from r (Decode), checking each
// entry's table hash against the index and its own hash.
func (b *Bundle) decodeKernels(r *reader, idx []index) error {
	n := r.count(kernelEntryBytes+sha256.Size, "kernels")
	for i := 0; i < n && r.err == nil; i++ {
		rank := int(r.u32("kernel rank"))
		dt := ir.DataType(r.u8("kernel datatype"))
		r.zeros(3, "kernel reserved bytes")
		tsum := r.take(sha256.Size, "kernel table hash")
		p := r.u64("kernel length")
		ptx := r.take(p, "kernel")
		sum := r.take(sha256.Size, "kernel hash")
		if r.err != nil {
			break
		}
		if rank >= len(idx) {
			return fmt.Errorf("%w: kernel %d of rank %d, the bundle has %d", ErrFormat, i, rank, len(idx))
		}
		if !bytes.Equal(tsum, idx[rank].sum[:]) {
			return fmt.Errorf("%w: kernel %d (rank %d, %v) was built from another table than rank %d's section", ErrChecksum, i, rank, dt, rank)
		}
		if got := sha256.Sum256(ptx); !bytes.Equal(got[:], sum) {
			return fmt.Errorf("%w: kernel %d (rank %d, %v) does not match its SHA-256", ErrChecksum, i, rank, dt)
		}
		b.Kernels = append(b.Kernels, Kernel{Rank: rank, DataType: dt, PTX: bytes.Clone(ptx)})
	}
	if r.err != nil {
		return r.err
	}
	if err := b.validateKernels(); err != nil {
		return fmt.Errorf("%w: %s", ErrFormat, err)
	}
	return nil
}

// lazyKernel is an opened bundle's kernel entry: where its PTX lies.
type lazyKernel struct {
	rank int
	dt   ir.DataType
	off  int64 // file offset of the PTX
	len  int64
	sum  ID
	ptx  []byte // once read
}

// openKernels reads the kernels section's entries from r at off (Open):
// their ranks, datatypes and table hashes, not their PTX. It returns the
// section's end. size is the file's length.
func (b *Bundle) openKernels(r io.ReaderAt, off, size int64, idx []index) ([]lazyKernel, int64, error) {
	var w [4]byte
	if size-off < 4 {
		return nil, 0, fmt.Errorf("%w: at byte %d: kernel count of 4 bytes, only %d left", ErrFormat, off, size-off)
	}
	if _, err := r.ReadAt(w[:], off); err != nil {
		return nil, 0, err
	}
	n := int64(binary.LittleEndian.Uint32(w[:]))
	off += 4
	if n > (size-off)/(kernelEntryBytes+sha256.Size) {
		return nil, 0, fmt.Errorf("%w: at byte %d: %d kernels do not fit the %d bytes left", ErrFormat, off, n, size-off)
	}
	var out []lazyKernel
	prev := Kernel{Rank: -1}
	for i := range n {
		var e [kernelEntryBytes]byte
		if size-off < kernelEntryBytes {
			return nil, 0, fmt.Errorf("%w: at byte %d: kernel %d's entry, only %d bytes left", ErrFormat, off, i, size-off)
		}
		if _, err := r.ReadAt(e[:], off); err != nil {
			return nil, 0, err
		}
		le := binary.LittleEndian
		k := lazyKernel{rank: int(le.Uint32(e[0:])), dt: ir.DataType(e[4]), off: off + kernelEntryBytes}
		p := le.Uint64(e[8+sha256.Size:])
		switch {
		case e[5] != 0 || e[6] != 0 || e[7] != 0:
			return nil, 0, fmt.Errorf("%w: at byte %d: kernel %d's reserved bytes are not zero", ErrFormat, off+5, i)
		case k.rank >= len(idx) || k.dt.Size() == 0 || p == 0 || cmpKernel(prev, Kernel{Rank: k.rank, DataType: k.dt}) >= 0:
			return nil, 0, fmt.Errorf("%w: at byte %d: kernel %d (rank %d, datatype %d, %d bytes): out of range, empty, or out of order", ErrFormat, off, i, k.rank, k.dt, p)
		case !bytes.Equal(e[8:8+sha256.Size], idx[k.rank].sum[:]):
			return nil, 0, fmt.Errorf("%w: kernel %d (rank %d, %v) was built from another table than rank %d's section", ErrChecksum, i, k.rank, k.dt, k.rank)
		case p > math.MaxInt64 || int64(p) > size-k.off || size-k.off-int64(p) < sha256.Size:
			return nil, 0, fmt.Errorf("%w: at byte %d: kernel %d of %d bytes and its hash, only %d left", ErrFormat, k.off, i, p, size-k.off)
		}
		k.len = int64(p)
		if _, err := r.ReadAt(k.sum[:], k.off+k.len); err != nil {
			return nil, 0, err
		}
		off = k.off + k.len + sha256.Size
		prev = Kernel{Rank: k.rank, DataType: k.dt}
		out = append(out, k)
	}
	return out, off, nil
}

// Kernel returns rank's specialised kernel for datatype dt (Kernels), or
// nil when the bundle has none. A kernel of an opened bundle is read on
// first use and checked against its SHA-256. Safe for concurrent use.
// Errors wrap ErrChecksum, or are the reader's.
func (b *Bundle) Kernel(rank int, dt ir.DataType) ([]byte, error) {
	if b.kernelSrc != nil {
		return b.kernelSrc(rank, dt)
	}
	lz := b.lazy
	if lz == nil || lz.r == nil {
		i, ok := slices.BinarySearchFunc(b.Kernels, Kernel{Rank: rank, DataType: dt}, cmpKernel)
		if !ok {
			return nil, nil
		}
		return b.Kernels[i].PTX, nil
	}
	lz.mu.Lock()
	defer lz.mu.Unlock()
	for i := range lz.kernels {
		k := &lz.kernels[i]
		if k.rank != rank || k.dt != dt {
			continue
		}
		if k.ptx != nil {
			return k.ptx, nil
		}
		ptx := make([]byte, k.len)
		if _, err := lz.r.ReadAt(ptx, k.off); err != nil {
			return nil, fmt.Errorf("bundle: reading rank %d's %v kernel: %w", rank, dt, err)
		}
		if sha256.Sum256(ptx) != k.sum {
			return nil, fmt.Errorf("%w: rank %d's %v kernel does not match its SHA-256", ErrChecksum, rank, dt)
		}
		k.ptx = ptx
		return ptx, nil
	}
	return nil, nil
}

// KernelSource gives a bundle's kernels on demand (SetKernelSource): the
// PTX of rank's specialised kernel for dt, nil when there is none.
type KernelSource func(rank int, dt ir.DataType) ([]byte, error)

// SetKernelSource makes f the source of b's kernels (Kernel, HasKernels),
// in place of a kernels section: a runtime's generated bundle (NewLazy)
// whose shape has prebuilt kernels (runtime/speckernels). Such kernels are
// not encoded (Encode writes b.Kernels only). Set it before b is shared.
func (b *Bundle) SetKernelSource(f KernelSource) { b.kernelSrc = f }

// HasKernels reports whether the bundle carries specialised kernels (or
// has a KernelSource).
func (b *Bundle) HasKernels() bool {
	if b.kernelSrc != nil {
		return true
	}
	if lz := b.lazy; lz != nil && lz.r != nil {
		return len(lz.kernels) > 0
	}
	return len(b.Kernels) > 0
}
