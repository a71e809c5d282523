package proxy

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Op is a set of port-channel operations in one descriptor, executed in the
// order put, signal, flush (port.h THESEUS_PORT_*).
type Op uint8

const (
	// OpPut copies Size bytes from the local region SrcRegion at SrcOff to
	// the peer's region DstRegion at DstOff. The source may be overwritten
	// only after a later flush of the channel completes.
	OpPut Op = 1
	// OpSignal adds 1 to the channel's semaphore word at the peer, after
	// every earlier put of the channel: a peer that sees the increment sees
	// the data.
	OpSignal Op = 2
	// OpFlush completes (the descriptor's ticket is done) once the channel's
	// earlier puts and signals have completed at the peer.
	OpFlush Op = 4
)

// Desc is one port-channel descriptor (port.h theseus_port_desc, 32 bytes).
type Desc struct {
	SrcOff, DstOff       uint64 // bytes into the regions (OpPut)
	Size                 uint32 // bytes (OpPut)
	SrcRegion, DstRegion uint16 // local region id, the peer's region id (OpPut)
	Channel              uint16 // the port channel (Conn.AddChannel)
	Op                   Op
}

// FIFO layout (port.h).
const (
	descBytes   = 32
	offTail     = 0
	offError    = 8
	offCapacity = 12
	offHead     = 64
	offRing     = 128
	// MaxCapacity is the largest FIFO (port.h THESEUS_PORT_MAX_CAPACITY):
	// seq values of consecutive laps must differ.
	MaxCapacity = 1 << 24
	// DefaultCapacity is the FIFO size Connect uses unless told (MSCCL++'s
	// default FIFO size as well).
	DefaultCapacity = 512
)

// FIFOBytes is the size of the host block of a FIFO of capacity slots.
func FIFOBytes(capacity int) int { return offRing + capacity*descBytes }

// HostBlock is host memory shared by the proxy and the producers: for the
// CUDA backend pinned and mapped into the device (Device is its device
// address), for the host backend ordinary memory (Device = the host
// address).
type HostBlock struct {
	Ptr    unsafe.Pointer
	Device uintptr
	Size   int
	Free   func() error
}

// AllocHost maps size bytes of zeroed anonymous memory (page-aligned,
// outside the Go heap): the host backend's HostBlock.
func AllocHost(size int) (HostBlock, error) {
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_SHARED)
	if err != nil {
		return HostBlock{}, fmt.Errorf("proxy: map %d bytes: %w", size, err)
	}
	p := unsafe.Pointer(&b[0])
	return HostBlock{Ptr: p, Device: uintptr(p), Size: size, Free: func() error { return syscall.Munmap(b) }}, nil
}

// FIFO is the Go view of a port-channel FIFO: the producer side for Go
// code (Post, Wait) and the consumer side for the proxy (peek, publish).
type FIFO struct {
	blk  HostBlock
	cap  uint64
	tail *uint64
	err  *uint32
	head *uint64
	ring unsafe.Pointer
	// help, when set, runs a round of the proxy from a waiting producer
	// (Proxy.help) and reports whether it did work.
	help func() bool
}

func newFIFO(blk HostBlock, capacity int) (*FIFO, error) {
	if capacity <= 0 || capacity&(capacity-1) != 0 || capacity > MaxCapacity {
		return nil, fmt.Errorf("proxy: FIFO capacity %d: want a power of two from 1 to %d", capacity, MaxCapacity)
	}
	if blk.Size < FIFOBytes(capacity) {
		return nil, fmt.Errorf("proxy: FIFO of %d slots needs %d bytes, block has %d", capacity, FIFOBytes(capacity), blk.Size)
	}
	f := &FIFO{blk: blk, cap: uint64(capacity),
		tail: (*uint64)(unsafe.Add(blk.Ptr, offTail)), err: (*uint32)(unsafe.Add(blk.Ptr, offError)),
		head: (*uint64)(unsafe.Add(blk.Ptr, offHead)), ring: unsafe.Add(blk.Ptr, offRing)}
	*(*uint32)(unsafe.Add(blk.Ptr, offCapacity)) = uint32(capacity)
	return f, nil
}

// Block is the FIFO's host block (its Device address is what a GPU
// producer is given).
func (f *FIFO) Block() HostBlock { return f.blk }

// Capacity is the number of slots.
func (f *FIFO) Capacity() int { return int(f.cap) }

// Tail is the number of descriptors the proxy has completed.
func (f *FIFO) Tail() uint64 { return atomic.LoadUint64(f.tail) }

// Failed reports whether the proxy marked the FIFO's connection failed.
func (f *FIFO) Failed() bool { return atomic.LoadUint32(f.err) != 0 }

func (f *FIFO) slot(t uint64) unsafe.Pointer { return unsafe.Add(f.ring, (t&(f.cap-1))*descBytes) }

// post writes d as ticket t (the caller owns t and has waited for space).
func (f *FIFO) post(t uint64, d Desc) {
	s := f.slot(t)
	*(*uint64)(s) = d.SrcOff
	*(*uint64)(unsafe.Add(s, 8)) = d.DstOff
	*(*uint64)(unsafe.Add(s, 16)) = uint64(d.Size) | uint64(d.SrcRegion)<<32 | uint64(d.DstRegion)<<48
	*(*uint32)(unsafe.Add(s, 24)) = uint32(d.Channel) | uint32(d.Op)<<16
	atomic.StoreUint32((*uint32)(unsafe.Add(s, 28)), uint32(t+1)) // release: the fields before it
}

// peek returns ticket t's descriptor once its producer has stored it.
func (f *FIFO) peek(t uint64) (Desc, bool) {
	s := f.slot(t)
	if atomic.LoadUint32((*uint32)(unsafe.Add(s, 28))) != uint32(t+1) {
		return Desc{}, false
	}
	w2 := *(*uint64)(unsafe.Add(s, 16))
	w3 := *(*uint32)(unsafe.Add(s, 24))
	return Desc{SrcOff: *(*uint64)(s), DstOff: *(*uint64)(unsafe.Add(s, 8)), Size: uint32(w2),
		SrcRegion: uint16(w2 >> 32), DstRegion: uint16(w2 >> 48), Channel: uint16(w3), Op: Op(w3 >> 16)}, true
}

func (f *FIFO) publish(tail uint64) { atomic.StoreUint64(f.tail, tail) }
func (f *FIFO) setFailed()          { atomic.StoreUint32(f.err, 1) }

// reserve takes the next ticket from the block's head counter and waits,
// bounded, for its slot to be free.
func (f *FIFO) reserve(b waitBound, failed func() error) (uint64, error) {
	t := atomic.AddUint64(f.head, 1) - 1
	for i := 0; t-atomic.LoadUint64(f.tail) >= f.cap; i++ {
		if i&7 == 7 && f.help != nil && f.help() {
			b.busy()
		}
		if err := spinCheck(i, b, failed); err != nil {
			if _, ok := err.(errTimeout); ok {
				return 0, fmt.Errorf("waiting for a free FIFO slot (ticket %d, %d completed of capacity %d): %w", t, f.Tail(), f.cap, err)
			}
			return 0, err
		}
	}
	return t, nil
}

// waitDone waits until ticket t has completed.
func (f *FIFO) waitDone(t uint64, b waitBound, failed func() error) error {
	for i := 0; atomic.LoadUint64(f.tail) <= t; i++ {
		if i&7 == 7 && f.help != nil && f.help() {
			b.busy()
		}
		if err := spinCheck(i, b, failed); err != nil {
			if _, ok := err.(errTimeout); ok {
				return fmt.Errorf("waiting for descriptor %d (%d completed): %w", t, f.Tail(), err)
			}
			return err
		}
	}
	return failed()
}

// errTimeout is a wait that passed THESEUS_TIMEOUT.
type errTimeout time.Duration

func (e errTimeout) Error() string {
	return fmt.Sprintf("timed out after %v (THESEUS_TIMEOUT)", time.Duration(e))
}

// waitBound is a wait's deadline and the timeout it came from, when it
// began (or last saw the proxy's round do work), and how long it spins
// before it sleeps.
type waitBound struct {
	deadline time.Time
	timeout  time.Duration
	start    time.Time
	spin     time.Duration
	h        *helper // the waiter's registration as a helper (nil: none)
}

// helper is a waiting goroutine's registration as a helper of the proxy
// (Proxy.helping), from the start of its wait until the wait ends or
// starts sleeping, whichever comes first: the proxy's goroutine backs off
// while helpers spin, so a registered waiter that sleeps would leave the
// worker progressed only at its wake-ups (a put stream over TCP then ran
// at a sixth of its rate).
type helper struct {
	p  *Proxy
	on bool
}

// startHelping registers the calling goroutine as a helper (stop ends it).
func (p *Proxy) startHelping() *helper {
	p.helping(1)
	return &helper{p: p, on: true}
}

// stop unregisters the helper; calling it again, or on nil, does nothing.
func (h *helper) stop() {
	if h != nil && h.on {
		h.on = false
		h.p.helping(-1)
	}
}

// busy restarts the spin: the waiter's own round of the proxy did work
// (data arriving, puts completing), so what it waits for is on its way and
// sleeping would only delay the progress that delivers it.
func (b *waitBound) busy() {
	if !b.start.IsZero() {
		b.start = time.Now()
	}
}

// spinCheck is one round of a bounded spin-wait: every 64 rounds it
// checks failed and the deadline, and yields the processor; a wait longer
// than its spin (THESEUS_PROXY_SPIN) sleeps instead, a sixteenth of the
// time waited so far, 10 us to 1 ms, as the proxy's idle loop does. (Waits
// that only yield starve the threads that would end them when the ranks
// outnumber the cores: a peer's rank computing, its proxy.)
func spinCheck(i int, b waitBound, failed func() error) error {
	if i&63 != 63 {
		return nil
	}
	if err := failed(); err != nil {
		return err
	}
	now := time.Now()
	if now.After(b.deadline) {
		return errTimeout(b.timeout)
	}
	if el := now.Sub(b.start); !b.start.IsZero() && el > b.spin {
		b.h.stop() // the proxy's goroutine progresses while this one sleeps
		time.Sleep(min(max(el/16, 10*time.Microsecond), time.Millisecond))
		return nil
	}
	runtime.Gosched()
	osYield()
	return nil
}

// osYield gives the processor to another thread (sched_yield): the
// spinning waiter and the proxy of another process may share a core.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
