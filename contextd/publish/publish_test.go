package publish

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

func example(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newLocal(t *testing.T) *Local {
	return &Local{Dir: filepath.Join(t.TempDir(), "ctx"), V: Validator{Now: func() time.Time { return t0 }, Margin: time.Second}}
}

// seedAttrs declares msgsize (endo) and slow_rank (exo int).
func seedAttrs(t *testing.T, l *Local) {
	t.Helper()
	for _, r := range []api.AttrRequest{
		{Name: "msgsize", Origin: "endo", Path: "request.messagesize"},
		{Name: "slow_rank", Origin: "exo", Type: "int", Default: "-1", ValidAfter: "always"},
		{Name: "bw", Origin: "exo", Type: "vector", Default: "[1, 2]"},
	} {
		if _, err := l.Attr(r); err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestLocalPublish: every kind of entry, as the lines the runtime reads:
// the default valid_after is now plus the margin, the file is stored under
// its hash before its line, and the programs are there.
func TestLocalPublish(t *testing.T) {
	l := newLocal(t)
	seedAttrs(t, l)
	p, err := l.Sched(api.SchedRequest{FileName: "allreduce_ring_8rank_simple.json", File: example(t, "allreduce_ring_8rank_simple.json"),
		Collective: "allreduce", Usable: "msgsize <= 1048576", Preference: "slow_rank < 0 ? 10 : 1"})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != 0 || !strings.HasPrefix(p.File, "schedules/") || p.ValidAfter != "2026-03-01T12:00:01Z" {
		t.Fatalf("reply %+v", p)
	}
	if got := read(t, filepath.Join(l.Dir, p.File)); got != string(example(t, "allreduce_ring_8rank_simple.json")) {
		t.Fatal("the schedule file is not the published bytes")
	}
	v, err := l.Value(api.ValueRequest{Name: "slow_rank", Value: " 3 ", ValidAfter: "+0s"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"value":3,"valid_after":1772366400}`; v.Line != want {
		t.Fatalf("value line %s, want %s", v.Line, want)
	}
	if got := read(t, filepath.Join(l.Dir, "slow_rank.jsonl")); got != v.Line+"\n" {
		t.Fatalf("slow_rank.jsonl = %q", got)
	}
	attrs := read(t, filepath.Join(l.Dir, manifest.AttributeManifest))
	want := `{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize","valid_after":1772366401}` + "\n" +
		`{"name":"slow_rank","type":"int","origin":"exo","default":-1}` + "\n" +
		`{"name":"bw","type":"vector","origin":"exo","default":[1,2],"valid_after":1772366401}` + "\n"
	if attrs != want {
		t.Fatalf("attribute manifest:\n%s\nwant\n%s", attrs, want)
	}
	if _, err := os.Stat(filepath.Join(l.Dir, "bw.jsonl")); err != nil {
		t.Fatalf("the exo attribute's empty log: %v", err)
	}
	c, err := l.Context()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Schedules) != 1 || !c.Schedules[0].Precompiled || c.Schedules[0].NRanks != 8 || c.Attributes[1].Value != "3" {
		t.Fatalf("context %+v", c)
	}
	// A replacement names the earlier id.
	zero := 0
	p2, err := l.Sched(api.SchedRequest{FileName: "ring.json", File: example(t, "allreduce_ring_8rank_simple.json"), Collective: "all_reduce", Replaces: &zero})
	if err != nil || p2.ID != 1 || !strings.Contains(p2.Line, `"replaces":0`) || p2.File != p.File {
		t.Fatalf("replacement: %+v, %v", p2, err)
	}
}

// TestBadInput: every rejection has its reason, and nothing is written.
func TestBadInput(t *testing.T) {
	l := newLocal(t)
	seedAttrs(t, l)
	ring := example(t, "allreduce_ring_8rank_simple.json")
	broken := bytes.Replace(ring, []byte(`"nranks": 8`), []byte(`"nranks": 3`), 1)
	if bytes.Equal(broken, ring) {
		broken = []byte(`{"version": 1, "collective": "allreduce", "nranks": 2, "ranks": []}`)
	}
	seven := 7
	l.V.MaxScheduleBytes = 64 << 10
	before := snapshot(t, l.Dir)
	for _, tc := range []struct {
		name   string
		do     func() error
		reason string
		msg    string
	}{
		{"invalid schedule", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "bad.json", File: broken, Collective: "allreduce"})
			return err
		}, api.ReasonInvalidSchedule, "bad.json"},
		{"wrong collective", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "r.json", File: ring, Collective: "allgather"})
			return err
		}, api.ReasonInvalidSchedule, "the manifest says allgather"},
		{"bad expression", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "r.json", File: ring, Collective: "allreduce", Usable: "msgsize +"})
			return err
		}, api.ReasonBadExpression, "does not compile"},
		{"type error", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "r.json", File: ring, Collective: "allreduce", Preference: "msgsize > 1"})
			return err
		}, api.ReasonBadExpression, "does not compile"},
		{"undeclared in policy", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "r.json", File: ring, Collective: "allreduce", Usable: "nosuch > 1"})
			return err
		}, api.ReasonBadExpression, "does not compile"},
		{"replaces nothing", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "r.json", File: ring, Collective: "allreduce", Replaces: &seven})
			return err
		}, api.ReasonBadReplaces, "--replaces 7"},
		{"oversize file", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "big.json", File: make([]byte, 65<<10), Collective: "allreduce"})
			return err
		}, api.ReasonTooLarge, "over the limit"},
		{"oversize expression", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "r.json", File: ring, Collective: "allreduce", Usable: strings.Repeat("1 < 2 && ", 500) + "true"})
			return err
		}, api.ReasonTooLarge, "over the limit of 4096"},
		{"traversal", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "../../etc/ring.json", File: ring, Collective: "allreduce"})
			return err
		}, api.ReasonBadName, "traversal"},
		{"bad extension", func() error {
			_, err := l.Sched(api.SchedRequest{FileName: "ring.jsonl", File: ring, Collective: "allreduce"})
			return err
		}, api.ReasonBadName, "extension"},
		{"unknown attribute in set", func() error {
			_, err := l.Value(api.ValueRequest{Name: "nosuch", Value: "1"})
			return err
		}, api.ReasonUnknownAttribute, `"nosuch" is not declared`},
		{"wrong type", func() error {
			_, err := l.Value(api.ValueRequest{Name: "slow_rank", Value: "2.5"})
			return err
		}, api.ReasonWrongType, "is not an int"},
		{"wrong type vector", func() error {
			_, err := l.Value(api.ValueRequest{Name: "bw", Value: "[1, x]"})
			return err
		}, api.ReasonWrongType, "element 1"},
		{"set endo", func() error {
			_, err := l.Value(api.ValueRequest{Name: "msgsize", Value: "1"})
			return err
		}, api.ReasonBadRequest, "is endo"},
		{"oversize value", func() error {
			_, err := l.Value(api.ValueRequest{Name: "bw", Value: strings.Repeat("1,", 40000) + "1"})
			return err
		}, api.ReasonTooLarge, "over the limit"},
		{"duplicate attribute", func() error {
			_, err := l.Attr(api.AttrRequest{Name: "slow_rank", Origin: "exo", Type: "float"})
			return err
		}, api.ReasonDuplicate, "already declared"},
		{"bad attribute name", func() error {
			_, err := l.Attr(api.AttrRequest{Name: "../x", Origin: "exo", Type: "int"})
			return err
		}, api.ReasonBadName, "invalid attribute name"},
		{"bad default", func() error {
			_, err := l.Attr(api.AttrRequest{Name: "x", Origin: "exo", Type: "bool", Default: "1"})
			return err
		}, api.ReasonWrongType, "not a bool"},
		{"bad endo path", func() error {
			_, err := l.Attr(api.AttrRequest{Name: "x", Origin: "endo", Path: "request.nosuch"})
			return err
		}, api.ReasonBadRequest, "request.nosuch"},
		{"bad valid_after", func() error {
			_, err := l.Value(api.ValueRequest{Name: "slow_rank", Value: "1", ValidAfter: "tomorrow"})
			return err
		}, api.ReasonBadRequest, "valid_after"},
	} {
		err := tc.do()
		e, ok := err.(*api.Error)
		if !ok || e.Reason != tc.reason || !strings.Contains(e.Error(), tc.msg) {
			t.Errorf("%s: %v (%T), want reason %s containing %q", tc.name, err, err, tc.reason, tc.msg)
		}
	}
	if after := snapshot(t, l.Dir); after != before {
		t.Fatalf("a rejected publication wrote something:\n%s\nthen\n%s", before, after)
	}
}

// snapshot lists every file under dir with its content.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(p)
			b.WriteString(p + "\n" + string(data) + "\n")
		}
		return nil
	})
	return b.String()
}

// TestWriterRollsForward: after a crash between the append and the
// checkpoint, Apply with the checkpointed sizes neither duplicates a line
// it finds complete nor leaves one it finds torn; bytes from another writer
// are an error and nothing is written.
func TestWriterRollsForward(t *testing.T) {
	root := t.TempDir()
	lines := []*Entry{
		{Kind: api.KindValue, Attr: "x", Line: `{"value":1}`},
		{Kind: api.KindValue, Attr: "x", Line: `{"value":22}`},
		{Kind: api.KindValue, Attr: "x", Line: `{"value":333}`},
	}
	log := filepath.Join(root, "c", "x.jsonl")
	for _, crash := range []string{"", `{"value":1}` + "\n", `{"value":1}` + "\n" + `{"val`, `{"value":1}` + "\n" + `{"value":22}` + "\n"} {
		os.RemoveAll(filepath.Join(root, "c"))
		os.MkdirAll(filepath.Join(root, "c"), 0o755)
		os.WriteFile(log, []byte(crash), 0o644)
		w := &Writer{Root: root, Sizes: map[string]int64{}}
		for _, e := range lines {
			if err := w.Apply("c", e, nil); err != nil {
				t.Fatalf("crash state %q: %v", crash, err)
			}
		}
		w.Sync()
		w.Close()
		if got, want := read(t, log), "{\"value\":1}\n{\"value\":22}\n{\"value\":333}\n"; got != want {
			t.Errorf("crash state %q: the log is %q, want %q", crash, got, want)
		}
		if w.Sizes["c/x.jsonl"] != int64(len(read(t, log))) {
			t.Errorf("crash state %q: recorded %d bytes", crash, w.Sizes["c/x.jsonl"])
		}
	}
	os.WriteFile(log, []byte(`{"value":9}`+"\n"), 0o644)
	w := &Writer{Root: root, Sizes: map[string]int64{}}
	if err := w.Apply("c", lines[0], nil); err == nil || !strings.Contains(err.Error(), "did not write") {
		t.Fatalf("foreign bytes: %v", err)
	}
	if got := read(t, log); got != `{"value":9}`+"\n" {
		t.Fatalf("foreign bytes: the log became %q", got)
	}
	w = &Writer{Root: root, Sizes: map[string]int64{"c/x.jsonl": 100}}
	if err := w.Apply("c", lines[0], nil); err == nil || !strings.Contains(err.Error(), "shorter") {
		t.Fatalf("truncated log: %v", err)
	}
	// Local mode refuses to append after a torn line.
	os.WriteFile(log, []byte(`{"value":9}`), 0o644)
	w = &Writer{Root: root}
	if err := w.Apply("c", lines[0], nil); err == nil || !strings.Contains(err.Error(), "torn line") {
		t.Fatalf("torn line in local mode: %v", err)
	}
}

// TestEntryCheck: what a materialiser refuses to apply from the log.
func TestEntryCheck(t *testing.T) {
	for _, e := range []*Entry{
		{Kind: "rm", Line: "{}"},
		{Kind: api.KindValue, Attr: "../../etc/passwd", Line: "{}"},
		{Kind: api.KindAttr, Attr: "a/b", Line: "{}"},
		{Kind: api.KindValue, Attr: "x", Line: "{}\n{}"},
		{Kind: api.KindSched, Line: "{}", Object: &Object{Name: strings.Repeat("a", 64), Path: "../" + strings.Repeat("a", 64) + ".json"}},
		{Kind: api.KindSched, Line: "{}", Object: &Object{Name: strings.Repeat("a", 64), Path: "schedules/" + strings.Repeat("b", 64) + ".json"}},
	} {
		if err := e.Check(); err == nil {
			t.Errorf("Check accepted %+v", e)
		}
	}
}

// compileTSB compiles the schedule file at path (relative to the
// repository root) into a bundle as theseusc compile does, with the
// passes in skip left out.
func compileTSB(t *testing.T, path string, skip []string, embed bool) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	src := load.Parse(path, load.Detect(path, data), data)
	if src.Program == nil {
		t.Fatalf("%s: %v", path, src.Diags)
	}
	st, err := passes.Run(src.Program, passes.Options{Skip: skip, EmbedSource: embed})
	if err != nil || st.Bundle == nil {
		t.Fatalf("compiling %s: %v %v", path, err, st.Diags)
	}
	var b bytes.Buffer
	if _, err := st.Bundle.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestUnverifiedBundles (finding 03): a bundle compiled without
// verification (theseusc compile --skip verify-input,verify) is refused
// when its embedded source is wrong (a wrong result, a race) or absent,
// and accepted when its source is right and compiles to its tables; a
// verified bundle is accepted.
func TestUnverifiedBundles(t *testing.T) {
	skip := []string{"verify-input", "verify"}
	for _, tc := range []struct {
		name, path string
		skip       []string
		embed      bool
		want       string // "" accepted, else a piece of the rejection
	}{
		{"wrong result", "testdata/bad/wrong_result.json", skip, true, "fails verification"},
		{"race", "testdata/bad/race.json", skip, true, "fails verification"},
		{"no source", "examples/allreduce_pairs_2rank_simple.json", skip, false, "compiled without verification"},
		{"unverified, right", "examples/allreduce_pairs_2rank_simple.json", skip, true, ""},
		{"verified", "examples/allreduce_pairs_2rank_simple.json", nil, true, ""},
		{"verified, no source", "examples/allreduce_pairs_2rank_simple.json", nil, false, ""},
	} {
		l := newLocal(t)
		_, err := l.Sched(api.SchedRequest{FileName: "s.tsb", File: compileTSB(t, tc.path, tc.skip, tc.embed), Collective: "allreduce"})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a rejection for %q", tc.name, err, tc.want)
		case tc.want != "":
			if b, _ := os.ReadFile(filepath.Join(l.Dir, manifest.ScheduleManifest)); len(b) > 0 {
				t.Errorf("%s: rejected, but written:\n%s", tc.name, b)
			}
		}
	}
}

// TestGeneratedEntryChecks (finding 03): a generated entry is refused
// when the runtime could never use it: channels that read an attribute
// other than the communicator's shape, a hierarchical layout whose
// nlocalranks does not divide nranks, a ring over the op limit, channels
// that fault at every shape or are out of range.
func TestGeneratedEntryChecks(t *testing.T) {
	l := newLocal(t)
	seedAttrs(t, l)
	if _, err := l.Attr(api.AttrRequest{Name: "nranks", Origin: "endo", Path: "request.nranks"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    api.SchedRequest
		want string
	}{
		{"channels read an attribute", api.SchedRequest{Gen: "ring", Collective: "allreduce", Channels: "slow_rank"}, "channels reads"},
		{"hier 6 by 4", api.SchedRequest{Gen: "hier", Collective: "allreduce", NRanks: 6, NLocalRanks: 4}, "can serve no communicator"},
		{"ring 8192", api.SchedRequest{Gen: "ring", Collective: "allreduce", NRanks: 8192}, "can serve no communicator"},
		{"channels divide by zero", api.SchedRequest{Gen: "ring", Collective: "allreduce", Channels: "nranks / 0"}, "integer division by zero"},
		{"channels -5", api.SchedRequest{Gen: "ring", Collective: "allreduce", Channels: "-5"}, "channels must be in [1, 32]"},
		{"ring", api.SchedRequest{Gen: "ring", Collective: "allreduce", Channels: "nranks > 4 ? 2 : 1"}, ""},
		{"hier 8 by 4", api.SchedRequest{Gen: "hier", Collective: "allreduce", NRanks: 8, NLocalRanks: 4}, ""},
	} {
		_, err := l.Sched(tc.r)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a rejection for %q", tc.name, err, tc.want)
		}
	}
	if got := l.mustContext(t).Schedules; len(got) != 2 {
		t.Errorf("%d schedules written, want the 2 accepted", len(got))
	}
}

func (l *Local) mustContext(t *testing.T) *api.Context {
	t.Helper()
	c, err := l.Context()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
