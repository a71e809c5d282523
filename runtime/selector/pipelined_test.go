package selector

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
)

// TestPipelinedEpochs: two ranks, each reading its own copy of a context,
// with an Agreement that is Pipelined (the in-process group). In the steady
// state no rank waits for the epoch agreement; a rank that has read a new
// value line waits (its own vector could change the snapshot) while the
// other, which has not, goes on; and both switch at the first epoch at
// which both have read it, as without pipelining.
func TestPipelinedEpochs(t *testing.T) {
	const (
		n      = 100
		period = 10
	)
	// Rank r sees the value line from its request seen[r] on.
	seen := [2]int{45, 25}
	agree := NewInProcessGroup(2)
	got := make([][]int, 2)
	stats := make([]Stats, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		c := newCtx(t)
		c.attr(`{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}`)
		c.attr(`{"name":"w","type":"int","origin":"exo","default":0}`)
		c.file("a.json", allreduce8())
		c.file("b.json", allreduce8())
		c.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"1"}`)
		c.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"preference":"w"}`)
		clock := newClock()
		s, err := New(Options{Dir: c.dir, CheckPeriod: period, Agreement: agree[r], Loader: &fakeLoader{},
			Clock: clock.now, Location: time.UTC, Logger: &logSink{}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if i == seen[r] {
					c.value("w", `{"value":2}`)
				}
				id, err := s.Select(context.Background(), req(ir.AllReduce, 1024))
				if err != nil {
					errs[r] = err
					return
				}
				got[r] = append(got[r], id)
			}
			stats[r] = s.Stats()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]int, n)
	for i := 50; i < n; i++ { // the first epoch at which both ranks have the line
		want[i] = 1
	}
	for r := range 2 {
		if d := cmp.Diff(want, got[r]); d != "" {
			t.Fatalf("rank %d (-want +got):\n%s", r, d)
		}
	}
	// Rank 0 waits at the first epoch and at the switch; rank 1 also at
	// epochs 30 and 40, where its own line could have changed the snapshot.
	for r, w := range []Stats{
		{Requests: n, Hits: n - 2, Epochs: n / period, Pipelined: 8, Snapshots: 2, Agreements: n/period + 2, Loads: 2},
		{Requests: n, Hits: n - 2, Epochs: n / period, Pipelined: 6, Snapshots: 2, Agreements: n/period + 2, Loads: 2},
	} {
		if d := cmp.Diff(w, stats[r], cmpopts.IgnoreFields(Stats{}, "EpochTime")); d != "" {
			t.Errorf("rank %d stats (-want +got):\n%s", r, d)
		}
	}
}

// TestPipelinedValidAfter: both ranks have read a value line from the
// start, valid only from tick 35; rank 1's clock runs 10 ticks behind. An
// epoch's cut is the lesser clock, so the value takes effect at the first
// epoch whose cut has passed it (request 50), as without pipelining. A
// rank whose own clock has passed it could see the snapshot change and
// waits (rank 0 at epoch 40); the other need not.
func TestPipelinedValidAfter(t *testing.T) {
	const (
		n      = 70
		period = 10
	)
	tick := time.Millisecond
	va := t0.Add(35 * tick).Format(time.RFC3339Nano)
	agree := NewInProcessGroup(2)
	got := make([][]int, 2)
	stats := make([]Stats, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		c := newCtx(t)
		c.attr(`{"name":"w","type":"int","origin":"exo","default":0}`)
		c.file("a.json", allreduce8())
		c.file("b.json", allreduce8())
		c.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"1"}`)
		c.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"preference":"w"}`)
		c.value("w", `{"value":2,"valid_after":"`+va+`"}`)
		i := 0
		clock := func() time.Time { return t0.Add(time.Duration(i-10*r) * tick) }
		s, err := New(Options{Dir: c.dir, CheckPeriod: period, Agreement: agree[r], Loader: &fakeLoader{},
			Clock: clock, Location: time.UTC, Logger: &logSink{}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i = 0; i < n; i++ {
				id, err := s.Select(context.Background(), req(ir.AllReduce, 1024))
				if err != nil {
					errs[r] = err
					return
				}
				got[r] = append(got[r], id)
			}
			stats[r] = s.Stats()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]int, n)
	for i := 50; i < n; i++ {
		want[i] = 1
	}
	for r := range 2 {
		if d := cmp.Diff(want, got[r]); d != "" {
			t.Fatalf("rank %d (-want +got):\n%s", r, d)
		}
	}
	// 7 epochs: rank 0 waits at 0, 40 and 50, rank 1 at 0 and 50.
	for r, p := range []uint64{4, 5} {
		if stats[r].Epochs != n/period || stats[r].Pipelined != p {
			t.Errorf("rank %d: %d epochs, %d pipelined; want %d, %d", r, stats[r].Epochs, stats[r].Pipelined, n/period, p)
		}
	}
}
