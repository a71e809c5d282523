// Package proxy executes port-channel operations (put, signal, flush) over
// UCX, one Proxy per process, in MSCCL++'s port-channel model: producers —
// GPU threadblocks writing to host-mapped memory, the host backend, Go code
// — post fixed-size descriptors into a FIFO in host memory (port.h), and the
// proxy's goroutine drains every FIFO and issues UCX puts, fenced atomic
// increments and flushes (docs/transport.md).
//
// Use:
//
//	p, _ := proxy.New(proxy.Options{LocalRank: lr, LocalRanks: nl}) // once per process
//	c, _ := p.Connect(ctx, boot, rank, peers, proxy.ConnOptions{})   // a rank's peers, collectively
//	r, _ := c.Register(proxy.Mem{Addr: a, Size: n})                  // local buffers, then
//	_ = c.Share(ctx)                                                  // exchange them with the peers
//	ch, _ := c.AddChannel(peer, semRegion, semOff)                    // a semaphore word at the peer
//	c.Put(ch, r.ID, srcOff, dstRegion, dstOff, size); c.Signal(ch); c.Flush(ch)
//
// and the receiver waits for its semaphore word with WaitSignal. Every wait
// is bounded by THESEUS_TIMEOUT; a lost peer or a UCX error fails the
// connection with an *Error that names both ranks and carries UCX's status
// text.
package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// Options configure a Proxy.
type Options struct {
	// LocalRank and LocalRanks place the process on its node for
	// MSCCLPP_HCA_DEVICES (ucx.Options).
	LocalRank, LocalRanks int
	// Timeout bounds every wait (0: THESEUS_TIMEOUT, default 60 s).
	Timeout time.Duration
	// OnThread, when set, runs first on the OS thread the proxy's
	// goroutine locks for its life: the CUDA backend makes its context
	// current there, since a UCX built with CUDA copies device memory
	// inside the worker's progress.
	OnThread func() error
}

// Proxy is a process's port-channel engine: a UCX context and worker and
// the goroutine that drains the FIFOs of its connections and progresses the
// worker. Transports without hardware remote memory access (TCP) apply
// incoming puts and atomics in the target's progress, so a process must
// keep its Proxy open while peers may write to it.
type Proxy struct {
	ctx     *ucx.Context
	w       *ucx.Worker
	timeout time.Duration

	mu    sync.Mutex // conns
	conns []*Conn
	// loop holds loopMu while it drains; Close of a Conn takes it to
	// remove the Conn between two rounds.
	loopMu sync.Mutex
	kick   chan struct{}
	// helpers counts the Go goroutines spinning in a wait that run the
	// proxy's rounds themselves (help); while there are any, the proxy's
	// goroutine sleeps instead of spinning beside them.
	helpers atomic.Int32
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	// spin is how long the idle loop yields before it sleeps
	// (THESEUS_PROXY_SPIN).
	spin time.Duration
	// progressNs and progressed: the time in ucp_worker_progress and the
	// calls that handled something (ProgressStats), counted only when the
	// NET log is at INFO (timeProgress, read at New): the idle loop runs
	// a round after another, and the log line is their only reader.
	progressNs, progressed atomic.Uint64
	timeProgress           bool
}

// ProgressStats are the time the proxy's rounds spent in UCX's progress
// (nanoseconds: receiving the peers' puts and signals over TCP, sending
// what was queued) and how many of its calls handled something; zero
// unless the NET log was at INFO when the proxy was made.
func (p *Proxy) ProgressStats() (ns, calls uint64) { return p.progressNs.Load(), p.progressed.Load() }

// spinFromEnv is THESEUS_PROXY_SPIN as a duration: microseconds, 0 or
// more (2000 when unset); values over env.MaxTimeout give env.MaxTimeout
// (never an overflowed, negative spin). A malformed or negative value is
// an error naming the variable.
func spinFromEnv() (time.Duration, error) {
	us, err := env.ProxySpin.Int()
	if err != nil {
		return 0, fmt.Errorf("proxy: %w (microseconds, 0 or more)", err)
	}
	if us < 0 {
		return 0, fmt.Errorf("proxy: THESEUS_PROXY_SPIN=%d: want microseconds, 0 or more", us)
	}
	if us > int64(env.MaxTimeout/time.Microsecond) {
		return env.MaxTimeout, nil
	}
	return time.Duration(us) * time.Microsecond, nil
}

// CheckEnv reports a malformed THESEUS_PROXY_SPIN, THESEUS_PROXY_STAGE_BYTES
// or THESEUS_PROXY_STAGE_BATCH (docs/env.md) as New would, without starting
// anything: the communicator checks them at init, so that every rank
// refuses a bad value at once instead of at its first launch across nodes.
func CheckEnv() error {
	_, err := envSpin()
	return err
}

// envSpin checks the proxy's variables and returns THESEUS_PROXY_SPIN's
// duration (CheckEnv and New).
func envSpin() (time.Duration, error) {
	spin, err := spinFromEnv()
	if err != nil {
		return 0, err
	}
	return spin, checkStageEnv()
}

// New starts a Proxy: it loads UCX (a *ucx.LoadError when libucp is
// missing), creates the context (the seed's network variables mapped,
// ucx.Settings) and a worker, and starts the progress goroutine.
func New(o Options) (*Proxy, error) {
	spin, err := envSpin()
	if err != nil {
		return nil, err
	}
	c, err := ucx.NewContext(ucx.Options{LocalRank: o.LocalRank, LocalRanks: o.LocalRanks})
	if err != nil {
		return nil, err
	}
	w, err := c.NewWorker()
	if err != nil {
		c.Close()
		return nil, err
	}
	p := &Proxy{ctx: c, w: w, timeout: o.Timeout, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		timeProgress: log.On(log.Info, log.Net)}
	if p.timeout <= 0 {
		p.timeout = env.TimeoutOrDefault()
	}
	p.spin = spin
	if log.On(log.Info, log.Init) {
		maj, min, rel := ucx.Version()
		sets := make([]string, 0, len(c.Settings()))
		for _, s := range c.Settings() {
			sets = append(sets, s.String())
		}
		log.Infof(log.Init, "NET/UCX: UCX %d.%d.%d, CUDA memory %v%s", maj, min, rel, c.CUDA(), strings.Join(append([]string{""}, sets...), "; "))
	}
	go p.loop(o.OnThread)
	return p, nil
}

// CUDA reports whether the UCX build handles CUDA device memory (then device
// regions go direct, else they are staged: Path).
func (p *Proxy) CUDA() bool { return p.ctx.CUDA() }

// Timeout is the bound on the proxy's waits.
func (p *Proxy) Timeout() time.Duration { return p.timeout }

// Kick wakes the progress goroutine if it is sleeping and keeps it
// spinning for a while (about 2 ms): producers call it after posting (the
// Go producers do), and the executor before a launch whose kernel posts.
func (p *Proxy) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Close stops the progress goroutine, closes every connection and releases
// UCX.
func (p *Proxy) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.mu.Lock()
	conns := slices.Clone(p.conns)
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	close(p.stop)
	<-p.done
	p.w.Close()
	p.ctx.Close()
	return nil
}

// loop drains the FIFOs and progresses the worker until Close. Idle, it
// spins for 256 rounds, then yields the processor (sched_yield) each round
// for THESEUS_PROXY_SPIN (2 ms), then sleeps with a backoff from 10 us to
// 1 ms, woken by Kick.
func (p *Proxy) loop(onThread func() error) {
	defer close(p.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if onThread != nil {
		if err := onThread(); err != nil {
			log.Warnf(log.Net, "NET/UCX: the proxy's thread: %v", err)
		}
	}
	idleSince := time.Time{}
	var idle int
	sleep := 10 * time.Microsecond
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		if p.helpers.Load() > 0 {
			t := time.NewTimer(100 * time.Microsecond)
			select {
			case <-p.stop:
				t.Stop()
				return
			case <-p.kick:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		p.loopMu.Lock()
		work, busy := p.round()
		p.loopMu.Unlock()
		if work {
			idle, idleSince, sleep = 0, time.Time{}, 10*time.Microsecond
			continue
		}
		idle++
		if idle < 256 {
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if busy || time.Since(idleSince) < p.spin {
			osYield()
			continue
		}
		t := time.NewTimer(sleep)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-p.kick:
			idle, idleSince, sleep = 0, time.Time{}, 10*time.Microsecond
		case <-t.C:
			sleep = min(2*sleep, time.Millisecond)
		}
		t.Stop()
	}
}

// round progresses the worker once and drains every Conn's FIFO; the
// caller holds loopMu. work: something happened; busy: a flush is in
// flight or an endpoint is full.
func (p *Proxy) round() (work, busy bool) {
	if !p.timeProgress {
		work = p.w.Progress() > 0
	} else {
		t0 := time.Now()
		if work = p.w.Progress() > 0; work {
			p.progressNs.Add(uint64(time.Since(t0)))
			p.progressed.Add(1)
		}
	}
	p.mu.Lock()
	conns := p.conns
	p.mu.Unlock()
	for _, c := range conns {
		w, b := c.drain()
		work = work || w
		busy = busy || b
	}
	return work, busy
}

// helping registers (+1) or unregisters (-1) a goroutine that spins in a
// wait and helps; the last one out wakes the proxy's goroutine.
func (p *Proxy) helping(d int32) {
	if p.helpers.Add(d) == 0 && d < 0 {
		p.Kick()
	}
}

// help runs a round from a producer's or waiter's goroutine when the
// proxy's goroutine is not in one: a Go producer that posts, or a waiter
// that spins, does the proxy's work itself instead of handing it over (on
// a machine with fewer cores than spinning threads, each handover costs a
// scheduling slice). It reports whether the round did something (a
// waiter that sees work goes on spinning instead of sleeping: over TCP
// the data it waits for arrives in this process's progress, which a
// sleeping helper would starve).
func (p *Proxy) help() bool {
	if p.loopMu.TryLock() {
		work, _ := p.round()
		p.loopMu.Unlock()
		return work
	}
	return false
}

// Net is the small-message network connection setup uses: the
// communicator's bootstrap (*bootstrap.Bootstrap implements it; so does the
// executor's Net). Tags below 2^63; every Recv bounded.
type Net interface {
	Send(peer int, tag uint64, data []byte) error
	Recv(ctx context.Context, peer int, tag uint64) ([]byte, error)
}

// tagBase is the bootstrap tag space of connection setup: 1<<62 | "UX" <<
// 32 | ConnOptions.Tag << 24 | a per-Conn exchange number mod 2^24 (other
// users: runtime/comm 1<<62 | 16-bit words, the executor (launch+1)<<8 |
// kind below 2^62).
const tagBase = 1<<62 | 0x5558<<32

// Error is a port-channel failure: the ranks, the operation and the cause
// (a *ucx.Error carries UCX's status text).
type Error struct {
	Rank, Peer int // Peer -1 when no single peer is concerned
	Op         string
	Err        error
}

func (e *Error) Error() string {
	if e.Peer < 0 {
		return fmt.Sprintf("proxy: rank %d: %s: %v", e.Rank, e.Op, e.Err)
	}
	return fmt.Sprintf("proxy: rank %d -> rank %d: %s: %v", e.Rank, e.Peer, e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrClosed is returned by operations on a closed Conn.
var ErrClosed = errors.New("proxy: connection closed")

// ConnOptions configure a Conn.
type ConnOptions struct {
	// Capacity is the FIFO's number of slots, a power of two (0:
	// DefaultCapacity).
	Capacity int
	// Alloc allocates the host memory the proxy shares with producers: the
	// FIFO and the staging buffers (nil: AllocHost). The CUDA backend
	// passes pinned, device-mapped memory.
	Alloc func(size int) (HostBlock, error)
	// Stager copies device memory to host memory for the staged path (nil:
	// device regions without a CUDA-enabled UCX cannot be put from).
	Stager Stager
	// StageBytes is the staging buffer of staged puts, pieces of
	// StagePiece used in turn (two halves below 2 StagePiece; 0:
	// THESEUS_PROXY_STAGE_BYTES, DefaultStageBytes).
	StageBytes int
	// Tag separates the setup exchanges of several Conns between the same
	// ranks on one Net (one per lane: the executor's parallel connections
	// through several proxies), 0 to 255.
	Tag uint8
}

type peer struct {
	rank   int
	ep     *ucx.Endpoint
	remote atomic.Pointer[[]remoteRegion] // by the peer's region id; replaced by Share
	dirty  bool                           // puts since the last fence or flush
	// strong: the endpoint's puts and atomics may take different lanes,
	// so a signal waits for a flush of its puts instead of a fence
	// (orderedByFence).
	strong bool
	lanes  []ucx.Lane
}

func (pe *peer) remoteRegions() []remoteRegion {
	if r := pe.remote.Load(); r != nil {
		return *r
	}
	return nil
}

type remoteRegion struct {
	base, size uint64
	path       Path
	rk         *ucx.RKey
}

type channel struct {
	peer   *peer
	semOff uint64 // remote address of the semaphore word
	semRK  *ucx.RKey
}

// Conn is one rank's port-channel connections to its peers within one
// communicator: the endpoints, the registered regions (its own and the
// peers'), the channels and the FIFO its producers post to. The proxy's
// goroutine executes the FIFO in ticket order.
type Conn struct {
	p     *Proxy
	rank  int
	net   Net
	opts  ConnOptions
	fifo  *FIFO
	seq   uint64 // bootstrap exchanges so far
	peers map[int]*peer
	order []*peer

	mu       sync.Mutex // regions, channels, shared (writers; the loop reads snapshots)
	regions  atomic.Pointer[[]*Region]
	channels atomic.Pointer[[]channel]
	shared   int // regions already sent to the peers

	// Owned by the proxy loop.
	next     uint64       // next ticket to execute
	pending  *ucx.Request // a flush in flight; the descriptor completes with it
	pendPeer *peer
	pendFrom time.Time
	pendDesc Desc
	pendRest Op // the descriptor's operations still to run after the flush
	stage    *stager
	// batched is stage while it holds copies started this round whose
	// puts are not issued yet (flushStaged); the loop's own, unlike stage,
	// which Register sets.
	batched *stager
	// held are the puts whose sources UCX still reads; published is the
	// tail last stored.
	held      []heldPut
	published uint64

	probe    HostBlock // the words the peers put 1 into at Connect (one per rank), then a 1
	probeOne int       // the offset of that 1
	probeMem *ucx.Mem

	failed  atomic.Pointer[Error]
	closed  atomic.Bool
	stats   statCounters
	checked int
}

// Connect joins rank to its peers: every rank of peers must call Connect
// with this rank among its own peers (port channels are symmetric). Worker
// addresses are exchanged over net; then every endpoint is flushed once, so
// an unreachable peer fails here, within the timeout, naming the pair and
// UCX's status. Connect is the first of the Conn's exchanges on net (Share
// is the next); a communicator has one Conn per rank.
func (p *Proxy) Connect(ctx context.Context, net Net, rank int, peers []int, o ConnOptions) (*Conn, error) {
	if o.Capacity == 0 {
		o.Capacity = DefaultCapacity
	}
	if o.Alloc == nil {
		o.Alloc = AllocHost
	}
	if o.StageBytes <= 0 {
		o.StageBytes = stageBytes()
	}
	blk, err := o.Alloc(FIFOBytes(o.Capacity))
	if err != nil {
		return nil, err
	}
	fifo, err := newFIFO(blk, o.Capacity)
	if err != nil {
		blk.Free()
		return nil, err
	}
	c := &Conn{p: p, rank: rank, net: net, opts: o, fifo: fifo, peers: map[int]*peer{}}
	fifo.help = p.help
	c.regions.Store(&[]*Region{})
	c.channels.Store(&[]channel{})
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	for _, r := range peers {
		if r == rank || c.peers[r] != nil {
			return nil, fmt.Errorf("proxy: rank %d: connect: peer %d repeated or self", rank, r)
		}
		c.peers[r] = &peer{rank: r}
		c.order = append(c.order, c.peers[r])
	}
	// The probe: a word per rank, into which that peer puts 1; a rank
	// goes on when every peer's word has arrived and its endpoints are
	// flushed, so the connection is up in both directions (an endpoint
	// flush alone can complete while UCX's wireup is still running: UCX
	// 1.13 then aborts, on an assertion, if the endpoint is purged with a
	// wireup reply still queued; the assertion went in 1.14, UCX commit
	// 9ccaf31bb6). No flush is started before the peers' words have come:
	// a flush queued on an endpoint whose TCP connection is still being
	// accepted makes UCX 1.16 built with assertions abort in tcp_ep.c's
	// pending queue dispatch ("ucs_queue_is_empty(&ep->pending_q)";
	// bench/results/2026-12-01-h200-eleventh, call E).
	maxRank := rank
	for _, pe := range c.order {
		maxRank = max(maxRank, pe.rank)
	}
	if c.probe, err = AllocHost(max(4096, 8*(maxRank+2))); err != nil {
		return nil, err
	}
	*(*uint64)(unsafe.Add(c.probe.Ptr, 8*(maxRank+1))) = 1 // what the probe puts
	c.probeOne = 8 * (maxRank + 1)
	if c.probeMem, err = p.ctx.Map(uintptr(c.probe.Ptr), c.probe.Size, ucx.Host); err != nil {
		return nil, &Error{Rank: rank, Peer: -1, Op: "connect (register)", Err: err}
	}
	key, err := c.probeMem.PackRKey()
	if err != nil {
		return nil, &Error{Rank: rank, Peer: -1, Op: "connect (register)", Err: err}
	}
	hello := encodeHello(helloMsg{rank: rank, addr: p.w.Address(), probe: uint64(uintptr(c.probe.Ptr)), key: key})
	got, err := c.exchange(ctx, "connect", func(*peer) []byte { return hello })
	if err != nil {
		return nil, err
	}
	probes := map[int]helloMsg{}
	for _, pe := range c.order {
		h, err := decodeHello(got[pe.rank], pe.rank)
		if err != nil {
			return nil, &Error{Rank: rank, Peer: pe.rank, Op: "connect", Err: err}
		}
		probes[pe.rank] = h
	}
	deadline := time.Now().Add(p.timeout)
	for _, pe := range c.order {
		if err := c.connectPeer(pe, probes[pe.rank]); err != nil {
			return nil, err
		}
	}
	for _, pe := range c.order {
		if err := c.awaitProbe(pe, deadline); err != nil {
			return nil, &Error{Rank: rank, Peer: pe.rank, Op: "connect (probe)", Err: err}
		}
	}
	for _, pe := range c.order {
		if err := c.flushEP(pe, deadline); err != nil {
			return nil, &Error{Rank: rank, Peer: pe.rank, Op: "connect (flush)", Err: c.peerErr(pe, err)}
		}
		pe.lanes = pe.ep.Lanes()
		pe.strong = forceStrongOrder || !orderedByFence(pe.lanes)
		if log.On(log.Info, log.Init) {
			order := "fence"
			if pe.strong {
				order = "flush"
			}
			log.Infof(log.Init, "rank %d -> rank %d: NET/UCX %s; signals ordered by %s", rank, pe.rank, describeLanes(pe.lanes), order)
		}
	}
	// Nobody goes on (and may close) before every peer's probe is done.
	if _, err := c.exchange(ctx, "connect (ready)", func(*peer) []byte { return []byte("ready") }); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.conns = append(slices.Clone(p.conns), c)
	p.mu.Unlock()
	ok = true
	return c, nil
}

// The connect message: "THPX1", u32 rank, u32 address length, the worker
// address, u64 probe address, the probe's packed rkey.
const helloMagic = "THPX1"

type helloMsg struct {
	rank  int
	addr  []byte
	probe uint64
	key   []byte
}

func encodeHello(h helloMsg) []byte {
	m := binary.LittleEndian.AppendUint32([]byte(helloMagic), uint32(h.rank))
	m = binary.LittleEndian.AppendUint32(m, uint32(len(h.addr)))
	m = append(m, h.addr...)
	m = binary.LittleEndian.AppendUint64(m, h.probe)
	return append(m, h.key...)
}

// decodeHello parses a connect message from rank.
func decodeHello(m []byte, rank int) (helloMsg, error) {
	if len(m) < 13 || string(m[:5]) != helloMagic {
		return helloMsg{}, errors.New("malformed hello from the peer (not a Theseus proxy, or tags crossed)")
	}
	h := helloMsg{rank: int(binary.LittleEndian.Uint32(m[5:9]))}
	if h.rank != rank {
		return helloMsg{}, fmt.Errorf("hello from rank %d on rank %d's connection (tags crossed)", h.rank, rank)
	}
	n := int(binary.LittleEndian.Uint32(m[9:13]))
	m = m[13:]
	if n == 0 || n > len(m) || len(m)-n <= 8 {
		return helloMsg{}, errors.New("malformed hello from the peer: address or probe key missing")
	}
	h.addr, h.probe, h.key = m[:n], binary.LittleEndian.Uint64(m[n:]), m[n+8:]
	return h, nil
}

// flushEP flushes one endpoint from a caller's goroutine.
// connectPeer makes the endpoint to pe and puts 1 into the peer's probe
// word for this rank.
func (c *Conn) connectPeer(pe *peer, h helloMsg) error {
	var err error
	if pe.ep, err = c.p.w.Connect(h.addr, fmt.Sprintf("theseus %d->%d", c.rank, pe.rank)); err != nil {
		return &Error{Rank: c.rank, Peer: pe.rank, Op: "connect", Err: err}
	}
	rk, err := pe.ep.UnpackRKey(h.key)
	if err == nil {
		// A put, not an atomic: UCX emulates atomics over TCP with active
		// messages on another lane, and an atomic queued during wireup
		// trips the pending-queue assertion above.
		err = pe.ep.Put(uintptr(c.probe.Ptr)+uintptr(c.probeOne), 8, h.probe+8*uint64(c.rank), rk, c.probeMem)
	}
	if err != nil {
		return &Error{Rank: c.rank, Peer: pe.rank, Op: "connect (probe)", Err: c.peerErr(pe, err)}
	}
	return nil
}

// awaitProbe waits (progressing the worker) until pe has put its 1 into
// this rank's probe word for it, or the deadline.
func (c *Conn) awaitProbe(pe *peer, deadline time.Time) error {
	word := (*uint64)(unsafe.Add(c.probe.Ptr, 8*pe.rank))
	for i := 0; atomic.LoadUint64(word) == 0; i++ {
		if err := pe.ep.Err(); err != nil {
			return err
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				return fmt.Errorf("rank %d's probe did not arrive within %v", pe.rank, c.p.timeout)
			}
			runtime.Gosched()
		}
		c.p.w.Progress()
	}
	return nil
}

func (c *Conn) flushEP(pe *peer, deadline time.Time) error {
	r, err := pe.ep.Flush()
	if err != nil {
		return err
	}
	if err := r.Wait(deadline); err != nil {
		if e := pe.ep.Err(); e != nil {
			return e
		}
		return err
	}
	return nil
}

// forceStrongOrder makes every signal wait for a flush (tests).
var forceStrongOrder bool

// orderedByFence reports whether ucp_worker_fence orders an endpoint's
// puts before its atomics: when both travel on one lane. UCX's fence is
// per transport (weak) in 1.13; from 1.14 it flushes when several lanes
// carry RMA, but never looks at the atomics' lane. Puts and atomics that
// UCX emulates go over the active-message lane ("am").
func orderedByFence(ls []ucx.Lane) bool {
	var rma, amo []int
	am := -1
	for i, l := range ls {
		for _, u := range l.Uses {
			switch {
			case strings.HasPrefix(u, "rma"):
				rma = append(rma, i)
			case strings.HasPrefix(u, "amo"):
				amo = append(amo, i)
			case u == "am":
				am = i
			}
		}
	}
	if len(rma) == 0 {
		rma = []int{am}
	}
	if len(amo) == 0 {
		amo = []int{am}
	}
	rma, amo = slices.Compact(rma), slices.Compact(amo)
	return len(rma) == 1 && len(amo) == 1 && rma[0] == amo[0] && rma[0] >= 0
}

// describeLanes is the INIT log's transport text, for example "tcp/lo (RMA
// and atomics as active messages)".
func describeLanes(ls []ucx.Lane) string {
	var names []string
	rma, amo := false, false
	for _, l := range ls {
		if n := l.String(); !slices.Contains(names, n) {
			names = append(names, n)
		}
		for _, u := range l.Uses {
			rma = rma || strings.HasPrefix(u, "rma")
			amo = amo || strings.HasPrefix(u, "amo")
		}
	}
	s := strings.Join(names, ",")
	switch {
	case !rma && !amo:
		s += " (RMA and atomics as active messages)"
	case !rma:
		s += " (RMA as active messages)"
	case !amo:
		s += " (atomics as active messages)"
	}
	return s
}

// Transports describes the transports UCX selected towards peer (as the
// INIT log has them: "tcp/lo (RMA and atomics as active messages)").
func (c *Conn) Transports(peer int) string {
	pe := c.peers[peer]
	if pe == nil {
		return ""
	}
	return describeLanes(pe.lanes)
}

// exchange sends msg(peer) to every peer and receives one message from
// each, under the Conn's next tag.
func (c *Conn) exchange(ctx context.Context, op string, msg func(*peer) []byte) (map[int][]byte, error) {
	tag := uint64(tagBase) | uint64(c.opts.Tag)<<24 | c.seq&(1<<24-1)
	c.seq++
	for _, pe := range c.order {
		if err := c.net.Send(pe.rank, tag, msg(pe)); err != nil {
			return nil, &Error{Rank: c.rank, Peer: pe.rank, Op: op, Err: err}
		}
	}
	out := map[int][]byte{}
	for _, pe := range c.order {
		rctx, cancel := context.WithTimeout(ctx, c.p.timeout)
		m, err := c.net.Recv(rctx, pe.rank, tag)
		cancel()
		if err != nil {
			return nil, &Error{Rank: c.rank, Peer: pe.rank, Op: op, Err: err}
		}
		out[pe.rank] = m
	}
	return out, nil
}

// Rank is the Conn's rank.
func (c *Conn) Rank() int { return c.rank }

// FIFO is the Conn's descriptor FIFO (its Block's Device address is what a
// GPU producer writes to).
func (c *Conn) FIFO() *FIFO { return c.fifo }

// Err is the Conn's failure, nil while it works.
func (c *Conn) Err() error {
	if e := c.failed.Load(); e != nil {
		return e
	}
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// fail records the first failure and marks the FIFO failed.
func (c *Conn) fail(e *Error) {
	if c.failed.CompareAndSwap(nil, e) {
		c.fifo.setFailed()
		log.Warnf(log.Net, "%v", e)
	}
}

// Close removes the Conn from the proxy and releases its endpoints, keys
// and registrations. Peers see it as lost.
func (c *Conn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.p.loopMu.Lock()
	c.p.mu.Lock()
	if i := slices.Index(c.p.conns, c); i >= 0 {
		c.p.conns = slices.Delete(slices.Clone(c.p.conns), i, i+1)
	}
	c.p.mu.Unlock()
	c.p.loopMu.Unlock()
	if log.On(log.Info, log.Net) {
		peers := make([]int, 0, len(c.order))
		for _, pe := range c.order {
			peers = append(peers, pe.rank)
		}
		ns, calls := c.p.ProgressStats()
		log.Infof(log.Net, "rank %d: NET/UCX connection closed (to rank(s) %v, tag %d: its lane; 255: the point-to-point engine's): %s; its proxy's progress %.0f us in %d calls that handled something",
			c.rank, peers, c.opts.Tag, c.Stats(), float64(ns)/1e3, calls)
	}
	c.release()
	return nil
}

func (c *Conn) release() {
	deadline := time.Now().Add(time.Second)
	for _, h := range c.held {
		h.req.Wait(deadline)
	}
	c.held = nil
	// Flush before closing: a put or signal of this rank that the peer has
	// not handled yet when the endpoint goes would fail the peer's reply to
	// it, which UCX's software RMA treats as fatal ("unexpected error:
	// Endpoint timeout" in ucp_put_handler: an eager send's last chunks,
	// a receiver's last credit). Skipped on a failed Conn; bounded.
	if c.failed.Load() == nil {
		for _, pe := range c.order {
			if pe.ep == nil || pe.ep.Err() != nil {
				continue
			}
			if r, err := pe.ep.Flush(); err == nil {
				r.Wait(deadline)
			}
		}
	}
	for _, pe := range c.order {
		if pe.ep != nil {
			pe.ep.Close(deadline)
		}
	}
	for _, r := range *c.regions.Load() {
		if r.mem != nil {
			r.mem.Unmap()
		}
	}
	if c.probeMem != nil {
		c.probeMem.Unmap()
	}
	if c.probe.Free != nil {
		c.probe.Free()
	}
	if c.stage != nil {
		c.stage.free()
	}
	if f := c.fifo.blk.Free; f != nil {
		f()
	}
}

// The process's proxies by key (Shared).
var sharedProxies struct {
	sync.Mutex
	m map[string]*sharedProxy
}

type sharedProxy struct {
	p    *Proxy
	refs int
}

// Shared returns the Proxy of this process for key, starting it with o on
// first use, and a release function that closes it when its last user
// releases it. The executor keys by node and local rank, so that the
// communicators of one rank share one proxy (one UCX context and worker
// per process), while ranks of different simulated nodes in one process
// (tests) get their own, as separate processes would. Errors: New's.
func Shared(key string, o Options) (*Proxy, func(), error) {
	sharedProxies.Lock()
	defer sharedProxies.Unlock()
	if sharedProxies.m == nil {
		sharedProxies.m = map[string]*sharedProxy{}
	}
	sp := sharedProxies.m[key]
	if sp == nil {
		p, err := New(o)
		if err != nil {
			return nil, nil, err
		}
		sp = &sharedProxy{p: p}
		sharedProxies.m[key] = sp
	}
	sp.refs++
	var once sync.Once
	return sp.p, func() {
		once.Do(func() {
			sharedProxies.Lock()
			defer sharedProxies.Unlock()
			if sp.refs--; sp.refs == 0 {
				delete(sharedProxies.m, key)
				sp.p.Close()
			}
		})
	}, nil
}
