//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// prepared is one rank's launch state for one request shape: the
// interpreter's memory for even and odd launches (they differ only in the
// scratch half), the staging copies, and the words of the fence.
type prepared struct {
	table *optable.Table
	rank  int
	req   launch.Request // Launch is filled per launch
	mem   [2]*interp.RankMem
	abort *uint64
	done  *uint64
	fence []fenceWord
	// portFence are the fences with peers on other nodes (through the
	// proxy: their done words are not mapped here).
	portFence []portFence
	stageIn   []copyOp
	stageOut  []copyOp
	// Foreign (caller-owned) input and output memory is kept as addresses
	// and viewed only while a launch runs, so that a cached prepared launch
	// never keeps Go memory alive or points the garbage collector at freed
	// memory.
	foreignIn, foreignOut device.Mem
}

type fenceWord struct {
	peer int
	word *uint64
}

type portFence struct {
	peer              int
	conn              device.PortConn
	ch                uint16
	inbound, expected *uint64
}

// copyOp is a staging copy; a nil side is the foreign memory at its Mem.
type copyOp struct {
	dst, src   []byte
	fdst, fsrc device.Mem
}

func (c copyOp) do() {
	dst, src := c.dst, c.src
	if dst == nil && c.fdst.Size > 0 {
		dst = foreign(c.fdst.Ptr, c.fdst.Size)
	}
	if src == nil && c.fsrc.Size > 0 {
		src = foreign(c.fsrc.Ptr, c.fsrc.Size)
	}
	copy(dst, src)
}

func (p *prepared) Release() {}

// Prepare resolves every address of a into this process's memory.
func (b *backend) Prepare(a *device.Args) (device.Prepared, error) {
	if a == nil || a.Table == nil {
		return nil, errors.New("host: prepare without a table")
	}
	t := a.Table
	if len(a.Ends) != len(t.Channels) {
		return nil, fmt.Errorf("host: %d channel ends for a table of %d channels", len(a.Ends), len(t.Channels))
	}
	p := &prepared{table: t, rank: a.Rank,
		req: launch.Request{Count: a.Count, DataType: a.DataType, RedOp: a.RedOp, Root: a.Root, InPlace: a.InPlace,
			PacketType: a.PacketType, Slices: a.Layout.Slices, Timeout: a.Timeout}}
	var err error
	mem := func(m device.Mem) []byte {
		if err != nil || m.Size == 0 {
			return nil
		}
		var s []byte
		s, err = b.bytes(m.Ptr, m.Size)
		return s
	}
	// local resolves caller memory: a mapping's slice, or nil and the
	// foreign range.
	local := func(m device.Mem) ([]byte, device.Mem) {
		if err != nil || m.Size == 0 {
			return nil, device.Mem{}
		}
		if m.Ptr == 0 || m.Size < 0 {
			err = fmt.Errorf("host: memory %#x+%d", uintptr(m.Ptr), m.Size)
			return nil, device.Mem{}
		}
		b.mu.RLock()
		mp := b.find(m.Ptr, m.Size)
		b.mu.RUnlock()
		if mp == nil {
			if b.overlapsMapping(m.Ptr, m.Size) {
				err = fmt.Errorf("host: memory %#x+%d crosses the end of a backend allocation", uintptr(m.Ptr), m.Size)
			}
			return nil, m
		}
		return mem(m), device.Mem{}
	}
	var in, out []byte
	in, p.foreignIn = local(a.Buf[device.Input])
	out, p.foreignOut = local(a.Buf[device.Output])
	word := func(w device.Ptr) *uint64 {
		if err != nil {
			return nil
		}
		var x *uint64
		x, err = b.word(w)
		return x
	}
	// Scratch as the interpreter must see it in even and odd launches: it
	// adds its own LL half (this table's scratch bytes) to odd launches, so
	// the odd view starts that much before the communicator's fixed half.
	shift := [2]int64{0, 0}
	if a.ScratchHalf > 0 {
		shift[1] = a.ScratchHalf
		if t.Protocol == ir.LL {
			oddReq := p.req
			oddReq.Launch = 1
			own, herr := launch.ScratchHalfOffset(t, a.Rank, oddReq)
			if herr != nil {
				return nil, herr
			}
			if own > a.ScratchHalf {
				return nil, fmt.Errorf("host: LL scratch half of %d bytes does not fit the communicator's half of %d", own, a.ScratchHalf)
			}
			shift[1] = a.ScratchHalf - own
		}
	}
	view := func(m device.Mem, parity int) device.Mem {
		if m.Size == 0 || shift[parity] == 0 {
			return m
		}
		if shift[parity] > m.Size {
			return device.Mem{}
		}
		return device.Mem{Ptr: m.Ptr + device.Ptr(shift[parity]), Size: m.Size - shift[parity]}
	}
	for parity := range 2 {
		m := &interp.RankMem{
			Buffers: interp.Buffers{Input: in, Output: out, Scratch: mem(view(a.Buf[device.Scratch], parity))},
			Ends:    make([]interp.End, len(a.Ends)),
		}
		for c, e := range a.Ends {
			if e.Port != nil {
				m.Ends[c] = interp.End{Inbound: word(e.Inbound), Expected: word(e.Expected), Port: portEnd(e.Port, shift[parity])}
				continue
			}
			m.Ends[c] = interp.End{Inbound: word(e.Inbound), PeerInbound: word(e.PeerInbound), Expected: word(e.Expected),
				Peer: interp.Buffers{Input: mem(e.PeerBuf[device.Input]), Output: mem(e.PeerBuf[device.Output]),
					Scratch: mem(view(e.PeerBuf[device.Scratch], parity))}}
		}
		if a.Publish.Size > 0 {
			pb := mem(a.Publish)
			if err == nil {
				m.Publish, err = interp.Words(pb, int(a.Publish.Size/8))
			}
		}
		p.mem[parity] = m
	}
	p.abort = word(a.Abort)
	for _, m := range p.mem {
		m.Abort = p.abort
	}
	p.done = word(a.Done)
	for _, f := range a.Fence {
		p.fence = append(p.fence, fenceWord{peer: f.Peer, word: word(f.Word)})
	}
	for _, f := range a.PortFence {
		p.portFence = append(p.portFence, portFence{peer: f.Peer, conn: f.Conn, ch: f.Channel, inbound: word(f.Inbound), expected: word(f.Expected)})
	}
	stage := func(c device.Copy) copyOp {
		var op copyOp
		op.dst, op.fdst = local(device.Mem{Ptr: c.Dst, Size: c.N})
		op.src, op.fsrc = local(device.Mem{Ptr: c.Src, Size: c.N})
		return op
	}
	for _, c := range a.StageIn {
		p.stageIn = append(p.stageIn, stage(c))
	}
	for _, c := range a.StageOut {
		p.stageOut = append(p.stageOut, stage(c))
	}
	if err != nil {
		return nil, err
	}
	if p.abort == nil || p.done == nil {
		return nil, errors.New("host: prepare without abort or done word")
	}
	return p, nil
}

// LaunchError is a failed launch on a host stream.
type LaunchError struct {
	Rank   int
	Launch uint64
	// Peer is the physical rank the launch waited for when it failed
	// (a fence), or -1.
	Peer int
	Err  error
}

func (e *LaunchError) Error() string {
	return fmt.Sprintf("host: rank %d launch %d: %v", e.Rank, e.Launch, e.Err)
}

func (e *LaunchError) Unwrap() error { return e.Err }

// PeerRank is the peer the launch waited for when it failed, or -1.
func (e *LaunchError) PeerRank() int { return e.Peer }

type task struct {
	p      *prepared
	launch uint64
	fence  bool
}

// stream runs launches on one goroutine, in order.
type stream struct {
	ch     chan task
	ctx    context.Context
	cancel context.CancelFunc

	sendMu    sync.RWMutex // held to send on ch; Close takes it to close ch
	mu        sync.Mutex
	cond      sync.Cond
	submitted uint64 // guarded by mu
	completed uint64 // guarded by mu
	closed    bool   // guarded by mu
	err       atomic.Pointer[error]
	exited    chan struct{}
}

// queueDepth bounds the launches enqueued and not yet run; Launch blocks
// beyond it (as a full CUDA launch queue does).
const queueDepth = 1024

// NewStream starts a stream goroutine.
func (b *backend) NewStream() (device.Stream, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{ch: make(chan task, queueDepth), ctx: ctx, cancel: cancel, exited: make(chan struct{})}
	s.cond.L = &s.mu
	go s.loop()
	return s, nil
}

func (s *stream) Launch(p device.Prepared, launch uint64, fence bool) error {
	hp, ok := p.(*prepared)
	if !ok || hp == nil {
		return errors.New("host: launch of state another backend prepared")
	}
	if launch == 0 {
		return errors.New("host: launch counter 0")
	}
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return device.ErrClosed
	}
	s.submitted++
	s.mu.Unlock()
	s.ch <- task{p: hp, launch: launch, fence: fence}
	return nil
}

func (s *stream) loop() {
	defer close(s.exited)
	for t := range s.ch {
		if s.err.Load() == nil {
			if err := s.run(t); err != nil {
				s.err.CompareAndSwap(nil, &err)
			}
		}
		s.mu.Lock()
		s.completed++
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

func (s *stream) run(t task) error {
	p := t.p
	if t.fence {
		if err := s.waitFence(p, t.launch); err != nil {
			return err
		}
		if err := s.portFence(p, t.launch); err != nil {
			return err
		}
	}
	for _, c := range p.stageIn {
		c.do()
	}
	req := p.req
	req.Launch = t.launch
	mem := p.mem[t.launch&1]
	if p.foreignIn.Size > 0 || p.foreignOut.Size > 0 {
		m := *mem
		if p.foreignIn.Size > 0 {
			m.Input = foreign(p.foreignIn.Ptr, p.foreignIn.Size)
		}
		if p.foreignOut.Size > 0 {
			m.Output = foreign(p.foreignOut.Ptr, p.foreignOut.Size)
		}
		mem = &m
	}
	if err := interp.RunRank(s.ctx, p.table, p.rank, req, mem); err != nil {
		return &LaunchError{Rank: p.rank, Launch: t.launch, Peer: -1, Err: err}
	}
	for _, c := range p.stageOut {
		c.do()
	}
	atomic.StoreUint64(p.done, t.launch)
	return nil
}

// portFence meets every peer on another node: this rank has finished its
// previous launch (the stream runs in order), so it signals each one's
// fence channel, then waits for the peer's signal, which says the same.
// Every rank fences the same launches, so the counts match.
func (s *stream) portFence(p *prepared, counter uint64) error {
	for _, f := range p.portFence {
		if err := f.conn.Signal(f.ch); err != nil {
			return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer, Err: fmt.Errorf("fence with rank %d on another node: %w", f.peer, err)}
		}
	}
	stop := func() error {
		if atomic.LoadUint64(p.abort) != 0 {
			return launch.ErrAborted
		}
		return s.ctx.Err()
	}
	for _, f := range p.portFence {
		want := atomic.AddUint64(f.expected, 1)
		if err := f.conn.WaitSignal(f.inbound, want, f.peer, stop); err != nil {
			atomic.StoreUint64(p.abort, 1)
			return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer,
				Err: fmt.Errorf("fence: rank %d on another node did not finish launch %d: %w", f.peer, counter-1, err)}
		}
	}
	return nil
}

// waitFence waits until every peer's done word has reached counter-1,
// bounded by the request's timeout and stopped by the abort word.
func (s *stream) waitFence(p *prepared, counter uint64) error {
	timeout := p.req.Timeout
	if timeout <= 0 {
		timeout = launch.DefaultTimeout
	}
	var deadline time.Time
	for _, f := range p.fence {
		backoff := time.Duration(0)
		for spins := 0; atomic.LoadUint64(f.word) < counter-1; spins++ {
			if atomic.LoadUint64(p.abort) != 0 {
				return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer, Err: fmt.Errorf("fence on rank %d: %w", f.peer, launch.ErrAborted)}
			}
			if err := s.ctx.Err(); err != nil {
				return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer, Err: err}
			}
			switch {
			case spins < 64:
				runtime.Gosched()
				continue
			case deadline.IsZero():
				deadline = time.Now().Add(timeout)
			case time.Now().After(deadline):
				atomic.StoreUint64(p.abort, 1)
				return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer,
					Err: fmt.Errorf("rank %d did not finish launch %d within %v: %w", f.peer, counter-1, timeout, launch.ErrTimeout)}
			}
			backoff = min(max(2*backoff, time.Microsecond), time.Millisecond)
			time.Sleep(backoff)
		}
	}
	return nil
}

func (s *stream) Synchronize() error {
	s.mu.Lock()
	target := s.submitted
	for s.completed < target {
		s.cond.Wait()
	}
	s.mu.Unlock()
	return s.Err()
}

func (s *stream) Err() error {
	if e := s.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (s *stream) Capturing() bool { return false }

// Close waits for the enqueued launches and stops the goroutine.
func (s *stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.sendMu.Lock()
	close(s.ch)
	s.sendMu.Unlock()
	<-s.exited
	s.cancel()
	return s.Err()
}

// portEnd is a proxied end as the interpreter sees it in a launch whose
// scratch view starts shift bytes into the scratch buffer (both ranks'
// scratch views shift alike: Prepare's view).
func portEnd(p *device.PortEnd, shift int64) *interp.PortEnd {
	pe := &interp.PortEnd{Conn: p.Conn, Channel: p.Channel, Local: p.Local, Peer: p.Peer}
	for _, b := range []*device.PortBuf{&pe.Local[device.Scratch], &pe.Peer[device.Scratch]} {
		if b.Size > shift {
			b.Off, b.Size = b.Off+shift, b.Size-shift
		} else {
			*b = device.PortBuf{}
		}
	}
	return pe
}
