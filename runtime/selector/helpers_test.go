package selector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// ctxDir builds a selection context directory for a test.
type ctxDir struct {
	t   testing.TB
	dir string
}

func newCtx(t testing.TB) *ctxDir { return &ctxDir{t: t, dir: t.TempDir()} }

func (c *ctxDir) appendRaw(name, s string) {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		c.t.Fatal(err)
	}
}

func (c *ctxDir) attr(line string)        { c.appendRaw(manifest.AttributeManifest, line+"\n") }
func (c *ctxDir) sched(line string)       { c.appendRaw(manifest.ScheduleManifest, line+"\n") }
func (c *ctxDir) value(name, line string) { c.appendRaw(name+manifest.LogSuffix, line+"\n") }

// fakeFile is the content of a test schedule file, read by fakeLoader.
type fakeFile struct {
	Collective  string `json:"collective"`
	NRanks      int    `json:"nranks"`
	NLocalRanks int    `json:"nlocalranks,omitempty"`
	MinBytes    int64  `json:"min_bytes,omitempty"`
	MaxBytes    int64  `json:"max_bytes,omitempty"`
	InPlace     bool   `json:"inplace"`
	OutOfPlace  bool   `json:"outofplace"`
	Bad         string `json:"bad,omitempty"` // verification fails with this reason
}

func (c *ctxDir) file(name string, f fakeFile) {
	c.t.Helper()
	b, _ := json.Marshal(f)
	if err := os.WriteFile(filepath.Join(c.dir, name), b, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// allreduce8 is a file for an 8-rank allreduce, both arrangements.
func allreduce8() fakeFile {
	return fakeFile{Collective: "allreduce", NRanks: 8, InPlace: true, OutOfPlace: true}
}

// fakeLoader reads fakeFiles and counts loads per path.
type fakeLoader struct {
	mu    sync.Mutex
	loads map[string]int
}

func (l *fakeLoader) Load(path string) (*ScheduleInfo, error) {
	l.mu.Lock()
	if l.loads == nil {
		l.loads = map[string]int{}
	}
	l.loads[filepath.Base(path)]++
	l.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f fakeFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if f.Bad != "" {
		return nil, errors.New(f.Bad)
	}
	coll, err := ir.ParseCollective(f.Collective)
	if err != nil {
		return nil, err
	}
	return &ScheduleInfo{Collective: coll, NRanks: f.NRanks, NLocalRanks: f.NLocalRanks, MinBytes: f.MinBytes,
		MaxBytes: f.MaxBytes, InPlace: f.InPlace, OutOfPlace: f.OutOfPlace}, nil
}

// logSink records log lines.
type logSink struct {
	mu    sync.Mutex
	warns []string
	infos []string
}

func (l *logSink) Warnf(format string, args ...any) {
	l.mu.Lock()
	l.warns = append(l.warns, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logSink) Infof(format string, args ...any) {
	l.mu.Lock()
	l.infos = append(l.infos, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// warned reports whether some warning contains every fragment.
func (l *logSink) warned(frags ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
outer:
	for _, w := range l.warns {
		for _, f := range frags {
			if !strings.Contains(w, f) {
				continue outer
			}
		}
		return true
	}
	return false
}

func (l *logSink) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.warns, "\n")
}

// fakeClock is a settable clock.
type fakeClock struct{ ns atomic.Int64 }

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t0.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func stamp(d time.Duration) string           { return t0.Add(d).Format("2006-01-02T15:04:05") }

// harness is one selector over a test context, checking every period.
type harness struct {
	*ctxDir
	t      testing.TB
	s      *Selector
	log    *logSink
	clock  *fakeClock
	loader *fakeLoader
}

func newHarness(t testing.TB) *harness {
	h := &harness{ctxDir: newCtx(t), t: t, log: &logSink{}, clock: newClock(), loader: &fakeLoader{}}
	s, err := New(Options{Dir: h.dir, CheckPeriod: 1, Loader: h.loader, Clock: h.clock.now, Location: time.UTC,
		Logger: h.log, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h.s = s
	return h
}

// standardAttrs declares the endo attributes most tests use.
func (h *harness) standardAttrs() {
	h.attr(`{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}`)
	h.attr(`{"name":"coll","type":"int","origin":"endo","path":"request.coll"}`)
	h.attr(`{"name":"nranks","type":"int","origin":"endo","path":"request.nranks"}`)
}

func req(coll ir.Collective, count int64) *Request {
	return &Request{Coll: coll, Count: count, DataType: ir.Float32, RedOp: ir.Sum, Root: -1, NRanks: 8, NLocalRanks: 8}
}

// sel runs Select and fails the test on error.
func (h *harness) sel(r *Request) int {
	h.t.Helper()
	id, err := h.s.Select(context.Background(), r)
	if err != nil {
		h.t.Fatalf("Select: %v", err)
	}
	return id
}
