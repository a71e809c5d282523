//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// Fault injection around the real network, backend and stream.

type flakyNet struct {
	Net
	failSend atomic.Bool
}

var errInjected = errors.New("injected failure")

func (f *flakyNet) Send(peer int, tag uint64, data []byte) error {
	if f.failSend.Load() {
		return errInjected
	}
	return f.Net.Send(peer, tag, data)
}

type flakyDev struct {
	device.Backend
	failAlloc, failDownload, failPrepare atomic.Bool
	mu                                   sync.Mutex
	freed                                []device.Ptr
}

func (f *flakyDev) Alloc(n int64) (device.Ptr, error) {
	if f.failAlloc.Load() {
		return 0, errInjected
	}
	return f.Backend.Alloc(n)
}

func (f *flakyDev) Download(dst []byte, src device.Ptr) error {
	if f.failDownload.Load() {
		return errInjected
	}
	return f.Backend.Download(dst, src)
}

func (f *flakyDev) Free(p device.Ptr) error {
	f.mu.Lock()
	f.freed = append(f.freed, p)
	f.mu.Unlock()
	return f.Backend.Free(p)
}

// wasFreed reports whether Free was called on p.
func (f *flakyDev) wasFreed(p device.Ptr) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.freed {
		if q == p {
			return true
		}
	}
	return false
}

func (f *flakyDev) Prepare(a *device.Args) (device.Prepared, error) {
	if f.failPrepare.Load() {
		return nil, errInjected
	}
	return f.Backend.Prepare(a)
}

// captureStream reports graph capture while capturing is set.
type captureStream struct {
	device.Stream
	capturing atomic.Bool
}

func (c *captureStream) Capturing() bool { return c.capturing.Load() }

// fworld is a world whose ranks have flaky nets, backends and capture streams.
type fworld struct {
	*world
	nets  []*flakyNet
	devs  []*flakyDev
	caps  []*captureStream
	fixed map[int64][]bufs
}

// newFWorld makes an n-rank world; scratch(r) is rank r's initial scratch.
func newFWorld(t *testing.T, n int, scratch func(r int) int64) *fworld {
	w := newWorld(t, n, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	fw := &fworld{world: w}
	for r := range n {
		net := &flakyNet{Net: w.boots[r]}
		dev := &flakyDev{Backend: w.dev}
		st := &captureStream{Stream: w.st[r]}
		c := Config{Rank: r, NRanks: n, Backend: dev, Net: net, InitialScratch: 1 << 16, Timeout: 5 * time.Second}
		if scratch != nil {
			c.InitialScratch = scratch(r)
		}
		ex, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		w.ex[r].Close()
		w.ex[r], w.st[r] = ex, st
		fw.nets, fw.devs, fw.caps = append(fw.nets, net), append(fw.devs, dev), append(fw.caps, st)
	}
	return fw
}

// seen records the transitions every test of this file took.
var seen = struct {
	sync.Mutex
	m map[Transition]bool
}{m: map[Transition]bool{}}

type tracer struct {
	mu sync.Mutex
	tr [][]Transition
}

func (w *fworld) trace() *tracer {
	tc := &tracer{tr: make([][]Transition, w.n)}
	for r := range w.n {
		w.ex[r].SetTrace(func(t Transition) {
			tc.mu.Lock()
			tc.tr[r] = append(tc.tr[r], t)
			tc.mu.Unlock()
			seen.Lock()
			seen.m[Transition{From: t.From, Event: t.Event, To: t.To}] = true
			seen.Unlock()
		})
	}
	return tc
}

// path renders rank r's transitions since the last reset as "From-event->To ...".
func (tc *tracer) path(r int) string {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var b strings.Builder
	for i, t := range tc.tr[r] {
		if i == 0 {
			b.WriteString(t.From.String())
		}
		fmt.Fprintf(&b, " -%v-> %v", t.Event, t.To)
	}
	return b.String()
}

func (tc *tracer) reset() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for r := range tc.tr {
		tc.tr[r] = nil
	}
}

// do runs c with s on every rank, in fresh buffers (a new allocation
// identity and address), and returns rank 0's path and the ranks' errors.
func (w *fworld) do(t *testing.T, tc *tracer, s *Schedule, c devicetest.Case) (string, []error) {
	t.Helper()
	tc.reset()
	_, errs := w.run(s, c, false)
	return tc.path(0), errs
}

// same is do in buffers kept per count, so that a repeated shape hits L3.
func (w *fworld) same(t *testing.T, tc *tracer, s *Schedule, c devicetest.Case) (string, []error) {
	t.Helper()
	if w.fixed == nil {
		w.fixed = map[int64][]bufs{}
	}
	bs := w.fixed[c.Count]
	if bs == nil {
		for r := range w.n {
			bs = append(bs, w.alloc(c, r, false))
		}
		w.fixed[c.Count] = bs
	}
	tc.reset()
	errs := w.each(func(r int) error {
		if err := w.call(r, request(c, bs[r]), s, w.st[r]); err != nil {
			return err
		}
		return w.st[r].Synchronize()
	})
	return tc.path(0), errs
}

func noErr(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func wantPath(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("path\n got: %s\nwant: %s", got, want)
	}
}

func arCase(count int64, seed uint64) devicetest.Case {
	return devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: 2, Seed: seed}
}

const n2 = 2

// TestTransitions walks every row of Table at least once (TestEveryTransition
// checks the coverage) and pins the full paths of the common walks.
func TestTransitions(t *testing.T) {
	ring := func(id int, pr ir.Protocol) *Schedule {
		return compile(t, id, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: pr})
	}
	t.Run("cold/hit/migrate/switch/L2/grow", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		a, b := ring(0, ir.Simple), ring(1, ir.LL)
		got, errs := w.same(t, tc, a, arCase(100, 1))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -miss-> L0Setup -ok-> L1Lookup -no-source-> L1Cold -ok-> L1Switch -ok-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
		got, errs = w.same(t, tc, a, arCase(100, 2))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -hit-> Launch -ok-> Done")
		// A second schedule migrates from the first (the previous one).
		got, errs = w.same(t, tc, b, arCase(100, 3))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -source-> L1Migrate -ok-> L1Switch -ok-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
		st := w.ex[0].Stats()
		if st.LastMigration.From != 0 || st.LastMigration.To != 1 || st.LastMigration.Created.Semaphores != 0 || st.LastMigration.Created.BootstrapMessages != 0 {
			t.Errorf("migration %+v: Simple ring -> LL ring keeps every semaphore", st.LastMigration)
		}
		// Back to the first: an L1 hit and a switch (LL and Simple ends share
		// semaphores with different inits: rebased).
		rebases := st.Rebases
		got, errs = w.same(t, tc, a, arCase(100, 4))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -hit-> L1Switch -ok-> L2Lookup -skip-> L3Lookup -hit-> Launch -ok-> Done")
		if w.ex[0].Stats().Rebases == rebases {
			t.Error("switch back rebased nothing")
		}
		// A schedule that reads the peer's input: L2.
		one := compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
		got, errs = w.do(t, tc, one, arCase(100, 5))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -source-> L1Migrate -ok-> L1Switch -ok-> L2Lookup -miss-> L2Setup -ok-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
		// The world's run allocates new buffers per case: a new allocation
		// identity, so an L2 miss again; same identity shows in the
		// KI3/L2 tests.
		// Growth: a request whose scratch need exceeds 64 KiB.
		got, errs = w.same(t, tc, a, arCase(1<<20, 6))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -hit-> L1Switch -ok-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -too-small-> Grow -ok-> L3Setup -ok-> Launch -ok-> Done")
		if st := w.ex[0].Stats(); st.Growths != 1 || st.ScratchBytes <= 1<<16 {
			t.Errorf("growths %d, scratch %d bytes", st.Growths, st.ScratchBytes)
		}
		// Every prepared launch was dropped by the growth: the first shape
		// is an L3 miss again.
		got, errs = w.same(t, tc, a, arCase(100, 7))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
	})
	t.Run("L2 hit", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		one := compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
		bs := make([]bufs, n2)
		for r := range n2 {
			bs[r] = w.alloc(arCase(64, 1), r, false)
		}
		run := func(count int64, op ir.RedOp) string {
			tc.reset()
			noErr(t, w.each(func(r int) error {
				c := arCase(count, 1)
				c.RedOp = op
				req := request(c, bs[r])
				if _, err := w.ex[r].Execute(context.Background(), req, one, w.st[r]); err != nil {
					return err
				}
				return w.st[r].Synchronize()
			}))
			return tc.path(0)
		}
		run(64, ir.Sum)
		// The same buffers, another op: the peers see them where they are
		// (an L2 hit), a new request shape (L3 miss, local).
		wantPath(t, run(64, ir.Max), "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -hit-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
		wantPath(t, run(64, ir.Max), "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -hit-> L3Lookup -hit-> Launch -ok-> Done")
		// Same allocations, another count: the peers' view of our buffers
		// changes (a push, no new export: L2Setups stays 1).
		wantPath(t, run(32, ir.Sum), "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -miss-> L2Setup -ok-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
		st := w.ex[0].Stats()
		if st.L2Setups != 1 || st.L2Pushes != 2 || st.Created.Registrations != 1 {
			t.Errorf("L2 setups %d, pushes %d, registrations %d; want 1, 2, 1", st.L2Setups, st.L2Pushes, st.Created.Registrations)
		}
	})
	t.Run("replaces", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		a, b, c := ring(0, ir.Simple), ring(1, ir.LL), ring(2, ir.Simple)
		c.Replaces = 0
		for _, s := range []*Schedule{a, b} {
			_, errs := w.do(t, tc, s, arCase(8, 1))
			noErr(t, errs)
		}
		// c replaces a, which is materialised: a is the source, not b.
		_, errs := w.do(t, tc, c, arCase(8, 1))
		noErr(t, errs)
		if m := w.ex[0].Stats().LastMigration; m.From != 0 || m.To != 2 || m.Kept != 2 || m.Rebased != 0 {
			t.Errorf("migration %+v, want from 0 keeping both semaphores unrebased", m)
		}
	})
	t.Run("capture", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		setCapture := func(on bool) {
			for _, c := range w.caps {
				c.capturing.Store(on)
			}
		}
		a, b := ring(0, ir.Simple), ring(1, ir.LL)
		one := compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
		setCapture(true)
		got, errs := w.do(t, tc, a, arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -capture-> Fail")
		if !errors.Is(errs[0], ErrCapture) {
			t.Fatalf("error %v, want ErrCapture", errs[0])
		}
		setCapture(false)
		for _, s := range []*Schedule{a, b} {
			_, errs = w.do(t, tc, s, arCase(8, 1))
			noErr(t, errs)
		}
		setCapture(true)
		got, _ = w.do(t, tc, one, arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -capture-> Fail")
		// b -> a needs a rebase (their ends' inits differ).
		got, _ = w.do(t, tc, a, arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -hit-> L1Switch -capture-> Fail")
		// b again, the running schedule, another shape: an L3 miss, set up
		// during the capture (no call capture forbids: nccl-tests -G).
		got, errs = w.do(t, tc, b, arCase(9, 1))
		noErr(t, errs)
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -ok-> Launch -ok-> Done")
		// ... unless it needs more scratch: growth is refused (seed README).
		got, errs = w.do(t, tc, b, arCase(8192, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -too-small-> Grow -capture-> Fail")
		if !errors.Is(errs[0], ErrCapture) {
			t.Fatalf("error %v, want ErrCapture", errs[0])
		}
		setCapture(false)
		_, errs = w.do(t, tc, one, arCase(8, 1))
		noErr(t, errs)
		setCapture(true)
		got, _ = w.do(t, tc, one, arCase(8, 1)) // fresh buffers: an L2 miss
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -capture-> Fail")
		if st := w.ex[0].Stats(); st.Refused != 5 {
			t.Errorf("refused %d, want 5", st.Refused)
		}
		// Refusals are not sticky: a hit works while capturing... after
		// warming the shape outside capture.
		setCapture(false)
		bs := make([]bufs, n2)
		for r := range n2 {
			bs[r] = w.alloc(arCase(8, 1), r, false)
		}
		warm := func() []error {
			return w.each(func(r int) error {
				if _, err := w.ex[r].Execute(context.Background(), request(arCase(8, 1), bs[r]), b, w.st[r]); err != nil {
					return err
				}
				return w.st[r].Synchronize()
			})
		}
		noErr(t, warm())
		setCapture(true)
		tc.reset()
		noErr(t, warm())
		wantPath(t, tc.path(0), "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -hit-> Launch -ok-> Done")
	})
	t.Run("L0 setup error: scratch sizes differ", func(t *testing.T) {
		w := newFWorld(t, n2, func(r int) int64 { return int64(1+r) << 16 })
		tc := w.trace()
		got, errs := w.do(t, tc, ring(0, ir.Simple), arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -miss-> L0Setup -error-> Fail")
		for r, err := range errs {
			if !errors.Is(err, ErrScratchMismatch) {
				t.Errorf("rank %d: %v, want ErrScratchMismatch", r, err)
			}
		}
		// Sticky: the next call fails at Start.
		got, _ = w.do(t, tc, ring(0, ir.Simple), arCase(8, 1))
		wantPath(t, got, "Start -broken-> Fail")
	})
	exchangeFails := func(t *testing.T, w *fworld) {
		for _, nt := range w.nets {
			nt.failSend.Store(true)
		}
	}
	t.Run("L1 cold error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		noErr(t, w.each(func(r int) error { return nil }))
		// L0 first (its allgather does not use Send).
		_, errs := w.do(t, tc, ring(0, ir.Simple), arCase(8, 1))
		noErr(t, errs)
		exchangeFails(t, w)
		one := compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
		one.Replaces = -1
		// Make the lookup find no source: a rooted rotation nothing ran.
		bc := compile(t, 3, "ring", gen.Options{Collective: ir.Broadcast, NRanks: n2, Protocol: ir.Simple})
		got, errs := w.do(t, tc, bc, devicetest.Case{Coll: ir.Broadcast, DataType: ir.Float32, Count: 8, NRanks: n2, Root: 1})
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -no-source-> L1Cold -error-> Fail")
		if !errors.Is(errs[0], errInjected) {
			t.Errorf("error %v", errs[0])
		}
	})
	t.Run("L1 migrate error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		_, errs := w.do(t, tc, ring(0, ir.Simple), arCase(8, 1))
		noErr(t, errs)
		exchangeFails(t, w)
		one := compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
		got, _ := w.do(t, tc, one, arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -source-> L1Migrate -error-> Fail")
	})
	t.Run("L1 switch error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		a, b := ring(0, ir.Simple), ring(1, ir.LL)
		for _, s := range []*Schedule{a, b} {
			_, errs := w.do(t, tc, s, arCase(8, 1))
			noErr(t, errs)
		}
		for _, d := range w.devs {
			d.failDownload.Store(true)
		}
		got, _ := w.do(t, tc, a, arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -hit-> L1Switch -error-> Fail")
	})
	t.Run("L2 setup error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		one := compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
		_, errs := w.do(t, tc, one, arCase(8, 1))
		noErr(t, errs)
		exchangeFails(t, w)
		got, _ := w.do(t, tc, one, arCase(8, 2))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -miss-> L2Setup -error-> Fail")
	})
	t.Run("L3 setup error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		a := ring(0, ir.Simple)
		_, errs := w.do(t, tc, a, arCase(8, 1))
		noErr(t, errs)
		for _, d := range w.devs {
			d.failPrepare.Store(true)
		}
		got, errs := w.do(t, tc, a, arCase(9, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -error-> Fail")
		if w.ex[0].Err() != nil {
			t.Errorf("a failed Prepare is not sticky, got %v", w.ex[0].Err())
		}
		for _, d := range w.devs {
			d.failPrepare.Store(false)
		}
		_, errs = w.do(t, tc, a, arCase(9, 1))
		noErr(t, errs)
	})
	t.Run("grow error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		a := ring(0, ir.Simple)
		_, errs := w.do(t, tc, a, arCase(8, 1))
		noErr(t, errs)
		bs := make([]bufs, n2)
		for r := range n2 {
			bs[r] = w.alloc(arCase(1<<20, 1), r, false)
		}
		for _, d := range w.devs {
			d.failAlloc.Store(true)
		}
		tc.reset()
		errs = w.each(func(r int) error {
			return walkErr(w.ex[r].Execute(context.Background(), request(arCase(1<<20, 1), bs[r]), a, w.st[r]))
		})
		wantPath(t, tc.path(0), "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -miss-> L3Setup -too-small-> Grow -error-> Fail")
		if !errors.Is(errs[0], errInjected) {
			t.Errorf("error %v", errs[0])
		}
	})
	t.Run("launch error", func(t *testing.T) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		a := ring(0, ir.Simple)
		_, errs := w.same(t, tc, a, arCase(8, 1))
		noErr(t, errs)
		for _, c := range w.caps {
			c.Stream.Close()
		}
		got, errs := w.same(t, tc, a, arCase(8, 1))
		wantPath(t, got, "Start -ok-> L0Lookup -hit-> L1Lookup -same-> L2Lookup -skip-> L3Lookup -hit-> Launch -error-> Fail")
		if !errors.Is(errs[0], device.ErrClosed) {
			t.Errorf("error %v, want device.ErrClosed", errs[0])
		}
	})
}

// TestEveryTransition checks that the tests above took every row of Table
// (it runs them if they did not run in this process).
func TestEveryTransition(t *testing.T) {
	seen.Lock()
	empty := len(seen.m) == 0
	seen.Unlock()
	if empty {
		TestTransitions(t)
	}
	seen.Lock()
	defer seen.Unlock()
	var missing []string
	for _, tr := range Table {
		if !seen.m[Transition{From: tr.From, Event: tr.Event, To: tr.To}] {
			missing = append(missing, fmt.Sprintf("%v -%v-> %v", tr.From, tr.Event, tr.To))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("transitions no test took:\n  %s", strings.Join(missing, "\n  "))
	}
	for tr := range seen.m {
		if next(tr.From, tr.Event) != tr.To {
			t.Errorf("a test took %v -%v-> %v, which is not in Table", tr.From, tr.Event, tr.To)
		}
	}
}

// TestCapturedLaunches: a launch captured into a CUDA graph is fenced (its
// replays may follow any eager launch), so is the first launch after it,
// and what its replays use — the scratch buffer in particular — is not
// freed by a later scratch growth, only at Close (docs/design/cuda.md).
func TestCapturedLaunches(t *testing.T) {
	w := newFWorld(t, n2, nil)
	tc := w.trace()
	a := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
	setCapture := func(on bool) {
		for _, c := range w.caps {
			c.capturing.Store(on)
		}
	}
	fences := func() int64 { return int64(w.ex[0].Stats().Fences) }
	run := func(count int64) {
		t.Helper()
		_, errs := w.same(t, tc, a, arCase(count, 1))
		noErr(t, errs)
	}
	run(8)
	run(8) // same shape, same scratch layout: unfenced
	f0 := fences()
	run(8)
	if got := fences() - f0; got != 0 {
		t.Fatalf("eager repeat: %d fences, want 0", got)
	}
	setCapture(true)
	run(8) // a cache hit, captured
	setCapture(false)
	if got := fences() - f0; got != 1 {
		t.Fatalf("captured launch: %d fences, want 1", got)
	}
	run(8)
	if got := fences() - f0; got != 2 {
		t.Fatalf("launch after a capture: %d fences in all, want 2", got)
	}
	run(8)
	if got := fences() - f0; got != 2 {
		t.Fatalf("second launch after a capture: %d fences in all, want 2", got)
	}
	// Grow the scratch: the captured launch's scratch must outlive it.
	old := w.ex[0].l0.scratch.Ptr
	run(1 << 20)
	if w.ex[0].l0.scratch.Ptr == old {
		t.Fatal("the scratch did not grow")
	}
	if w.devs[0].wasFreed(old) {
		t.Fatal("the scratch a captured launch uses was freed at growth")
	}
	if err := w.ex[0].Close(); err != nil {
		t.Fatal(err)
	}
	if !w.devs[0].wasFreed(old) {
		t.Fatal("Close did not free the retained scratch")
	}
}

// TestFencedTable: a schedule whose tables ask for it
// (optable.Table.FenceLaunches, set by the compiler for a TS0206 race on a
// Simple program) is fenced at every launch, not only when the scratch
// layout changes.
func TestFencedTable(t *testing.T) {
	w := newFWorld(t, n2, nil)
	tc := w.trace()
	a := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
	for r := range a.Bundle.Tables {
		if err := optable.MarkFence(a.Bundle.Tables[r]); err != nil {
			t.Fatal(err)
		}
	}
	run := func() {
		t.Helper()
		_, errs := w.same(t, tc, a, arCase(8, 1))
		noErr(t, errs)
	}
	run()
	f0 := w.ex[0].Stats().Fences
	for i := 0; i < 3; i++ {
		run()
	}
	if got := w.ex[0].Stats().Fences - f0; got != 3 {
		t.Fatalf("%d fences over 3 launches of one shape, want 3", got)
	}
}
