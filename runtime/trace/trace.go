// Package trace writes Theseus's timeline of calls as a Chrome/Perfetto
// trace: a JSON file in the Trace Event Format's object form,
// {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}},
// which ui.perfetto.dev and chrome://tracing open (docs/trace.md).
//
// Every event is a complete event ("ph": "X") on a track: a process (pid)
// per communicator rank, named by a metadata event, and threads (tid) in
// it: the rank's calls on the host, and one per threadblock for the ops
// its launches ran (on the GPU, or in the host interpreter). Times are
// microseconds from the trace's epoch (otherData.epoch_unix_ns, the Unix
// time in nanoseconds of ts 0), as JSON numbers with nanosecond
// precision, so that traces of several processes of one host can be laid
// side by side (docs/trace.md, "Several processes").
//
// A Trace is opened by path (Open) and shared by every communicator of
// the process that opens the same path; it writes the file when the last
// of them closes it. Safe for concurrent use.
package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultMaxEvents bounds the events a trace keeps in memory before it
// writes them (MaxEvents): beyond it, events are counted in
// otherData.dropped_events and not kept.
const DefaultMaxEvents = 4 << 20

// Args are an event's arguments (its "args" object): the fields that are
// set.
type Args struct {
	// Coll, Bytes and Schedule describe a collective call.
	Coll     string `json:"coll,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	Schedule string `json:"schedule,omitempty"`
	// Launch is the communicator's launch counter of the call or launch.
	Launch uint64 `json:"launch,omitempty"`
	// State is the executor state a host span ran (L1Cold, L3Setup, ...).
	State string `json:"state,omitempty"`
	// TB, Step and Slice place an op span: threadblock, op index in it,
	// pipeline slice.
	TB    *int   `json:"tb,omitempty"`
	Step  *int   `json:"step,omitempty"`
	Slice *int64 `json:"slice,omitempty"`
	// Note is free text (how the call was served, its error).
	Note string `json:"note,omitempty"`
}

// Int returns a pointer to v (for Args' optional fields).
func Int(v int) *int { return &v }

// Int64 returns a pointer to v.
func Int64(v int64) *int64 { return &v }

type event struct {
	name, cat  string
	pid, tid   int
	begin, end int64 // Unix ns
	args       *Args
	meta       string // "process_name" or "thread_name" (name is the value)
	sort       int    // "process_sort_index" / "thread_sort_index"
}

// Trace is one trace file being recorded.
type Trace struct {
	mu      sync.Mutex
	path    string
	epoch   int64
	events  []event
	max     int
	dropped int64
	refs    int
	nextPID int
	err     error
}

var (
	openMu sync.Mutex
	open   = map[string]*Trace{}
)

// Open returns the trace that writes to path, shared by every caller in
// this process that opens the same path until each has closed it; the
// first Open creates (truncates) the file, so that a path that cannot be
// written fails here and not at the end. In path, %p expands to the
// process id and %h to the host name (as THESEUS_DEBUG_FILE's), so that
// the processes of a job write a file each. Errors: the file's.
func Open(path string) (*Trace, error) {
	if path == "" {
		return nil, errors.New("trace: empty path")
	}
	path = Expand(path)
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	openMu.Lock()
	defer openMu.Unlock()
	if t := open[abs]; t != nil {
		t.mu.Lock()
		t.refs++
		t.mu.Unlock()
		return t, nil
	}
	f, err := os.Create(abs)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	f.Close()
	t := &Trace{path: abs, epoch: time.Now().UnixNano(), max: DefaultMaxEvents, refs: 1}
	open[abs] = t
	return t, nil
}

// Expand expands %p (the process id) and %h (the host name) in path.
func Expand(path string) string {
	if !strings.Contains(path, "%") {
		return path
	}
	host, _ := os.Hostname()
	return strings.NewReplacer("%p", strconv.Itoa(os.Getpid()), "%h", host).Replace(path)
}

// Path is the file the trace writes.
func (t *Trace) Path() string { return t.path }

// SetMaxEvents bounds the events kept (DefaultMaxEvents until set).
func (t *Trace) SetMaxEvents(n int) {
	t.mu.Lock()
	t.max = n
	t.mu.Unlock()
}

// Process adds a track group named name (a communicator's rank) and
// returns its pid; sort orders it among the others in the viewer.
func (t *Trace) Process(name string, sort int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextPID++
	pid := t.nextPID
	t.events = append(t.events, event{name: name, pid: pid, meta: "process_name"},
		event{pid: pid, meta: "process_sort_index", sort: sort})
	return pid
}

// Thread names track tid of process pid; sort orders it among pid's.
func (t *Trace) Thread(pid, tid int, name string, sort int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, event{name: name, pid: pid, tid: tid, meta: "thread_name"},
		event{pid: pid, tid: tid, meta: "thread_sort_index", sort: sort})
}

// Span records a complete event named name (category cat) on track (pid,
// tid), from begin to end (Unix ns). A span nested in time inside another
// of the same track is drawn beneath it.
func (t *Trace) Span(pid, tid int, cat, name string, begin, end int64, args *Args) {
	t.mu.Lock()
	if len(t.events) < t.max {
		t.events = append(t.events, event{name: name, cat: cat, pid: pid, tid: tid, begin: begin, end: max(end, begin), args: args})
	} else {
		t.dropped++
	}
	t.mu.Unlock()
}

// Dropped reports how many spans were not kept (MaxEvents reached).
func (t *Trace) Dropped() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.dropped
}

// Close drops one reference; the last writes the file and returns its
// error. A Close after the last does nothing.
func (t *Trace) Close() error {
	openMu.Lock()
	t.mu.Lock()
	if t.refs == 0 {
		t.mu.Unlock()
		openMu.Unlock()
		return t.err
	}
	t.refs--
	last := t.refs == 0
	if last && open[t.path] == t {
		delete(open, t.path)
	}
	t.mu.Unlock()
	openMu.Unlock()
	if !last {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = t.write()
	t.events = nil
	return t.err
}

// Flush writes what the trace holds so far to its file (a complete
// trace, which later spans extend at the next Flush or the last Close).
func (t *Trace) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.write()
}

// jsonEvent is one event as the Trace Event Format has it.
type jsonEvent struct {
	Name string          `json:"name,omitempty"`
	Cat  string          `json:"cat,omitempty"`
	Ph   string          `json:"ph"`
	TS   json.RawMessage `json:"ts"`
	Dur  json.RawMessage `json:"dur,omitempty"`
	PID  int             `json:"pid"`
	TID  int             `json:"tid"`
	Args any             `json:"args,omitempty"`
}

// micros writes ns nanoseconds as microseconds with three decimals.
func micros(ns int64) json.RawMessage {
	neg := ns < 0
	if neg {
		ns = -ns
	}
	s := fmt.Sprintf("%d.%03d", ns/1000, ns%1000)
	if neg {
		s = "-" + s
	}
	return json.RawMessage(s)
}

func (t *Trace) write() error {
	f, err := os.Create(t.path)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	fmt.Fprintf(w, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"theseus\",\"epoch_unix_ns\":%d,\"dropped_events\":%d},\n\"traceEvents\":[", t.epoch, t.dropped)
	for i, e := range t.events {
		if i > 0 {
			w.WriteString(",")
		}
		w.WriteString("\n")
		je := jsonEvent{Name: e.name, Cat: e.cat, Ph: "X", TS: micros(e.begin - t.epoch), Dur: micros(e.end - e.begin), PID: e.pid, TID: e.tid}
		if e.args != nil {
			je.Args = e.args
		}
		switch e.meta {
		case "process_name", "thread_name":
			je = jsonEvent{Name: e.meta, Ph: "M", TS: json.RawMessage("0"), PID: e.pid, TID: e.tid, Args: map[string]string{"name": e.name}}
		case "process_sort_index", "thread_sort_index":
			je = jsonEvent{Name: e.meta, Ph: "M", TS: json.RawMessage("0"), PID: e.pid, TID: e.tid, Args: map[string]int{"sort_index": e.sort}}
		}
		b, err := json.Marshal(je)
		if err != nil {
			f.Close()
			return fmt.Errorf("trace: %w", err)
		}
		w.Write(b)
	}
	w.WriteString("]}\n")
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("trace: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// File is a trace file as Read returns it.
type File struct {
	DisplayTimeUnit string `json:"displayTimeUnit"`
	OtherData       struct {
		Producer      string `json:"producer"`
		EpochUnixNS   int64  `json:"epoch_unix_ns"`
		DroppedEvents int64  `json:"dropped_events"`
	} `json:"otherData"`
	TraceEvents []Event `json:"traceEvents"`
}

// Event is one event of a File: ts and dur in microseconds.
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Read reads a trace file (the object form this package writes; other
// producers' files of that form too). Errors: the file's, or malformed
// JSON (with its offset).
func Read(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return Parse(b)
}

// Parse decodes a trace (Read). Errors: malformed JSON, with its byte
// offset; an object without traceEvents.
func Parse(b []byte) (*File, error) {
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("trace: malformed JSON at byte %d: %w", se.Offset, err)
		}
		return nil, fmt.Errorf("trace: %w", err)
	}
	if f.TraceEvents == nil {
		return nil, errors.New("trace: no traceEvents array")
	}
	return &f, nil
}

// Names returns the process names (by pid) and thread names (by pid and
// tid) of f's metadata events.
func (f *File) Names() (procs map[int]string, threads map[[2]int]string) {
	procs, threads = map[int]string{}, map[[2]int]string{}
	for _, e := range f.TraceEvents {
		if e.Ph != "M" {
			continue
		}
		name, _ := e.Args["name"].(string)
		switch e.Name {
		case "process_name":
			procs[e.PID] = name
		case "thread_name":
			threads[[2]int{e.PID, e.TID}] = name
		}
	}
	return procs, threads
}

// Merge lays the traces fs side by side in one: each file's times moved
// to the earliest epoch's (their otherData.epoch_unix_ns), its pids
// renumbered after the previous files' so that no two processes share
// one, its dropped events added. The processes of a job, each of which
// wrote its own file (THESEUS_TRACE with %p), become one timeline.
func Merge(fs []*File) *File {
	out := &File{DisplayTimeUnit: "ns", TraceEvents: []Event{}}
	out.OtherData.Producer = "theseus"
	if len(fs) == 0 {
		return out
	}
	epoch := fs[0].OtherData.EpochUnixNS
	for _, f := range fs {
		epoch = min(epoch, f.OtherData.EpochUnixNS)
	}
	out.OtherData.EpochUnixNS = epoch
	base := 0
	for _, f := range fs {
		shift := float64(f.OtherData.EpochUnixNS-epoch) / 1e3
		top := 0
		for _, e := range f.TraceEvents {
			top = max(top, e.PID)
			e.PID += base
			if e.Ph != "M" {
				e.TS += shift
			}
			out.TraceEvents = append(out.TraceEvents, e)
		}
		base += top
		out.OtherData.DroppedEvents += f.OtherData.DroppedEvents
	}
	return out
}

// Write writes f to path as JSON (the object form).
func (f *File) Write(path string) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}
