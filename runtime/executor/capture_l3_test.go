//go:build linux

package executor

import (
	"encoding/binary"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// Review of L3 setup during CUDA graph capture (4b64a20): sequences of
// capture, replay and eager calls on the host backend, with a stream that
// models a CUDA graph.

// graphStream models a CUDA stream that can be captured into a graph, over
// a host stream. While capturing, a launch is recorded, not run; replay
// runs the recorded launches again, each time with the argument it was
// captured with. Every launch it runs, eager or replayed, takes the CUDA
// kernel's launch counter, max(argument, done+1), where done is this
// rank's done word (docs/design/cuda.md, "The launch counter";
// cuda/kernel/theseus.cu): the host backend uses its argument as it is,
// which a replay would repeat.
type graphStream struct {
	device.Stream
	ex        *Executor // the rank's executor: its done word
	capturing atomic.Bool
	graph     []task
	// ran is every launch run on the stream, in order: what the device
	// would run.
	ran []ranLaunch
}

type task struct {
	p      device.Prepared
	launch uint64
	fence  bool
}

type ranLaunch struct {
	launch uint64 // the counter it ran with
	fence  bool
	replay bool
}

func (g *graphStream) Capturing() bool { return g.capturing.Load() }

func (g *graphStream) Launch(p device.Prepared, launch uint64, fence bool) error {
	if g.capturing.Load() {
		if c, ok := p.(*inCapture); ok {
			c.captured.Store(true)
		}
		g.graph = append(g.graph, task{p, launch, fence})
		return nil
	}
	return g.run(task{p, launch, fence}, false)
}

// run runs t with the kernel's launch counter. It waits for the stream
// first, so that the done word holds the previous launch's counter.
func (g *graphStream) run(t task, replay bool) error {
	if err := g.Stream.Synchronize(); err != nil {
		return err
	}
	var b [8]byte
	if err := g.ex.dev.Download(b[:], g.ex.l0.control+8); err != nil {
		return err
	}
	l := max(t.launch, binary.LittleEndian.Uint64(b[:])+1)
	if p, ok := t.p.(*inCapture); ok { // the host stream launches only its own state
		t.p = p.countedPrep.Prepared
	}
	g.ran = append(g.ran, ranLaunch{launch: l, fence: t.fence, replay: replay})
	return g.Stream.Launch(t.p, l, t.fence)
}

// replay launches the captured graph once and waits for it.
func (g *graphStream) replay() error {
	for _, t := range g.graph {
		if err := g.run(t, true); err != nil {
			return err
		}
	}
	return g.Stream.Synchronize()
}

// countedPrep counts the releases of a prepared launch.
type countedPrep struct {
	device.Prepared
	released *atomic.Int64
	once     sync.Once
	freed    atomic.Bool
	captured atomic.Bool // launched into a graph
}

// RebindPeer forwards to the prepared launch (device.Rebinder).
func (c *countedPrep) RebindPeer(end, kind int, m device.Mem) error {
	return c.Prepared.(device.Rebinder).RebindPeer(end, kind, m)
}

func (c *countedPrep) Release() {
	c.once.Do(func() {
		c.freed.Store(true)
		c.released.Add(1)
		c.Prepared.Release()
	})
}

// prepDev records every prepared launch and whether a stream was being
// captured when one was released.
type prepDev struct {
	device.Backend
	st       *graphStream
	mu       sync.Mutex
	preps    []*countedPrep
	released atomic.Int64
	// releasedInCapture counts releases while st was capturing (on CUDA a
	// cuMemFree on the application's thread in its own capture mode).
	releasedInCapture atomic.Int64
}

func (d *prepDev) Prepare(a *device.Args) (device.Prepared, error) {
	p, err := d.Backend.Prepare(a)
	if err != nil {
		return nil, err
	}
	c := &countedPrep{Prepared: p, released: &d.released}
	d.mu.Lock()
	d.preps = append(d.preps, c)
	d.mu.Unlock()
	return &inCapture{countedPrep: c, d: d}, nil
}

type inCapture struct {
	*countedPrep
	d *prepDev
}

func (p *inCapture) Release() {
	if p.d.st != nil && p.d.st.capturing.Load() {
		p.d.releasedInCapture.Add(1)
	}
	p.countedPrep.Release()
}

// gworld is n ranks with graph streams.
type gworld struct {
	*world
	gs   []*graphStream
	devs []*prepDev
}

func newGWorld(t *testing.T, scratch int64) *gworld {
	w := newWorld(t, n2, Config{})
	g := &gworld{world: w}
	for r := range n2 {
		dev := &prepDev{Backend: w.dev}
		ex, err := New(Config{Rank: r, NRanks: n2, Backend: dev, Net: w.boots[r], InitialScratch: scratch, Timeout: 5e9})
		if err != nil {
			t.Fatal(err)
		}
		w.ex[r].Close()
		gs := &graphStream{Stream: w.st[r], ex: ex}
		dev.st = gs
		w.ex[r], w.st[r] = ex, gs
		g.gs, g.devs = append(g.gs, gs), append(g.devs, dev)
	}
	return g
}

func (g *gworld) setCapture(on bool) {
	for _, s := range g.gs {
		s.capturing.Store(on)
	}
}

// f32 buffers: one allocation per rank and kind.
func (g *gworld) f32(count int64) []device.Ptr {
	ps := make([]device.Ptr, n2)
	for r := range n2 {
		p, err := g.dev.Alloc(4 * count)
		if err != nil {
			g.t.Fatal(err)
		}
		g.mu.Lock()
		g.allocs = append(g.allocs, p)
		g.mu.Unlock()
		ps[r] = p
	}
	return ps
}

func write(t *testing.T, p device.Ptr, v []float32) {
	t.Helper()
	b, err := host.Bytes(p, int64(4*len(v)))
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
}

func read(t *testing.T, p device.Ptr, n int64) []float32 {
	t.Helper()
	b, err := host.Bytes(p, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func arReq(send, recv device.Ptr, count int64) *Request {
	return &Request{Coll: ir.AllReduce, Send: send, Recv: recv, Count: count, DataType: ir.Float32, RedOp: ir.Sum,
		InPlace: send == recv, PacketType: ir.LL16}
}

// call runs req(r) with s on every rank (eager calls are waited for).
func (g *gworld) call(s *Schedule, req func(r int) *Request) []error {
	return g.each(func(r int) error {
		if err := g.world.call(r, req(r), s, g.st[r]); err != nil {
			return err
		}
		if g.gs[r].capturing.Load() {
			return nil
		}
		return g.gs[r].Stream.Synchronize()
	})
}

func (g *gworld) replay(times int) {
	g.t.Helper()
	for range times {
		g.must(g.each(func(r int) error { return g.gs[r].replay() }))
	}
}

// TestCaptureL3MissReplays: an L3 miss set up during capture (a new count
// in registered buffers, as nccl-tests -G makes), replayed several times,
// then eager calls with yet another count, with replays between them: every
// result is exact (each in-place allreduce doubles the buffer), the
// executor's launch counter and the ranks' done words stay in step, and
// every eager launch that may follow a replay of another scratch layout is
// fenced (a launch whose layout differs from the device's previous launch
// is fenced: doLaunch).
func TestCaptureL3MissReplays(t *testing.T) {
	// The one-shot schedule reaches the peers' buffers (L2): its L3 setup
	// exchanges offsets with the peers during the capture.
	for _, sc := range []struct {
		algo string
		pr   ir.Protocol
	}{{"ring", ir.Simple}, {"ring", ir.LL}, {"oneshot", ir.Simple}} {
		t.Run(sc.algo+"/"+sc.pr.String(), func(t *testing.T) {
			g := newGWorld(t, 1<<20)
			g.usePlans()
			s := compile(t, 0, sc.algo, gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: sc.pr})
			const count, half, other = 1024, 512, 96
			buf, out := g.f32(count), g.f32(count)
			x := func(r int, i int) float32 { return float32((r*5+i*3)%17 - 8) }
			sum := func(i int) float32 { return x(0, i) + x(1, i) }
			for r := range n2 {
				v := make([]float32, count)
				for i := range v {
					v[i] = x(r, i)
				}
				write(t, buf[r], v)
			}
			inPlace := func(k int64) func(r int) *Request {
				return func(r int) *Request { return arReq(buf[r], buf[r], k) }
			}
			side := func(k int64) func(r int) *Request {
				return func(r int) *Request { return arReq(buf[r], out[r], k) }
			}
			g.must(g.call(s, inPlace(count))) // buf = S
			g.must(g.call(s, side(count)))    // out = 2S
			tc := &tracer{tr: make([][]Transition, n2)}
			for r := range n2 {
				g.ex[r].SetTrace(func(tr Transition) {
					tc.mu.Lock()
					tc.tr[r] = append(tc.tr[r], tr)
					tc.mu.Unlock()
				})
			}
			msgs := g.ex[0].stats.Created.BootstrapMessages
			g.setCapture(true)
			g.must(g.call(s, side(half))) // an L3 miss during capture
			wantPath(t, tc.path(0), "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -"+l2Ev(g)+"-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
			g.must(g.call(s, inPlace(count)))
			g.setCapture(false)
			for r := range n2 {
				g.ex[r].SetTrace(nil)
			}
			// Each captured call with new buffers pushes them (one message to
			// the peer), with no rank's call waiting for another's.
			if sent, l2 := g.ex[0].stats.Created.BootstrapMessages-msgs, l2Ev(g) != "skip"; l2 != (sent == 2) || !l2 && sent != 0 {
				t.Errorf("%d push messages sent during the capture (schedule reaches peers' buffers: %v)", sent, l2)
			}
			if l := g.ex[0].LaunchCounter(); l != 4 {
				t.Fatalf("launch counter %d after 2 eager and 2 captured launches, want 4", l)
			}
			const replays = 3
			g.replay(replays) // buf = S*2^3, out[:half] = S*2^3
			// Eager calls with yet another count (an L3 miss, eager, then
			// launches of its plan), each after a replay.
			planned := g.plans[0].launched
			g.must(g.call(s, inPlace(other)))
			g.replay(1)
			g.must(g.call(s, inPlace(other)))
			g.replay(1)
			g.must(g.call(s, inPlace(other)))
			if got := g.plans[0].launched - planned; got != 2 {
				t.Errorf("%d calls launched from their plan, want 2", got)
			}
			for r := range n2 {
				b, o := read(t, buf[r], count), read(t, out[r], count)
				wrong := 0
				for i := range count {
					// After 3 replays buf = 8S (and out[:half]); an eager call
					// doubles buf[:other]; a replay doubles buf[:half] into out,
					// then all of buf.
					wb, wo := 8*sum(i), 2*sum(i)
					if i < half {
						wo = wb
					}
					eager := func() {
						if i < other {
							wb *= 2
						}
					}
					replay := func() {
						if i < half {
							wo = 2 * wb
						}
						wb *= 2
					}
					eager()
					replay()
					eager()
					replay()
					eager()
					if b[i] != wb || o[i] != wo {
						if wrong < 4 {
							t.Errorf("rank %d element %d: buffer %g output %g, want %g %g", r, i, b[i], o[i], wb, wo)
						}
						wrong++
					}
				}
			}
			// The device ran 2 + 2*5 + 3 launches, with counters 1..15 on
			// both ranks.
			for r := range n2 {
				var ls []uint64
				for _, l := range g.gs[r].ran {
					ls = append(ls, l.launch)
				}
				if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, ls); diff != "" {
					t.Errorf("rank %d: launch counters the device ran (-want +got):\n%s", r, diff)
				}
			}
			// Every launch right after a replay whose last launch had
			// another scratch layout must be fenced: the executor cannot
			// know when replays run (docs/design/cuda.md, "CUDA graphs").
			for r := range n2 {
				ran := g.gs[r].ran
				for i := 1; i < len(ran); i++ {
					if ran[i-1].replay && !ran[i].replay && !ran[i].fence {
						t.Errorf("rank %d: eager launch %d (counter %d) after a replay is not fenced", r, i, ran[i].launch)
					}
				}
			}
		})
	}
}

// l2Ev is the event of L2Lookup for the ring schedule (whether it reaches
// the peers' buffers).
// l2Ev is the L2Lookup step of a new request shape's walk: for a schedule
// that reaches peers' buffers, a push of where this rank's buffers moved
// (L2Setup: allowed during capture, since it allocates nothing and makes
// no stream call), else nothing.
func l2Ev(g *gworld) string {
	if g.ex[0].lastL1 != nil && g.ex[0].lastL1.needL2 {
		return "miss-> L2Setup -ok"
	}
	return "skip"
}

// TestCaptureL3MissFullMap: an L3 miss during capture when the L3 map under
// the entry is full (maxL3): dropping the map waits for the stream, which a
// capture may not do. The capture must stay valid and the ranks in step:
// nothing is released during the capture (on CUDA that would be cuMemFree
// on the application's thread in its own capture mode, which invalidates a
// global or thread-local capture), and a captured entry is never released
// before Close.
func TestCaptureL3MissFullMap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills an L3 map (4096 entries)")
	}
	g := newGWorld(t, 1<<20)
	s := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
	const count = 4
	const stride = 16 // bytes between shapes: each offset is a new L3 key
	n := int64(maxL3 + 2)
	in, out := g.f32(n*stride/4+count), g.f32(n*stride/4+count)
	at := func(k int64) func(r int) *Request {
		return func(r int) *Request {
			off := device.Ptr(k * stride)
			return arReq(in[r]+off, out[r]+off, count)
		}
	}
	g.must(g.call(s, at(0)))
	// Fill the map during a capture: maxL3 entries in all.
	g.setCapture(true)
	for k := int64(1); k < maxL3; k++ {
		g.must(g.call(s, at(k)))
	}
	if got := len(g.ex[0].lastL1.l3) + l2Len(g.ex[0]); got != maxL3 {
		t.Fatalf("%d L3 entries, want %d", got, maxL3)
	}
	launches := g.ex[0].LaunchCounter()
	errs := g.call(s, at(maxL3)) // the map is full
	g.setCapture(false)
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: an L3 miss during capture with a full L3 map: %v", r, err)
		}
	}
	for r := range n2 {
		if c := g.devs[r].releasedInCapture.Load(); c != 0 {
			t.Errorf("rank %d: %d prepared launches released during the capture", r, c)
		}
		if l := g.ex[r].LaunchCounter(); l != launches+1 {
			t.Errorf("rank %d: launch counter %d, want %d", r, l, launches+1)
		}
	}
	g.replay(1)
	// An eager miss with the map full drops it: the captured entries are
	// kept (their graph may replay), released at Close.
	g.must(g.call(s, at(maxL3+1)))
	for r := range n2 {
		captured, freed := 0, 0
		for _, p := range g.devs[r].preps {
			if p.captured.Load() {
				captured++
				if p.freed.Load() {
					freed++
				}
			}
		}
		if captured != maxL3 || freed != 0 {
			t.Errorf("rank %d: %d of %d captured prepared launches released before Close, want 0 of %d", r, freed, captured, maxL3)
		}
	}
	g.replay(1)
	for r := range n2 {
		if err := g.ex[r].Close(); err != nil {
			t.Fatal(err)
		}
		if got, want := g.devs[r].released.Load(), int64(len(g.devs[r].preps)); got != want {
			t.Errorf("rank %d: %d of %d prepared launches released at Close", r, got, want)
		}
	}
}

func l2Len(e *Executor) int {
	n := 0
	if e.lastL1 != nil {
		for _, l2 := range e.lastL1.l2 {
			n += len(l2.l3)
		}
	}
	return n
}

// TestCaptureGrowRefusedThenEager: an L3 miss during capture that needs
// more scratch is refused (seed README: no reallocation during capture)
// without a launch, a message or a sticky error, and counted as refused;
// the graph of the rest of the capture replays; then the same request
// eagerly grows the scratch and is right, and the captured launch's
// scratch outlives the growth.
func TestCaptureGrowRefusedThenEager(t *testing.T) {
	g := newGWorld(t, 1<<12)
	s := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
	const small, big = 64, 1 << 16
	buf := g.f32(big)
	for r := range n2 {
		v := make([]float32, big)
		for i := range v {
			v[i] = float32(r + 1)
		}
		write(t, buf[r], v)
	}
	inPlace := func(k int64) func(r int) *Request {
		return func(r int) *Request { return arReq(buf[r], buf[r], k) }
	}
	g.must(g.call(s, inPlace(small))) // buf[:small] = 3
	old := g.ex[0].l0.scratch.Ptr
	g.setCapture(true)
	g.must(g.call(s, inPlace(small))) // captured: doubles buf[:small]
	errs := g.call(s, inPlace(big))   // needs more scratch: refused
	g.setCapture(false)
	for r, err := range errs {
		if !errors.Is(err, ErrCapture) {
			t.Fatalf("rank %d: %v, want ErrCapture", r, err)
		}
		if err := g.ex[r].Err(); err != nil {
			t.Fatalf("rank %d: a refusal is sticky: %v", r, err)
		}
		st := g.ex[r].Stats()
		if st.Refused != 1 || st.Growths != 0 || st.Launches != 2 {
			t.Errorf("rank %d: refused %d, growths %d, launches %d; want 1, 0, 2", r, st.Refused, st.Growths, st.Launches)
		}
		if len(g.gs[r].graph) != 1 {
			t.Errorf("rank %d: %d captured launches, want 1", r, len(g.gs[r].graph))
		}
	}
	g.replay(2)                     // buf[:small] = 12
	g.must(g.call(s, inPlace(big))) // grows: buf[:small] = 24, buf[small:] = 1+2
	if g.ex[0].l0.scratch.Ptr == old || g.ex[0].Stats().Growths != 1 {
		t.Fatal("the scratch did not grow")
	}
	g.replay(1) // the captured launch, on the old scratch: buf[:small] *= 2
	for r := range n2 {
		v := read(t, buf[r], big)
		for i, got := range v {
			want := float32(3)
			if i < small {
				want = 48
			}
			if got != want {
				t.Fatalf("rank %d element %d: %g, want %g", r, i, got, want)
			}
		}
	}
}
