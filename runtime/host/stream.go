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
	"github.com/theseus-ccl/theseus/runtime/resident"
)

// prepared is one rank's launch state for one request shape: the
// interpreter's memory for even and odd launches (they differ only in the
// scratch half), the staging copies, and the words of the fence.
type prepared struct {
	table *optable.Table
	rank  int
	req   launch.Request // Launch is filled per launch
	// mu guards mem, which RebindPeer replaces (copy on write) while
	// launches of other prepared launches run; a launch takes mem under
	// it once past its pairing wait.
	mu    sync.Mutex
	mem   [2]*interp.RankMem
	abort *uint64
	done  *uint64
	fence []fenceWord
	// portFence are the fences with peers on other nodes (through the
	// proxy: their done words are not mapped here).
	portFence []portFence
	// started and hdone are this rank's started and finished words (nil:
	// none); pair the peers' started words a launch waits for
	// (device.Args).
	started, hdone *uint64
	pair           []fenceWord
	stageIn        []copyOp
	stageOut       []copyOp
	// Foreign (caller-owned) input and output memory is kept as addresses
	// and viewed only while a launch runs, so that a cached prepared launch
	// never keeps Go memory alive or points the garbage collector at freed
	// memory.
	foreignIn, foreignOut device.Mem
	// trace records the launches' ops (Args.Trace), or nil.
	trace *opTrace
}

// opTrace is the host backend's device.OpTrace: the interpreter's op
// times (interp.OpRecorder), up to a bound.
type opTrace struct {
	mu      sync.Mutex
	spans   []device.OpSpan
	max     int
	dropped uint64
}

// NewOpTrace implements device.OpTracer.
func (b *backend) NewOpTrace(records int) (device.OpTrace, error) {
	if records < 1 {
		return nil, fmt.Errorf("host: op trace of %d records", records)
	}
	return &opTrace{max: records}, nil
}

// RecordOp implements interp.OpRecorder.
func (t *opTrace) RecordOp(launch uint64, tb, step int, slice int64, op ir.Opcode, begin, end int64) {
	t.mu.Lock()
	if len(t.spans) < t.max {
		t.spans = append(t.spans, device.OpSpan{Launch: launch, TB: tb, Step: step, Slice: slice, Op: op, Begin: begin, End: end})
	} else {
		t.dropped++
	}
	t.mu.Unlock()
}

// Drain implements device.OpTrace.
func (t *opTrace) Drain(f func(device.OpSpan)) uint64 {
	t.mu.Lock()
	spans, dropped := t.spans, t.dropped
	t.spans, t.dropped = nil, 0
	t.mu.Unlock()
	for _, s := range spans {
		f(s)
	}
	return dropped
}

// Close implements device.OpTrace.
func (t *opTrace) Close() {}

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

// RebindPeer implements device.Rebinder: channel end end's peer buffer
// kind becomes m in the memory of both launch parities (new RankMem
// values: a launch in flight keeps the ones it took).
func (p *prepared) RebindPeer(end, kind int, m device.Mem) error {
	if end < 0 || end >= len(p.mem[0].Ends) || kind < 0 || kind > 1 {
		return fmt.Errorf("host: rebind of channel end %d buffer %d of %d ends", end, kind, len(p.mem[0].Ends))
	}
	var b []byte
	if m.Size > 0 {
		var err error
		if b, err = theBackend.bytes(m.Ptr, m.Size); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for parity := range p.mem {
		rm := *p.mem[parity]
		rm.Ends = append([]interp.End(nil), rm.Ends...)
		if kind == device.Input {
			rm.Ends[end].Peer.Input = b
		} else {
			rm.Ends[end].Peer.Output = b
		}
		p.mem[parity] = &rm
	}
	return nil
}

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
	if a.Trace != nil {
		tr, ok := a.Trace.(*opTrace)
		if !ok {
			return nil, fmt.Errorf("host: prepare with a %T op trace", a.Trace)
		}
		p.trace = tr
	}
	var err error
	mem := func(m device.Mem) []byte {
		if err != nil || m.Size == 0 {
			return nil
		}
		var s []byte
		s, err = b.bytes(m.Ptr, m.Size)
		return s
	}
	// local resolves caller memory (localMem).
	local := func(m device.Mem) ([]byte, device.Mem) {
		if err != nil {
			return nil, device.Mem{}
		}
		var s []byte
		var f device.Mem
		s, f, err = b.localMem(m)
		return s, f
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
	if a.Started != 0 {
		p.started = word(a.Started)
	}
	if a.HDone != 0 {
		p.hdone = word(a.HDone)
	}
	for _, f := range a.Pair {
		p.pair = append(p.pair, fenceWord{peer: f.Peer, word: word(f.Word)})
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

// Rebase implements device.Rebaser: p's launch state with this rank's
// input and output at a's (their views resolved again; everything else,
// the scratch views, channel ends, counters and fence words, shared).
// Errors: a p of another backend or with staging copies, memory that
// crosses the end of a backend allocation.
func (b *backend) Rebase(pp device.Prepared, a *device.Args) (device.Prepared, error) {
	p, ok := pp.(*prepared)
	if !ok || p == nil {
		return nil, errors.New("host: rebase of state another backend prepared")
	}
	if len(p.stageIn)+len(p.stageOut) > 0 || len(a.StageIn)+len(a.StageOut) > 0 {
		return nil, errors.New("host: rebase of a launch with staging copies")
	}
	p.mu.Lock()
	mem := p.mem
	p.mu.Unlock()
	q := prepared{table: p.table, rank: p.rank, req: p.req, abort: p.abort, done: p.done, fence: p.fence,
		started: p.started, hdone: p.hdone, pair: p.pair, trace: p.trace}
	var err error
	var in, out []byte
	if in, q.foreignIn, err = b.localMem(a.Buf[device.Input]); err != nil {
		return nil, err
	}
	if out, q.foreignOut, err = b.localMem(a.Buf[device.Output]); err != nil {
		return nil, err
	}
	for parity, m := range mem {
		mm := *m
		mm.Input, mm.Output = in, out
		q.mem[parity] = &mm
	}
	return &q, nil
}

// localMem resolves caller memory m: a mapping's bytes, or for foreign
// memory nil and the range itself (viewed only while a launch runs).
func (b *backend) localMem(m device.Mem) ([]byte, device.Mem, error) {
	if m.Size == 0 {
		return nil, device.Mem{}, nil
	}
	if m.Ptr == 0 || m.Size < 0 {
		return nil, device.Mem{}, fmt.Errorf("host: memory %#x+%d", uintptr(m.Ptr), m.Size)
	}
	b.mu.RLock()
	mp := b.find(m.Ptr, m.Size)
	b.mu.RUnlock()
	if mp == nil {
		if b.overlapsMapping(m.Ptr, m.Size) {
			return nil, device.Mem{}, fmt.Errorf("host: memory %#x+%d crosses the end of a backend allocation", uintptr(m.Ptr), m.Size)
		}
		return nil, m, nil
	}
	s, err := b.bytes(m.Ptr, m.Size)
	return s, device.Mem{}, err
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
	pp     *p2pPrepared // a launch of the point-to-point engine instead (p2p.go)
	launch uint64
	fence  bool
	// A stream memory operation instead of a launch (p nil): store val
	// into word (memWrite), or wait until word reaches val in sequence
	// order (memWait), as cuStreamWriteValue32 and cuStreamWaitValue32
	// do on CUDA (a resident executor's queue: resident.go).
	mem  memOp
	word *uint32
	val  uint32
	// memAfter: wait until stream prev has completed val tasks.
	prev *stream
	upTo uint64
}

type memOp uint8

const (
	memNone memOp = iota
	memWrite
	memWait
	memAfter
)

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
	t := task{launch: launch, fence: fence}
	switch hp := p.(type) {
	case *prepared:
		t.p = hp
	case *p2pPrepared:
		t.pp, t.fence = hp, false // never fenced: it uses no scratch
	}
	if t.p == nil && t.pp == nil {
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
	s.ch <- t
	return nil
}

// memOps enqueues stream memory operations (task.mem), which run even
// after a launch of the stream failed: a resident executor's item is
// released and waited for whatever the stream's own launches did.
func (s *stream) memOps(ts ...task) error {
	s.sendMu.RLock()
	defer s.sendMu.RUnlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return device.ErrClosed
	}
	s.submitted += uint64(len(ts))
	s.mu.Unlock()
	for _, t := range ts {
		s.ch <- t
	}
	return nil
}

func (s *stream) loop() {
	defer close(s.exited)
	for t := range s.ch {
		if t.mem != memNone {
			s.memOp(t)
		} else if s.err.Load() == nil {
			if err := runLaunch(s.ctx, t); err != nil {
				s.err.CompareAndSwap(nil, &err)
			}
		}
		s.mu.Lock()
		s.completed++
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// memOp runs a stream memory operation. A wait polls, yielding and then
// sleeping (at most 50 µs between polls); it ends when the word reaches
// the value or the stream is cancelled (Close after its goroutine exited
// cannot reach here, so in practice when the word arrives: a resident
// executor always completes or abandons what it was issued).
func (s *stream) memOp(t task) {
	switch t.mem {
	case memWrite:
		atomic.StoreUint32(t.word, t.val)
		return
	case memAfter:
		p := t.prev
		p.mu.Lock()
		for p.completed < t.upTo && !p.closed {
			p.cond.Wait()
		}
		p.mu.Unlock()
		return
	}
	for polls := 0; int32(atomic.LoadUint32(t.word)-t.val) < 0; polls++ {
		if s.ctx.Err() != nil {
			return
		}
		resident.Backoff(polls, time.Time{}, 50*time.Microsecond)
	}
}

// runLaunch runs one launch of t.p (a stream's, or a resident executor's
// queued one): the fence, the staging copies, the interpreter, the done
// word.
func runLaunch(ctx context.Context, t task) error {
	if t.pp != nil {
		// The point-to-point engine: no fence, no staging, no done word
		// (its launches are not the communicator's counted launches).
		if err := runP2P(ctx, t.pp); err != nil {
			return &LaunchError{Rank: t.pp.a.Rank, Launch: t.launch, Peer: -1, Err: err}
		}
		return nil
	}
	p := t.p
	if p.started != nil {
		raise(p.started, t.launch)
	}
	if t.fence {
		if err := waitWords(ctx, p, p.fence, t.launch, t.launch-1, "fence"); err != nil {
			return err
		}
		if err := meetPortFences(ctx, p, t.launch); err != nil {
			return err
		}
	}
	if len(p.pair) > 0 {
		if err := waitWords(ctx, p, p.pair, t.launch, t.launch, "pairing"); err != nil {
			return err
		}
	}
	for _, c := range p.stageIn {
		c.do()
	}
	req := p.req
	req.Launch = t.launch
	p.mu.Lock()
	mem := p.mem[t.launch&1]
	p.mu.Unlock()
	if p.foreignIn.Size > 0 || p.foreignOut.Size > 0 || p.trace != nil {
		m := *mem
		if p.trace != nil {
			m.Trace = p.trace
		}
		if p.foreignIn.Size > 0 {
			m.Input = foreign(p.foreignIn.Ptr, p.foreignIn.Size)
		}
		if p.foreignOut.Size > 0 {
			m.Output = foreign(p.foreignOut.Ptr, p.foreignOut.Size)
		}
		mem = &m
	}
	if err := interp.RunRank(ctx, p.table, p.rank, req, mem); err != nil {
		return &LaunchError{Rank: p.rank, Launch: t.launch, Peer: -1, Err: err}
	}
	for _, c := range p.stageOut {
		c.do()
	}
	atomic.StoreUint64(p.done, t.launch)
	if p.hdone != nil {
		raise(p.hdone, t.launch)
	}
	return nil
}

// meetPortFences meets every peer on another node: this rank has finished its
// previous launch (the stream runs in order), so it signals each one's
// fence channel, then waits for the peer's signal, which says the same.
// Every rank fences the same launches, so the counts match.
func meetPortFences(ctx context.Context, p *prepared, counter uint64) error {
	for _, f := range p.portFence {
		if err := f.conn.Signal(f.ch); err != nil {
			return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer, Err: fmt.Errorf("fence with rank %d on another node: %w", f.peer, err)}
		}
	}
	stop := func() error {
		if atomic.LoadUint64(p.abort) != 0 {
			return launch.ErrAborted
		}
		return ctx.Err()
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

// raise makes *w at least v (an atomic maximum).
func raise(w *uint64, v uint64) {
	for {
		old := atomic.LoadUint64(w)
		if old >= v || atomic.CompareAndSwapUint64(w, old, v) {
			return
		}
	}
}

// waitWords waits until every peer word of ws has reached want — the
// fence: the peers' done words at counter-1; the pairing: their started
// words at counter — bounded by the request's timeout and stopped by the
// abort word; what names the wait in errors ("fence", "pairing").
func waitWords(ctx context.Context, p *prepared, ws []fenceWord, counter, want uint64, what string) error {
	timeout := p.req.Timeout
	if timeout <= 0 {
		timeout = launch.DefaultTimeout
	}
	var deadline time.Time
	for _, f := range ws {
		backoff := time.Duration(0)
		for spins := 0; atomic.LoadUint64(f.word) < want; spins++ {
			if atomic.LoadUint64(p.abort) != 0 {
				return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer, Err: fmt.Errorf("%s on rank %d: %w", what, f.peer, launch.ErrAborted)}
			}
			if err := ctx.Err(); err != nil {
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
				verb := "finish"
				if what == "pairing" {
					verb = "start"
				}
				return &LaunchError{Rank: p.rank, Launch: counter, Peer: f.peer,
					Err: fmt.Errorf("rank %d did not %s launch %d within %v (%s): %w", f.peer, verb, want, timeout, what, launch.ErrTimeout)}
			}
			backoff = min(max(2*backoff, time.Microsecond), time.Millisecond)
			time.Sleep(backoff)
		}
	}
	return nil
}

// After implements device.StreamOrderer: s runs nothing more until prev
// has run what was enqueued on it so far (a prev of another backend, or
// a closed one, is ignored), so that one rank's launches on two streams
// never overlap, as on CUDA.
func (s *stream) After(prev device.Stream) error {
	p, ok := prev.(*stream)
	if !ok || p == s {
		return nil
	}
	p.mu.Lock()
	upTo, closed := p.submitted, p.closed
	p.mu.Unlock()
	if closed {
		return nil
	}
	return s.memOps(task{mem: memAfter, prev: p, upTo: upTo})
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
