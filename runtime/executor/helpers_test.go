//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// world is n ranks as goroutines: a bootstrap, an executor and a stream each.
type world struct {
	t     testing.TB
	n     int
	boots []*bootstrap.Bootstrap
	ex    []*Executor
	st    []device.Stream
	dev   device.Backend
	// allocations to free at cleanup
	mu     sync.Mutex
	allocs []device.Ptr
	// plans, when set, serve each rank's repeated requests from their plans
	// (world.call), as the communicator does.
	plans []*planner
}

// usePlans makes world.call serve repeated requests from their plans.
func (w *world) usePlans() {
	w.plans = make([]*planner, w.n)
	for r := range w.n {
		w.plans[r] = &planner{plans: map[Request]*Plan{}}
	}
}

// call runs r with s on rank rank's stream st: through its plan when the
// world uses plans (usePlans), else through a walk.
func (w *world) call(rank int, r *Request, s *Schedule, st device.Stream) error {
	if w.plans != nil {
		return w.plans[rank].run(context.Background(), w.ex[rank], r, s, st)
	}
	_, err := w.ex[rank].Execute(context.Background(), r, s, st)
	return err
}

// planner serves requests as the communicator does: a request seen before
// launches its plan while the plan is valid (Launch), and any other walks
// (Execute), which returns the plan of its shape.
type planner struct {
	plans map[Request]*Plan
	// launched counts the plans launched, stale the plans found stale,
	// failed the plan launches that failed.
	launched, stale, failed int
}

func (p *planner) run(ctx context.Context, e *Executor, r *Request, s *Schedule, st device.Stream) error {
	if pl := p.plans[*r]; pl != nil && pl.Schedule() == s {
		err := e.Launch(pl, st)
		switch {
		case err == nil:
			p.launched++
			return nil
		case !errors.Is(err, ErrStale):
			p.failed++
			return err
		}
		p.stale++
	}
	pl, err := e.Execute(ctx, r, s, st)
	if pl != nil {
		p.plans[*r] = pl
	}
	return err
}

func newWorld(t testing.TB, n int, cfg Config) *world {
	t.Helper()
	return newWorldOf(t, n, func(_ int, c *Config) { *c = cfg })
}

// newWorldOf is newWorld with rank r's configuration set by cfg(r, c).
func newWorldOf(t testing.TB, n int, cfg func(r int, c *Config)) *world {
	t.Helper()
	return newWorldDev(t, n, host.Backend(), cfg)
}

// newWorldDev is newWorldOf on backend dev.
func newWorldDev(t testing.TB, n int, dev device.Backend, cfg func(r int, c *Config)) *world {
	t.Helper()
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, n: n, boots: make([]*bootstrap.Bootstrap, n), ex: make([]*Executor, n), st: make([]device.Stream, n), dev: dev}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.boots[r], errs[r] = bootstrap.Init(context.Background(), id, r, n, bootstrap.Options{Timeout: 10 * time.Second})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range n {
		var c Config
		cfg(r, &c)
		c.Rank, c.NRanks, c.Backend, c.Net = r, n, w.dev, w.boots[r]
		if c.Timeout == 0 {
			c.Timeout = 10 * time.Second
		}
		if w.ex[r], err = New(c); err != nil {
			t.Fatal(err)
		}
		if w.st[r], err = w.dev.NewStream(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(w.close)
	return w
}

func (w *world) close() {
	for r := range w.n {
		w.st[r].Close()
		w.ex[r].Close()
		w.boots[r].Close()
	}
	w.mu.Lock()
	for _, p := range w.allocs {
		w.dev.Free(p)
	}
	w.allocs = nil
	w.mu.Unlock()
}

// each runs f on every rank concurrently and returns the errors by rank.
func (w *world) each(f func(r int) error) []error { return ranks.Each(w.n, f) }

func (w *world) must(errs []error) {
	w.t.Helper()
	for r, err := range errs {
		if err != nil {
			w.t.Fatalf("rank %d: %v", r, err)
		}
	}
}

var schedIDs = struct {
	sync.Mutex
	n int
}{}

// compile generates and compiles a schedule; id keys L1.
func compile(t testing.TB, id int, algo string, o gen.Options) *Schedule {
	t.Helper()
	p, err := gen.Generate(algo, o)
	if err != nil {
		t.Fatal(err)
	}
	b, ds, err := passes.Compile(p, passes.Options{})
	if err != nil || b == nil {
		t.Fatalf("compile %s: %v %v", algo, err, ds)
	}
	return &Schedule{ID: id, Name: p.Name, Replaces: -1, Bundle: b}
}

// bufs are one rank's buffers for a case.
type bufs struct {
	send, recv device.Ptr
	out        []byte   // the output as the rank sees it
	keep       [][]byte // Go memory the launches use: kept alive until they finish
}

// alloc makes one rank's buffers for c (backend allocations, or Go memory
// when goMem), with the input written in.
func (w *world) alloc(c devicetest.Case, r int, goMem bool) bufs {
	in, out := c.Bytes(r)
	var keep [][]byte
	mk := func(n int64) (device.Ptr, []byte) {
		if n == 0 {
			return 0, nil
		}
		if goMem {
			b := make([]byte, n)
			keep = append(keep, b)
			return host.PtrOf(b), b
		}
		p, err := w.dev.Alloc(n)
		if err != nil {
			w.t.Fatal(err)
		}
		w.mu.Lock()
		w.allocs = append(w.allocs, p)
		w.mu.Unlock()
		b, _ := host.Bytes(p, n)
		return p, b
	}
	input := c.Input(r)
	var b bufs
	if size, inOff, outOff, ok := c.InPlaceLayout(r); c.InPlace && ok {
		p, mem := mk(size)
		copy(mem[inOff:], input)
		b.send, b.recv = p+device.Ptr(inOff), p+device.Ptr(outOff)
		b.out = mem[outOff : outOff+out]
		if in == 0 {
			b.send = 0
		}
		if out == 0 {
			b.recv, b.out = 0, nil
		}
		b.keep = keep
		return b
	}
	var inMem []byte
	b.send, inMem = mk(in)
	copy(inMem, input)
	b.recv, b.out = mk(out)
	b.keep = keep
	return b
}

func request(c devicetest.Case, b bufs) *Request {
	return &Request{Coll: c.Coll, Send: b.send, Recv: b.recv, Count: c.Count, DataType: c.DataType, RedOp: c.RedOp,
		Root: c.Root, InPlace: c.InPlace, PacketType: ir.LL16}
}

// run runs c with s on every rank and returns the elements wrong over all
// ranks.
func (w *world) run(s *Schedule, c devicetest.Case, goMem bool) (int64, []error) {
	var mu sync.Mutex
	var wrong int64
	errs := w.each(func(r int) error {
		b := w.alloc(c, r, goMem)
		if err := w.call(r, request(c, b), s, w.st[r]); err != nil {
			return err
		}
		err := w.st[r].Synchronize()
		runtime.KeepAlive(b.keep)
		if err != nil {
			return err
		}
		want := c.Expected(r)
		wr := devicetest.Wrong(b.out, want, c.DataType.Size())
		mu.Lock()
		wrong += wr
		mu.Unlock()
		if wr != 0 {
			return fmt.Errorf("%v: %d elements wrong", c, wr)
		}
		return nil
	})
	return wrong, errs
}

// walkErr is Execute's error, for callers that do not keep the plan.
func walkErr(_ *Plan, err error) error { return err }
