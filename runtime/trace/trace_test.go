package trace

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Two opens of one path share a trace; the last Close writes a file that
// Read gives back: metadata, spans with nanosecond times relative to the
// epoch, their arguments, and what was dropped past MaxEvents.
func TestTraceRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.json")
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("two opens of one path: two traces")
	}
	pid := a.Process("rank 0", 0)
	a.Thread(pid, 7, "tb 0", 1)
	e := a.epoch
	a.Span(pid, 7, "op", "copy", e+1500, e+2750, &Args{TB: Int(0), Step: Int(3), Slice: Int64(2), Launch: 9})
	a.Span(pid, 7, "op", "backwards", e+5000, e+4000, nil) // end before begin: zero length
	a.SetMaxEvents(len(a.events))
	a.Span(pid, 7, "op", "dropped", e, e, nil)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("written before the last Close: %v %v", fi, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil { // a Close after the last
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.OtherData.DroppedEvents != 1 || f.OtherData.EpochUnixNS != e {
		t.Errorf("otherData %+v", f.OtherData)
	}
	procs, threads := f.Names()
	if d := cmp.Diff(map[int]string{pid: "rank 0"}, procs); d != "" {
		t.Error(d)
	}
	if threads[[2]int{pid, 7}] != "tb 0" {
		t.Errorf("threads %v", threads)
	}
	var spans []Event
	for _, ev := range f.TraceEvents {
		if ev.Ph == "X" {
			spans = append(spans, ev)
		}
	}
	want := []Event{
		{Name: "copy", Cat: "op", Ph: "X", TS: 1.5, Dur: 1.25, PID: pid, TID: 7,
			Args: map[string]any{"tb": 0.0, "step": 3.0, "slice": 2.0, "launch": 9.0}},
		{Name: "backwards", Cat: "op", Ph: "X", TS: 5, Dur: 0, PID: pid, TID: 7},
	}
	if d := cmp.Diff(want, spans); d != "" {
		t.Errorf("spans (-want +got):\n%s", d)
	}
	// A fresh Open of the path after the last Close starts a new trace.
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Error("reopened after the last Close: the old trace")
	}
	c.Close()
}

func TestMicros(t *testing.T) {
	for ns, want := range map[int64]string{0: "0.000", 1: "0.001", 999: "0.999", 1000: "1.000", 123456789: "123456.789", -1500: "-1.500"} {
		got := string(micros(ns))
		if got != want {
			t.Errorf("micros(%d) = %s, want %s", ns, got, want)
		}
		if _, err := strconv.ParseFloat(got, 64); err != nil || !json.Valid([]byte(got)) {
			t.Errorf("micros(%d) = %s: not a JSON number", ns, got)
		}
	}
}

func TestExpandAndErrors(t *testing.T) {
	if got := Expand("/tmp/t.%p.json"); got != "/tmp/t."+strconv.Itoa(os.Getpid())+".json" {
		t.Errorf("Expand: %s", got)
	}
	host, _ := os.Hostname()
	if got := Expand("%h"); got != host {
		t.Errorf("Expand(%%h) = %s, want %s", got, host)
	}
	if _, err := Open(""); err == nil {
		t.Error("Open of an empty path succeeded")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir", "t.json")); err == nil {
		t.Error("Open in a missing folder succeeded")
	}
	for _, bad := range []string{"", "{", "[]", `{"traceEvents": 3}`, `{"x": 1}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		} else if bad == "{" && !strings.Contains(err.Error(), "byte") {
			t.Errorf("Parse(%q): %v, want the byte offset", bad, err)
		}
	}
}

// FuzzParse: Parse never panics; what it accepts has a traceEvents array
// and re-encodes.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"traceEvents":[{"name":"copy","ph":"X","ts":1.5,"dur":2,"pid":1,"tid":100,"args":{"tb":0}}]}`))
	f.Add([]byte(`{"displayTimeUnit":"ns","otherData":{"producer":"theseus","epoch_unix_ns":1,"dropped_events":0},"traceEvents":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tf, err := Parse(b)
		if err != nil {
			return
		}
		if tf.TraceEvents == nil {
			t.Fatal("accepted without traceEvents")
		}
		if _, err := json.Marshal(tf); err != nil {
			t.Fatal(err)
		}
	})
}

// Merge: two processes' files on one timeline, the later epoch's times
// moved by the difference, the pids kept apart, the drops added; the
// result reads back.
func TestMerge(t *testing.T) {
	a := &File{TraceEvents: []Event{{Name: "process_name", Ph: "M", PID: 1, Args: map[string]any{"name": "rank 0"}},
		{Name: "copy", Ph: "X", TS: 1, Dur: 2, PID: 1, TID: 100}}}
	a.OtherData.EpochUnixNS, a.OtherData.DroppedEvents = 5000, 1
	b := &File{TraceEvents: []Event{{Name: "process_name", Ph: "M", PID: 1, Args: map[string]any{"name": "rank 1"}},
		{Name: "reduce", Ph: "X", TS: 1, Dur: 2, PID: 1, TID: 100}}}
	b.OtherData.EpochUnixNS, b.OtherData.DroppedEvents = 3000, 2
	m := Merge([]*File{a, b})
	if m.OtherData.EpochUnixNS != 3000 || m.OtherData.DroppedEvents != 3 {
		t.Errorf("otherData %+v", m.OtherData)
	}
	procs, _ := m.Names()
	if d := cmp.Diff(map[int]string{1: "rank 0", 2: "rank 1"}, procs); d != "" {
		t.Error(d)
	}
	for _, e := range m.TraceEvents {
		want := map[string]float64{"copy": 3, "reduce": 1}[e.Name] // a's epoch is 2 µs later
		if e.Ph == "X" && e.TS != want {
			t.Errorf("%s at %g µs, want %g", e.Name, e.TS, want)
		}
	}
	path := filepath.Join(t.TempDir(), "m.json")
	if err := m.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := Read(path)
	if err != nil || len(back.TraceEvents) != 4 {
		t.Fatalf("read back: %v, %d events", err, len(back.TraceEvents))
	}
}
