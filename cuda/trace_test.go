package cuda_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/theseus"
	"github.com/theseus-ccl/theseus/runtime/trace"
)

// TestTraceGPU: a traced 2-rank float32 allreduce on one GPU (synchronous
// calls, so each call's launches are drained at its end) writes every
// rank's GPU threadblock tracks, each launch's span with its ops inside it,
// and every launch span inside the host span of the call that launched it
// (the clock mapping: %globaltimer to the host clock, docs/trace.md) up to
// a slack of 20 µs. Prints "TRACE ..." with the counts and the largest
// distance of a launch from its call.
func TestTraceGPU(t *testing.T) {
	gputest.Require(t)
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trace.json")
	cfg := theseus.Config{Backend: "cuda", ContextDir: dir}
	cfg.Options.Trace = path
	comms, err := theseus.NewLocalComms(context.Background(), 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const count, calls = 256, 20
	err = onEach(2, func(r int) error {
		c := comms[r]
		send, err := c.MemAlloc(count * 4)
		if err != nil {
			return err
		}
		recv, err := c.MemAlloc(count * 4)
		if err != nil {
			return err
		}
		for range calls {
			if err := c.AllReduce(send, recv, count, theseus.Float32, theseus.Sum, nil); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range comms {
		c.Destroy()
	}
	if err != nil {
		t.Fatal(err)
	}
	f, err := trace.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	_, threads := f.Names()
	type key struct {
		pid    int
		launch float64
	}
	callOf := map[key]trace.Event{} // the host span of each launch: its call
	launches := map[key][]trace.Event{}
	var ops []trace.Event
	gpuTracks := 0
	for k, name := range threads {
		if strings.Contains(name, "(GPU)") {
			gpuTracks++
		} else if k[1] >= 100 {
			t.Errorf("threadblock track %v named %q", k, name)
		}
	}
	for _, e := range f.TraceEvents {
		l, _ := e.Args["launch"].(float64)
		switch e.Cat {
		case "call":
			if strings.HasPrefix(e.Name, "allreduce 1024 B") {
				callOf[key{e.PID, l}] = e
			}
		case "launch":
			launches[key{e.PID, l}] = append(launches[key{e.PID, l}], e)
		case "op":
			ops = append(ops, e)
		}
	}
	if gpuTracks == 0 || len(ops) == 0 || len(launches) < 2*calls {
		t.Fatalf("%d GPU tracks, %d ops, %d launches; want some, and a launch per call and rank", gpuTracks, len(ops), len(launches))
	}
	for _, o := range ops {
		l, _ := o.Args["launch"].(float64)
		ok := false
		for _, ls := range launches[key{o.PID, l}] {
			if ls.TID == o.TID && within(o, ls, 0) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("op %s %v outside its launch", o.Name, o.Args)
		}
	}
	const slack = 20.0 // µs
	worst, checked := 0.0, 0
	for k, ls := range launches {
		c, ok := callOf[k]
		if !ok {
			continue // not an allreduce 1024 B call of the loop
		}
		checked++
		for _, l := range ls {
			d := max(c.TS-l.TS, l.TS+l.Dur-(c.TS+c.Dur), 0)
			worst = max(worst, d)
			if d > slack {
				t.Errorf("rank process %d launch %g: GPU span [%.3f, %.3f] µs outside its call [%.3f, %.3f] by %.3f µs",
					k.pid, k.launch, l.TS, l.TS+l.Dur, c.TS, c.TS+c.Dur, d)
			}
		}
	}
	if checked < calls {
		t.Errorf("%d launches matched to their calls, want at least %d", checked, calls)
	}
	fmt.Printf("TRACE gpu tracks=%d launches=%d ops=%d matched=%d outside-call-max=%.3fus dropped=%d\n",
		gpuTracks, len(launches), len(ops), checked, worst, f.OtherData.DroppedEvents)
}

// within reports whether e lies in c's time span, up to slack µs (and the
// file's nanosecond rounding).
func within(e, c trace.Event, slack float64) bool {
	slack += 0.001
	return e.TS >= c.TS-slack && e.TS+e.Dur <= c.TS+c.Dur+slack
}
