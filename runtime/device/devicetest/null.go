package devicetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// Null is a backend whose launches do nothing but raise the launch's
// started and finished words (device.Args.Started, HDone): memory is Go
// memory (exportable within the process only), streams complete every
// launch at once. It isolates the host cost of the layers above a backend
// (selection, the executor's walk, its pushes to peers) in benchmarks and
// allocation tests.
type Null struct {
	mu     sync.Mutex
	allocs []nullAlloc // sorted by base
	gen    uint64
	// Launches counts launches enqueued on every stream.
	Launches atomic.Uint64
}

type nullAlloc struct {
	region device.Region
	mem    []byte
}

// NewNull returns a null backend.
func NewNull() *Null { return &Null{} }

func (b *Null) Name() string { return "null" }

func (b *Null) Alloc(size int64) (device.Ptr, error) {
	if size < 1 || size > 1<<40 {
		return 0, fmt.Errorf("null: alloc of %d bytes", size)
	}
	raw := make([]byte, size+64)
	off := (64 - int(uintptr(unsafe.Pointer(unsafe.SliceData(raw)))%64)) % 64
	mem := raw[off : off+int(size)]
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	a := nullAlloc{region: device.Region{Base: device.Ptr(unsafe.Pointer(unsafe.SliceData(mem))), Size: size, Gen: b.gen}, mem: mem}
	i := sort.Search(len(b.allocs), func(i int) bool { return b.allocs[i].region.Base >= a.region.Base })
	b.allocs = append(b.allocs, nullAlloc{})
	copy(b.allocs[i+1:], b.allocs[i:])
	b.allocs[i] = a
	return a.region.Base, nil
}

func (b *Null) find(p device.Ptr, n int64) int {
	i := sort.Search(len(b.allocs), func(i int) bool { return b.allocs[i].region.Base > p }) - 1
	if i < 0 || !b.allocs[i].region.Contains(p, n) {
		return -1
	}
	return i
}

func (b *Null) Free(p device.Ptr) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.find(p, 0)
	if i < 0 || b.allocs[i].region.Base != p {
		return errors.New("null: free of a pointer it did not allocate")
	}
	b.allocs = append(b.allocs[:i], b.allocs[i+1:]...)
	return nil
}

func (b *Null) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := b.find(p, n); i >= 0 {
		return b.allocs[i].region, true
	}
	return device.Region{}, false
}

func (b *Null) Export(r device.Region) (device.Handle, error) {
	h := make([]byte, 24)
	binary.LittleEndian.PutUint64(h, uint64(r.Base))
	binary.LittleEndian.PutUint64(h[8:], uint64(r.Size))
	binary.LittleEndian.PutUint64(h[16:], r.Gen)
	return h, nil
}

func (b *Null) Import(h device.Handle) (device.Region, error) {
	if len(h) != 24 {
		return device.Region{}, device.ErrBadHandle
	}
	r := device.Region{Base: device.Ptr(binary.LittleEndian.Uint64(h)), Size: int64(binary.LittleEndian.Uint64(h[8:])), Gen: binary.LittleEndian.Uint64(h[16:])}
	if got, ok := b.Lookup(r.Base, r.Size); !ok || got != r {
		return device.Region{}, device.ErrBadHandle
	}
	return r, nil
}

func (b *Null) Unimport(device.Ptr) error { return nil }

func (b *Null) bytes(p device.Ptr, n int64) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.find(p, n)
	if i < 0 {
		return nil, fmt.Errorf("null: %#x+%d is not its memory", uintptr(p), n)
	}
	off := int64(p - b.allocs[i].region.Base)
	return b.allocs[i].mem[off : off+n], nil
}

func (b *Null) Upload(dst device.Ptr, src []byte) error {
	d, err := b.bytes(dst, int64(len(src)))
	if err == nil {
		copy(d, src)
	}
	return err
}

func (b *Null) Download(dst []byte, src device.Ptr) error {
	s, err := b.bytes(src, int64(len(dst)))
	if err == nil {
		copy(dst, s)
	}
	return err
}

func (b *Null) NewStream() (device.Stream, error) { return &nullStream{b: b}, nil }

type nullPrepared struct {
	started, hdone *uint64
}

func (*nullPrepared) Release() {}

// RebindPeer implements device.Rebinder (nothing to repoint).
func (*nullPrepared) RebindPeer(int, int, device.Mem) error { return nil }

// Prepare accepts any arguments with a table.
func (b *Null) Prepare(a *device.Args) (device.Prepared, error) {
	if a == nil || a.Table == nil {
		return nil, errors.New("null: prepare without a table")
	}
	p := &nullPrepared{}
	var err error
	if a.Started != 0 {
		if p.started, err = b.word(a.Started); err != nil {
			return nil, err
		}
	}
	if a.HDone != 0 {
		if p.hdone, err = b.word(a.HDone); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (b *Null) word(p device.Ptr) (*uint64, error) {
	m, err := b.bytes(p, 8)
	if err != nil || p%8 != 0 {
		return nil, fmt.Errorf("null: word at %#x: %v", uintptr(p), err)
	}
	return (*uint64)(unsafe.Pointer(unsafe.SliceData(m))), nil
}

// LoadWord implements device.WordLoader.
func (b *Null) LoadWord(p device.Ptr) (uint64, error) {
	w, err := b.word(p)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint64(w), nil
}

// raise makes *w at least v.
func raise(w *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(w)
		if old >= v || atomic.CompareAndSwapUint64(w, old, v) {
			return
		}
	}
}

// Rebase implements device.Rebaser: a launch that does nothing, like
// Prepare's.
func (b *Null) Rebase(p device.Prepared, a *device.Args) (device.Prepared, error) {
	np, ok := p.(*nullPrepared)
	if !ok || np == nil || a == nil {
		return nil, errors.New("null: rebase of state another backend prepared")
	}
	return &nullPrepared{started: np.started, hdone: np.hdone}, nil
}

// nullP2P is a point-to-point launch that moves nothing.
type nullP2P struct{}

func (*nullP2P) Release() {}

// PrepareP2P implements device.P2PPreparer: a launch that moves nothing
// (the receive buffers keep their bytes).
func (b *Null) PrepareP2P(a *device.P2PArgs) (device.Prepared, error) {
	if a == nil {
		return nil, errors.New("null: PrepareP2P without arguments")
	}
	if err := a.Geometry.Check(); err != nil {
		return nil, fmt.Errorf("null: p2p geometry: %w", err)
	}
	return &nullP2P{}, nil
}

// RebaseP2P implements device.P2PRebaser: a launch that moves nothing,
// like PrepareP2P's.
func (b *Null) RebaseP2P(p device.Prepared, _, _ int64) (device.Prepared, error) {
	if _, ok := p.(*nullP2P); !ok {
		return nil, errors.New("null: point-to-point rebase of state another backend prepared")
	}
	return &nullP2P{}, nil
}

type nullStream struct {
	b      *Null
	closed atomic.Bool
}

func (s *nullStream) Launch(p device.Prepared, launch uint64, _ bool) error {
	if s.closed.Load() {
		return device.ErrClosed
	}
	if np, ok := p.(*nullPrepared); ok {
		if np.started != nil {
			raise(np.started, launch)
		}
		if np.hdone != nil {
			raise(np.hdone, launch)
		}
	}
	s.b.Launches.Add(1)
	return nil
}

func (s *nullStream) Synchronize() error { return nil }
func (s *nullStream) Err() error         { return nil }
func (s *nullStream) Capturing() bool    { return false }
func (s *nullStream) Close() error       { s.closed.Store(true); return nil }
