package selector

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
)

// genLoader is a RankLoader that records what it is asked to build and
// describes a program of the request's shape.
type genLoader struct {
	mu   sync.Mutex
	reqs []LoadRequest
}

func (l *genLoader) Load(path string) (*ScheduleInfo, error) { panic("Load called: LoadFor expected") }

func (l *genLoader) LoadFor(r LoadRequest) (*ScheduleInfo, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, r)
	l.mu.Unlock()
	nl := 0
	if r.Gen != nil {
		nl = r.Gen.NLocalRanks
	}
	return &ScheduleInfo{Collective: r.Collective, NRanks: r.NRanks, NLocalRanks: nl, InPlace: true, OutOfPlace: true}, nil
}

func (l *genLoader) last() LoadRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reqs[len(l.reqs)-1]
}

func genHarness(t *testing.T, loader ScheduleLoader, rank int) (*ctxDir, func() *Selector, *logSink) {
	c := newCtx(t)
	c.attr(`{"name":"nranks","type":"int","origin":"endo","path":"request.nranks"}`)
	c.attr(`{"name":"nlocalranks","type":"int","origin":"endo","path":"request.nlocalranks"}`)
	c.attr(`{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}`)
	log := &logSink{}
	return c, func() *Selector {
		s, err := New(Options{Dir: c.dir, CheckPeriod: 1, Loader: loader, Location: time.UTC, Logger: log,
			Timeout: 10 * time.Second, Rank: rank})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}, log
}

func shaped(coll ir.Collective, n, l int) *Request {
	return &Request{Coll: coll, Count: 1 << 20, DataType: ir.Float32, RedOp: ir.Sum, Root: -1, NRanks: n, NLocalRanks: l}
}

// TestGeneratedEntries: a generated entry matches every nranks its
// generator serves (and the nranks it pins, if any); a hierarchical one
// only multi-node shapes, through its usable expression; the channel
// expression is evaluated on the request's shape; the loader is asked for
// the calling rank.
func TestGeneratedEntries(t *testing.T) {
	gl := &genLoader{}
	c, newSel, log := genHarness(t, gl, 2)
	c.sched(`{"gen":"ring","collective":"allreduce","channels":"clamp(64 / nranks, 1, 32)","preference":"20","name":"ring"}`)
	c.sched(`{"gen":"hier","collective":"allreduce","usable":"nlocalranks < nranks","preference":"25","name":"hier"}`)
	c.sched(`{"gen":"ring","collective":"allreduce","nranks":5,"protocol":"ll","preference":"30","name":"ring5"}`)
	c.sched(`{"gen":"dbtree","collective":"allreduce","avoid":[6],"preference":"40","name":"avoid6"}`)
	ctx := context.Background()
	for _, tc := range []struct {
		n, l     int
		want     int
		channels int
	}{
		{3, 3, 0, 21},    // one node: ring (hier is unusable), 64/3 channels
		{4, 4, 0, 16},    // 64/4
		{100, 100, 3, 0}, // dbtree avoiding 6 serves 100 ranks too
		{5, 5, 2, 1},     // the entry pinned to 5 ranks wins
		{8, 4, 3, 1},     // dbtree avoiding 6 serves 8 ranks
		{6, 3, 1, 1},     // 2 nodes: hier; dbtree's rank 6 is not in a 6-rank job
	} {
		s := newSel()
		id, err := s.Select(ctx, shaped(ir.AllReduce, tc.n, tc.l))
		if err != nil || id != tc.want {
			t.Fatalf("n=%d l=%d: Select = %d, %v; want %d\n%s", tc.n, tc.l, id, err, tc.want, log.dump())
		}
		r := gl.last()
		if r.Gen == nil || r.NRanks != tc.n || r.Rank != 2 {
			t.Fatalf("n=%d: load request %+v", tc.n, r)
		}
		if tc.want == 0 && r.Gen.Channels != tc.channels {
			t.Errorf("n=%d: channels %d, want %d", tc.n, r.Gen.Channels, tc.channels)
		}
		// hier always, the others on several nodes (so that they join the
		// nodes with port channels).
		wantL := 0
		if tc.want == 1 || tc.l > 0 && tc.l < tc.n {
			wantL = tc.l
		}
		if r.Gen.NLocalRanks != wantL {
			t.Errorf("n=%d: the generator is given nlocalranks %d, want %d", tc.n, r.Gen.NLocalRanks, wantL)
		}
		ref, ok := s.Schedule(id)
		if !ok || ref.File != []string{"ring", "hier", "ring5", "avoid6"}[id] {
			t.Errorf("Schedule(%d) = %+v", id, ref)
		}
		// The same selector asked for another shape builds the entry again
		// for it (a communicator has one shape; a tool may ask for several).
		if id == 0 {
			before := len(gl.reqs)
			other := shaped(ir.AllReduce, tc.n+1, tc.n+1)
			id2, err := s.Select(ctx, other)
			if err != nil || id2 != 0 && tc.n+1 != 5 || len(gl.reqs) != before+1 || gl.last().NRanks != tc.n+1 {
				t.Errorf("another shape (%d ranks): Select = %d, %v; loads %d -> %d", tc.n+1, id2, err, before, len(gl.reqs))
			}
			if ref, _ := s.Schedule(0); id2 == 0 && ref.Info.NRanks != tc.n+1 {
				t.Errorf("Schedule(0) is for %d ranks after a request for %d", ref.Info.NRanks, tc.n+1)
			}
		}
	}
	// Explain names the generator and why it does not serve a shape.
	s := newSel()
	e, err := s.Explain(ctx, shaped(ir.AllReduce, 4, 0))
	if err != nil {
		t.Fatal(err)
	}
	if c := e.Candidates[1]; c.File != "gen:hier" || !strings.Contains(c.Reason, "generator hier does not serve 4 ranks (0 per node)") {
		t.Errorf("hier candidate: %+v", c)
	}
	if c := e.Candidates[3]; !strings.Contains(c.Reason, "avoid[0] = 6") {
		t.Errorf("dbtree candidate at 4 ranks: %+v", c)
	}
}

// failingLoader builds nothing for 4 ranks.
type failingLoader struct{ genLoader }

func (l *failingLoader) LoadFor(r LoadRequest) (*ScheduleInfo, error) {
	if r.NRanks == 4 {
		return nil, errors.New("the generator refuses 4 ranks")
	}
	return l.genLoader.LoadFor(r)
}

// TestGeneratedEntryFailsForOneShape: a generated entry that fails to
// build for one shape is excluded for that shape only.
func TestGeneratedEntryFailsForOneShape(t *testing.T) {
	c, newSel, log := genHarness(t, &failingLoader{}, 0)
	c.sched(`{"gen":"ring","collective":"allreduce","preference":"1"}`)
	c.sched(`{"gen":"ring","collective":"allreduce","preference":"0"}`)
	s := newSel()
	ctx := context.Background()
	for _, tc := range []struct{ n, want int }{{4, None}, {5, 0}, {4, None}, {6, 0}} {
		if id, err := s.Select(ctx, shaped(ir.AllReduce, tc.n, tc.n)); err != nil || id != tc.want {
			t.Errorf("%d ranks: Select = %d, %v; want %d", tc.n, id, err, tc.want)
		}
	}
	if !log.warned("schedule 1 (gen:ring) excluded for 4 ranks (4 per node): the generator refuses 4 ranks") {
		t.Errorf("warnings:\n%s", log.dump())
	}
	e, _ := s.Explain(ctx, shaped(ir.AllReduce, 4, 4))
	if !strings.Contains(e.Candidates[1].Reason, "excluded for this shape") {
		t.Errorf("Explain: %+v", e.Candidates[1])
	}
}

// TestGeneratedEntryErrors: a channel expression that reads anything but
// the shape fails the entry; a loader that cannot build generated entries
// excludes them with a reason.
func TestGeneratedEntryErrors(t *testing.T) {
	c, newSel, log := genHarness(t, &fakeLoader{}, 0)
	c.sched(`{"gen":"ring","collective":"allreduce","channels":"msgsize / 1024","preference":"1"}`)
	c.sched(`{"gen":"ring","collective":"allreduce","preference":"0"}`)
	s := newSel()
	id, err := s.Select(context.Background(), shaped(ir.AllReduce, 4, 4))
	if err != nil || id != None {
		t.Fatalf("Select = %d, %v; want None", id, err)
	}
	if !log.warned("channels reads \"msgsize\"; it may read only request.nranks and request.nlocalranks") {
		t.Errorf("no warning for the channel expression:\n%s", log.dump())
	}
	if !log.warned("schedule 1 (gen:ring) excluded", "cannot build generated entries") {
		t.Errorf("no warning for a loader without LoadFor:\n%s", log.dump())
	}
}
