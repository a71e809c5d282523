package publish

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// TestSeedDefault: the default context seeds an empty one with every
// entry at its own id, every value log, and every schedule precompiled.
func TestSeedDefault(t *testing.T) {
	reqs, err := Seed(contexts.Default())
	if err != nil {
		t.Fatal(err)
	}
	l := newLocal(t)
	for _, r := range reqs {
		var err error
		switch {
		case r.Attr != nil:
			_, err = l.Attr(*r.Attr)
		case r.Sched != nil:
			_, err = l.Sched(*r.Sched)
		case r.Value != nil:
			_, err = l.Value(*r.Value)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.Context()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{manifest.AttributeManifest, manifest.ScheduleManifest} {
		data, _ := fs.ReadFile(contexts.Default(), f)
		want := strings.Count(string(data), "\n")
		got := strings.Count(read(t, filepath.Join(l.Dir, f)), "\n")
		if got != want {
			t.Errorf("%s: %d lines, the default has %d", f, got, want)
		}
	}
	for _, s := range c.Schedules {
		if !s.Precompiled || s.Invalid != "" {
			t.Fatalf("schedule %d: %+v", s.ID, s)
		}
	}
	for _, log := range []string{contexts.SlowRankLog, contexts.LLMaxBytesLog} {
		if _, err := os.Stat(filepath.Join(l.Dir, log)); err != nil {
			t.Errorf("no %s: %v", log, err)
		}
	}
}

// TestSeedRejects: a traversal or a gap is refused.
func TestSeedRejects(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"traversal": {manifest.ScheduleManifest: {Data: []byte(`{"file":"../x.json","collective":"allreduce","nranks":2}` + "\n")}},
		"absolute":  {manifest.ScheduleManifest: {Data: []byte(`{"file":"/etc/x.json","collective":"allreduce","nranks":2}` + "\n")}},
		"gap":       {manifest.AttributeManifest: {Data: []byte("\n")}},
	} {
		if _, err := Seed(fsys); err == nil {
			t.Errorf("%s: Seed accepted it", name)
		}
	}
}

// TestSeedGenerated: a generated-schedule entry is seeded as one, with its
// parameters.
func TestSeedGenerated(t *testing.T) {
	reqs, err := Seed(fstest.MapFS{manifest.ScheduleManifest: {Data: []byte(
		`{"gen":"ring","protocol":"ll","channels":"clamp(64 / nranks, 1, 32)","avoid":[2],"collective":"allreduce","preference":"5","valid_after":1700000000}` + "\n")}})
	if err != nil || len(reqs) != 1 || reqs[0].Sched == nil {
		t.Fatalf("%v, %v", reqs, err)
	}
	r := reqs[0].Sched
	if r.Gen != "ring" || r.Protocol != "ll" || r.Channels != "clamp(64 / nranks, 1, 32)" || len(r.Avoid) != 1 || r.ValidAfter != "1700000000" || r.NRanks != 0 {
		t.Fatalf("%+v", r)
	}
}
