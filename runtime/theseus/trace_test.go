//go:build linux

package theseus

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/trace"
)

// TestTraceHost: a 2-rank allreduce traced through the Go API option on
// the host backend writes a valid traceEvents JSON file with the events
// docs/trace.md documents: a process per rank, its "calls (host)" track
// with a span per call and the call's phases (validate, select,
// materialise, prepare, launch, sync) nested in it, and a track per
// threadblock with the launch span of each launch and its ops (copy,
// reduce, ...) nested in it, every op inside its launch, with tb, step,
// slice and launch arguments; a repeated call's span is a plan launch.
func TestTraceHost(t *testing.T) {
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trace.json")
	cfg := Config{Backend: "host", ContextDir: dir}
	cfg.Options.Trace = path
	comms, err := NewLocalComms(context.Background(), 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const count, calls = 256, 3
	err = eachRank(comms, func(c *Comm) error {
		send, err := c.MemAlloc(count * 4)
		if err != nil {
			return err
		}
		recv, err := c.MemAlloc(count * 4)
		if err != nil {
			return err
		}
		for range calls {
			if err := c.AllReduce(send, recv, count, Float32, Sum, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	for _, c := range comms {
		c.Destroy()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := os.Getenv("TRACE_KEEP"); d != "" {
		os.WriteFile(d, raw, 0o644)
	}
	if !json.Valid(raw) {
		t.Fatalf("%s is not valid JSON", path)
	}
	f, err := trace.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if f.OtherData.Producer != "theseus" || f.OtherData.EpochUnixNS == 0 || f.DisplayTimeUnit != "ns" {
		t.Errorf("otherData %+v, displayTimeUnit %q", f.OtherData, f.DisplayTimeUnit)
	}
	procs, threads := f.Names()
	if len(procs) != 2 {
		t.Fatalf("processes %v, want one per rank", procs)
	}
	type track struct{ pid, tid int }
	byTrack := map[track][]trace.Event{}
	for _, e := range f.TraceEvents {
		switch e.Ph {
		case "M":
		case "X":
			if e.Dur < 0 || e.TS < 0 {
				t.Errorf("event %+v: negative time", e)
			}
			byTrack[track{e.PID, e.TID}] = append(byTrack[track{e.PID, e.TID}], e)
		default:
			t.Errorf("event %+v: phase %q", e, e.Ph)
		}
	}
	for pid, name := range procs {
		if !strings.Contains(name, "rank") {
			t.Errorf("process %d named %q", pid, name)
		}
		if threads[[2]int{pid, 1}] != "calls (host)" {
			t.Errorf("process %d: thread 1 named %q", pid, threads[[2]int{pid, 1}])
		}
		evs := byTrack[track{pid, 1}]
		var callSpans []trace.Event
		phases := map[string]bool{}
		for _, e := range evs {
			if e.Cat == "call" {
				callSpans = append(callSpans, e)
				continue
			}
			phases[e.Name] = true
		}
		if len(callSpans) < calls {
			t.Fatalf("process %s: %d call spans, want at least %d", name, len(callSpans), calls)
		}
		for _, want := range []string{"validate", "select", "materialise", "prepare", "launch", "sync"} {
			if !phases[want] {
				t.Errorf("process %s: no %q span (have %v)", name, want, phases)
			}
		}
		// The allreduce calls (the last ones: the first may be theseus'
		// own): every phase lies inside a call span.
		for _, e := range evs {
			if e.Cat == "call" {
				continue
			}
			if !slices.ContainsFunc(callSpans, func(c trace.Event) bool { return within(e, c) }) {
				t.Errorf("process %s: phase %s [%g, %g] outside every call", name, e.Name, e.TS, e.TS+e.Dur)
			}
		}
		last := callSpans[len(callSpans)-1]
		if last.Name != "allreduce 1024 B" || last.Args["schedule"] == nil || last.Args["note"] != "plan" {
			t.Errorf("process %s: last call %s args %v, want allreduce 1024 B from its plan", name, last.Name, last.Args)
		}
		// The threadblocks' tracks: launch spans with ops inside them.
		tbs := 0
		for tr, evs := range byTrack {
			if tr.pid != pid || tr.tid < 100 {
				continue
			}
			tbs++
			if n := threads[[2]int{pid, tr.tid}]; !strings.HasPrefix(n, "tb ") || !strings.Contains(n, "host interpreter") {
				t.Errorf("process %s: thread %d named %q", name, tr.tid, n)
			}
			var launches, ops []trace.Event
			for _, e := range evs {
				switch e.Cat {
				case "launch":
					launches = append(launches, e)
				case "op":
					ops = append(ops, e)
					for _, k := range []string{"tb", "step", "slice", "launch"} {
						if _, ok := e.Args[k]; !ok {
							t.Errorf("op %s: no %q argument (%v)", e.Name, k, e.Args)
						}
					}
				default:
					t.Errorf("process %s tb track %d: event category %q", name, tr.tid, e.Cat)
				}
			}
			if len(launches) < calls || len(ops) < calls {
				t.Errorf("process %s tb track %d: %d launches, %d ops", name, tr.tid, len(launches), len(ops))
			}
			for _, o := range ops {
				if !slices.ContainsFunc(launches, func(l trace.Event) bool { return within(o, l) && l.Args["launch"] == o.Args["launch"] }) {
					t.Errorf("process %s: op %s %v outside its launch", name, o.Name, o.Args)
				}
			}
		}
		if tbs == 0 {
			t.Errorf("process %s: no threadblock track", name)
		}
	}
}

// within reports whether e lies in c's time span (microseconds, 3
// decimals: a nanosecond of slack).
func within(e, c trace.Event) bool {
	const eps = 0.001
	return e.TS >= c.TS-eps && e.TS+e.Dur <= c.TS+c.Dur+eps
}

// eachRank runs f on every rank concurrently.
func eachRank(comms []*Comm, f func(c *Comm) error) error {
	errs := make(chan error, len(comms))
	for _, c := range comms {
		go func() { errs <- f(c) }()
	}
	var first error
	for range comms {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// TestTraceP2P: a traced communicator's point-to-point calls (a group of a
// send and a receive, an AlltoAllv) are one "call" span each, named by
// what the rank sends.
func TestTraceP2P(t *testing.T) {
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trace.json")
	cfg := Config{Backend: "host", ContextDir: dir}
	cfg.Options.Trace = path
	comms, err := NewLocalComms(context.Background(), 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = eachRank(comms, func(c *Comm) error {
		buf, err := c.MemAlloc(2048)
		if err != nil {
			return err
		}
		peer := 1 - c.Rank()
		c.GroupStart()
		c.Send(buf, 256, Float32, peer, nil)
		c.Recv(buf+1024, 256, Float32, peer, nil)
		if err := c.GroupEnd(); err != nil {
			return err
		}
		return runAlltoAllv(c, []int64{1, 2, 3, 4}, Float32, 1)
	})
	for _, c := range comms {
		c.Destroy()
	}
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := trace.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Cat == "call" {
			got[e.Name] = true
		}
	}
	for _, want := range []string{"P2P 2 ops 1024 B", "AlltoAllv 12 B", "AlltoAllv 28 B"} {
		if !got[want] {
			t.Errorf("no call span %q (have %v)", want, got)
		}
	}
}
