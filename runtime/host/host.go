//go:build linux

// Package host is the host (CPU reference) backend of runtime/device: it runs
// each rank's op table with the host interpreter (runtime/interp.RunRank), so
// its results are those of docs/design/ir.md element for element — bit-exact
// with the interpreter by construction, and the reference the CUDA backend is
// tested against (ARCHITECTURE.md §7).
//
// Memory. Every allocation is its own shared-memory segment: a memfd
// (memfd_create, "/memfd:theseus-<gen>") of whole pages, mmap'd MAP_SHARED.
// An export is the owner's pid, the segment's fd, its size and generation;
// an import in the same process is the owner's own mapping (reference
// counted, so ranks that are goroutines of one process share memory without
// copies), and in another process it opens /proc/<pid>/fd/<fd> and mmaps it
// (the link name is checked, so a reused fd number is never mistaken for the
// segment). Segments disappear with the last process that maps them: a
// killed rank leaves nothing behind in /dev/shm. Ranks therefore work both as
// goroutines of one process and as OS processes of one node.
//
// Launches. A stream is a goroutine that runs its launches in order: an
// optional fence (wait until every peer's done word reaches the previous
// launch), the staging copies in, interp.RunRank, the staging copies out, and
// the store of the launch counter into this rank's done word. The first
// failure is sticky: later launches on the stream are skipped, and
// Synchronize and Err report it.
//
// User buffers that are not backend allocations (Go or C memory) can be
// passed as device.Ptr; they cannot be exported (device.ErrNotExportable),
// so the executor stages them through an allocation when, and only when, a
// peer must reach them. The caller keeps such memory alive (and, for Go
// memory, on the heap) until the launches that use it have finished.
package host

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// Name is the backend's registry name.
const Name = "host"

func init() {
	device.Register(Name, func() (device.Backend, error) { return Backend(), nil })
}

var (
	theBackend = &backend{byGen: map[uint64]*mapping{}, imports: map[importKey]*mapping{}}
	gens       atomic.Uint64
)

// Backend returns the process's host backend (one per process: every
// communicator and every in-process rank shares its allocation registry).
func Backend() device.Backend { return theBackend }

type importKey struct {
	pid int
	gen uint64
}

// mapping is one mmap'd segment in this process: an allocation made here
// (own) or a peer's segment imported from another process.
type mapping struct {
	base device.Ptr
	data []byte // whole pages
	// size is what Alloc was asked for (len(data) for an import): Bytes
	// refuses ranges past it, as the CUDA driver refuses a copy past the
	// end of a cuMemAlloc, although the page behind it is mapped.
	size    int64
	gen     uint64
	own     bool
	fd      int // own: the memfd; -1 once closed
	live    bool
	imports int // Import references
	key     importKey
}

type backend struct {
	mu      sync.RWMutex
	maps    []*mapping // sorted by base: every mapping in this process
	byGen   map[uint64]*mapping
	imports map[importKey]*mapping
}

func (b *backend) Name() string { return Name }

const pageSize = 4096

// Alloc creates a zeroed shared-memory segment of size bytes (rounded up to
// whole pages; page-aligned, so 64-byte aligned).
func (b *backend) Alloc(size int64) (device.Ptr, error) {
	if size < 1 {
		return 0, fmt.Errorf("host: alloc of %d bytes", size)
	}
	if size > 1<<46 {
		return 0, fmt.Errorf("host: alloc of %d bytes is over the 64 TiB limit", size)
	}
	n := (size + pageSize - 1) / pageSize * pageSize
	gen := gens.Add(1)
	fd, err := unix.MemfdCreate("theseus-"+strconv.FormatUint(gen, 10), unix.MFD_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
			// Every host-backend allocation is a file descriptor: many ranks
			// in one process need many.
			return 0, fmt.Errorf("host: memfd_create: %w (each host-backend allocation holds a file descriptor; raise the open-file limit, ulimit -n, or run fewer ranks per process)", err)
		}
		return 0, fmt.Errorf("host: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, n); err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("host: ftruncate %d bytes: %w", n, err)
	}
	data, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return 0, fmt.Errorf("host: mmap %d bytes: %w", n, err)
	}
	m := &mapping{base: device.Ptr(unsafe.Pointer(unsafe.SliceData(data))), data: data, size: size, gen: gen, own: true, fd: fd, live: true}
	b.mu.Lock()
	b.insert(m)
	b.byGen[gen] = m
	b.mu.Unlock()
	return m.base, nil
}

func (b *backend) insert(m *mapping) {
	i := sort.Search(len(b.maps), func(i int) bool { return b.maps[i].base >= m.base })
	b.maps = append(b.maps, nil)
	copy(b.maps[i+1:], b.maps[i:])
	b.maps[i] = m
}

func (b *backend) remove(m *mapping) {
	for i, x := range b.maps {
		if x == m {
			b.maps = append(b.maps[:i], b.maps[i+1:]...)
			break
		}
	}
}

// find returns the mapping containing [p, p+n), live or imported; nil if none.
func (b *backend) find(p device.Ptr, n int64) *mapping {
	i := sort.Search(len(b.maps), func(i int) bool { return b.maps[i].base > p }) - 1
	if i < 0 {
		return nil
	}
	m := b.maps[i]
	if n < 0 || p < m.base || int64(p-m.base) > int64(len(m.data))-n {
		return nil
	}
	return m
}

// release unmaps m once nothing uses it (caller holds mu).
func (b *backend) release(m *mapping) {
	if m.live || m.imports > 0 {
		return
	}
	b.remove(m)
	if m.own {
		delete(b.byGen, m.gen)
	} else {
		delete(b.imports, m.key)
	}
	unix.Munmap(m.data)
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd = -1
	}
}

// Free releases an allocation; in-process importers keep the segment
// mapped until they Unimport it.
func (b *backend) Free(p device.Ptr) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.find(p, 0)
	if m == nil || !m.own || !m.live || m.base != p {
		return fmt.Errorf("host: free of %#x, which is not a live allocation's base", uintptr(p))
	}
	m.live = false
	b.release(m)
	return nil
}

// Lookup finds the live allocation made in this process that contains
// [p, p+n).
func (b *backend) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	b.mu.RLock()
	m := b.find(p, n)
	b.mu.RUnlock()
	if m == nil || !m.own || !m.live {
		return device.Region{}, false
	}
	return device.Region{Base: m.base, Size: int64(len(m.data)), Gen: m.gen}, true
}

var handleMagic = [8]byte{'T', 'H', 'S', 'H', 'M', 'E', 'M', '1'}

const handleBytes = 40 // magic, pid u32, fd u32, size u64, gen u64, reserved

// Export returns the handle of a live allocation of this process.
func (b *backend) Export(r device.Region) (device.Handle, error) {
	b.mu.RLock()
	m := b.byGen[r.Gen]
	ok := m != nil && m.live && m.base == r.Base && int64(len(m.data)) == r.Size
	fd := -1
	if ok {
		fd = m.fd
	}
	b.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: region %#x+%d gen %d", device.ErrNotExportable, uintptr(r.Base), r.Size, r.Gen)
	}
	h := make([]byte, handleBytes)
	copy(h, handleMagic[:])
	binary.LittleEndian.PutUint32(h[8:], uint32(os.Getpid()))
	binary.LittleEndian.PutUint32(h[12:], uint32(fd))
	binary.LittleEndian.PutUint64(h[16:], uint64(r.Size))
	binary.LittleEndian.PutUint64(h[24:], r.Gen)
	return h, nil
}

// Import maps a handle made by Export in this or another process.
func (b *backend) Import(h device.Handle) (device.Region, error) {
	if len(h) != handleBytes || [8]byte(h[:8]) != handleMagic {
		return device.Region{}, fmt.Errorf("%w: not a host-backend handle", device.ErrBadHandle)
	}
	pid := int(binary.LittleEndian.Uint32(h[8:]))
	fd := int(binary.LittleEndian.Uint32(h[12:]))
	size := int64(binary.LittleEndian.Uint64(h[16:]))
	gen := binary.LittleEndian.Uint64(h[24:])
	if size < 1 || size > 1<<46 || size%pageSize != 0 {
		return device.Region{}, fmt.Errorf("%w: segment size %d", device.ErrBadHandle, size)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if pid == os.Getpid() {
		m := b.byGen[gen]
		if m == nil || !m.live || int64(len(m.data)) != size {
			return device.Region{}, fmt.Errorf("%w: allocation %d of this process is gone", device.ErrBadHandle, gen)
		}
		m.imports++
		return device.Region{Base: m.base, Size: size, Gen: gen}, nil
	}
	k := importKey{pid, gen}
	if m := b.imports[k]; m != nil {
		m.imports++
		return device.Region{Base: m.base, Size: size, Gen: gen}, nil
	}
	path := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	want := "/memfd:theseus-" + strconv.FormatUint(gen, 10)
	if link, err := os.Readlink(path); err != nil || (link != want && link != want+" (deleted)") {
		return device.Region{}, fmt.Errorf("%w: segment %d of process %d is gone (%s: %q, %v)", device.ErrBadHandle, gen, pid, path, link, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return device.Region{}, fmt.Errorf("%w: open %s: %v", device.ErrBadHandle, path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() != size {
		return device.Region{}, fmt.Errorf("%w: segment %s is not %d bytes", device.ErrBadHandle, path, size)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return device.Region{}, fmt.Errorf("host: mmap %s: %w", path, err)
	}
	m := &mapping{base: device.Ptr(unsafe.Pointer(unsafe.SliceData(data))), data: data, size: int64(len(data)), gen: gen, fd: -1, imports: 1, key: k}
	b.insert(m)
	b.imports[k] = m
	return device.Region{Base: m.base, Size: size, Gen: gen}, nil
}

// Unimport drops one reference taken by Import.
func (b *backend) Unimport(base device.Ptr) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.find(base, 0)
	if m == nil || m.base != base || m.imports == 0 {
		return fmt.Errorf("host: unimport of %#x, which is not an imported segment", uintptr(base))
	}
	m.imports--
	b.release(m)
	return nil
}

// Bytes returns the memory [p, p+n) as a byte slice: a slice of the mapping
// when p lies in a backend allocation or import, else the caller's own
// (foreign) memory at that address. n = 0 gives nil.
func Bytes(p device.Ptr, n int64) ([]byte, error) {
	return theBackend.bytes(p, n)
}

func (b *backend) bytes(p device.Ptr, n int64) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if n < 0 || p == 0 {
		return nil, fmt.Errorf("host: memory %#x+%d", uintptr(p), n)
	}
	b.mu.RLock()
	m := b.find(p, n)
	b.mu.RUnlock()
	if m != nil {
		off := int64(p - m.base)
		if off+n > m.size {
			return nil, fmt.Errorf("host: memory %#x+%d crosses the end of a backend allocation of %d bytes", uintptr(p), n, m.size)
		}
		return m.data[off : off+n : off+n], nil
	}
	if b.overlapsMapping(p, n) {
		return nil, fmt.Errorf("host: memory %#x+%d crosses the end of a backend allocation", uintptr(p), n)
	}
	return foreign(p, n), nil
}

func (b *backend) overlapsMapping(p device.Ptr, n int64) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, m := range b.maps {
		if p < m.base+device.Ptr(len(m.data)) && m.base < p+device.Ptr(n) {
			return true
		}
	}
	return false
}

// foreign views memory the backend does not own (Go or C memory the caller
// passed by address). The pointer is read back from the variable's bits so
// that no uintptr-to-pointer conversion is written out: the caller vouches
// for the memory being live.
func foreign(p device.Ptr, n int64) []byte {
	ptr := *(*unsafe.Pointer)(unsafe.Pointer(&p))
	return unsafe.Slice((*byte)(ptr), n)
}

// PtrOf returns the address of b's first byte as a device.Ptr (nil for an
// empty slice), for passing Go memory to the host backend. The caller keeps
// b alive until every launch using it has finished.
//
// b's backing array must not move while launches use it. Go moves goroutine
// stacks, and a small slice whose address only escapes as an integer would
// otherwise live on the caller's stack; storing the pointer in escapeSink
// makes b escape to the heap, which Go never moves.
func PtrOf(b []byte) device.Ptr {
	if len(b) == 0 {
		return 0
	}
	p := unsafe.SliceData(b)
	escapeSink.Store(p)
	return device.Ptr(unsafe.Pointer(p))
}

// escapeSink only exists to make PtrOf's argument escape (see PtrOf).
var escapeSink atomic.Pointer[byte]

// Upload copies src to dst (memory of this process).
func (b *backend) Upload(dst device.Ptr, src []byte) error {
	d, err := b.bytes(dst, int64(len(src)))
	if err != nil {
		return err
	}
	copy(d, src)
	return nil
}

// Download copies src to dst.
func (b *backend) Download(dst []byte, src device.Ptr) error {
	s, err := b.bytes(src, int64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, s)
	return nil
}

// Segments returns the number of live mappings (allocations and imports) in
// this process: a test hook for leak checks.
func Segments() int {
	theBackend.mu.RLock()
	defer theBackend.mu.RUnlock()
	return len(theBackend.maps)
}

// LoadWord implements device.WordLoader: an atomic load of the word at p.
func (b *backend) LoadWord(p device.Ptr) (uint64, error) {
	w, err := b.word(p)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint64(w), nil
}

var errWordAlign = errors.New("host: semaphore word not 8-byte aligned")

// word views the 8-byte word at p.
func (b *backend) word(p device.Ptr) (*uint64, error) {
	if p%8 != 0 {
		return nil, errWordAlign
	}
	w, err := b.bytes(p, 8)
	if err != nil {
		return nil, err
	}
	return (*uint64)(unsafe.Pointer(unsafe.SliceData(w))), nil
}

// ImportedFrom returns the process ids whose segments this process maps
// (its imports from other processes), sorted: a test hook showing which
// processes share memory with this one (ranks of different nodes never
// do: docs/transport.md).
func ImportedFrom() []int {
	theBackend.mu.RLock()
	defer theBackend.mu.RUnlock()
	var out []int
	for k := range theBackend.imports {
		if !slices.Contains(out, k.pid) {
			out = append(out, k.pid)
		}
	}
	slices.Sort(out)
	return out
}
