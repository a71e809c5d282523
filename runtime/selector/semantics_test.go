package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// One test per selection rule of the seed README ("Theseus Core APIs").

func TestTieGoesToLatest(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	for _, f := range []string{"a.json", "b.json", "c.json"} {
		h.file(f, allreduce8())
	}
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"10"}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"preference":"10.0"}`) // int and float compare equal
	h.sched(`{"file":"c.json","collective":"allreduce","nranks":8,"preference":"9"}`)
	if id := h.sel(req(ir.AllReduce, 1024)); id != 1 {
		t.Fatalf("Select = %d, want 1 (tie between 0 and 1 goes to the later)", id)
	}
}

func TestReplacedScheduleStaysSelectable(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.attr(`{"name":"degraded","type":"bool","origin":"exo","default":false}`)
	h.file("old.json", allreduce8())
	h.file("new.json", allreduce8())
	h.sched(`{"file":"old.json","collective":"allreduce","nranks":8,"preference":"5"}`)
	h.sched(`{"file":"new.json","collective":"allreduce","nranks":8,"replaces":0,"usable":"!degraded","preference":"5"}`)
	r := req(ir.AllReduce, 1024)
	if id := h.sel(r); id != 1 {
		t.Fatalf("Select = %d, want 1 (the replacement wins the tie)", id)
	}
	ref, ok := h.s.Schedule(1)
	if !ok || ref.Replaces != 0 {
		t.Fatalf("Schedule(1) = %+v, %v; want Replaces 0", ref, ok)
	}
	h.value("degraded", `{"value":true}`)
	if id := h.sel(r); id != 0 {
		t.Fatalf("Select = %d, want the replaced schedule 0 while its replacement is unusable", id)
	}
}

func TestSelectionReturnsToReplacedOnRecovery(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.attr(`{"name":"slow_rank","type":"int","origin":"exo","default":-1}`)
	h.file("ring.json", allreduce8())
	h.file("avoid.json", allreduce8())
	// The ring is best unless a rank is slow; the replacement avoids the slow rank.
	h.sched(`{"file":"ring.json","collective":"allreduce","nranks":8,"preference":"slow_rank < 0 ? 10 : 1"}`)
	h.sched(`{"file":"avoid.json","collective":"allreduce","nranks":8,"replaces":0,"preference":"5"}`)
	r := req(ir.AllReduce, 1<<20)
	var got []int
	for _, v := range []string{"", "3", "-1", "5", "-1"} {
		if v != "" {
			h.value("slow_rank", `{"value":`+v+`}`)
		}
		got = append(got, h.sel(r))
	}
	if want := []int{0, 1, 0, 1, 0}; !cmp.Equal(got, want) {
		t.Fatalf("selections %v, want %v: back to the replaced ring whenever it outscores again", got, want)
	}
}

func TestAllUnusableGivesNone(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"msgsize < 100"}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"usable":"false"}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"usable":"msgsize / (msgsize - 4096) > 0"}`) // faults: unusable
	if id := h.sel(req(ir.AllReduce, 1024)); id != None {
		t.Fatalf("Select = %d, want None", id)
	}
	if id := h.sel(req(ir.AllGather, 1024)); id != None {
		t.Fatalf("Select = %d, want None for a collective without schedules", id)
	}
	if !h.log.warned("schedule 2", "integer division by zero", "msgsize / (msgsize - 4096)") {
		t.Fatalf("no warning for the faulting expression:\n%s", h.log.dump())
	}
}

func TestSizeWindow(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("small.json", allreduce8())
	h.file("large.json", allreduce8())
	h.file("any.json", allreduce8())
	h.sched(`{"file":"any.json","collective":"allreduce","nranks":8,"preference":"0"}`)
	h.sched(`{"file":"small.json","collective":"allreduce","nranks":8,"max_bytes":4096,"preference":"1"}`)
	h.sched(`{"file":"large.json","collective":"allreduce","nranks":8,"min_bytes":4097,"max_bytes":65536,"preference":"1"}`)
	// float32: message size = 4 * count bytes; windows are inclusive.
	for count, want := range map[int64]int{0: 1, 1024: 1, 1025: 2, 16384: 2, 16385: 0} {
		if id := h.sel(req(ir.AllReduce, count)); id != want {
			t.Errorf("count %d (%d B): Select = %d, want %d", count, 4*count, id, want)
		}
	}
	// Allgather's message size is count * nranks * size (ir.MessageBytes).
	h.file("ag.json", fakeFile{Collective: "allgather", NRanks: 8, OutOfPlace: true})
	h.sched(`{"file":"ag.json","collective":"allgather","nranks":8,"max_bytes":4096}`)
	if id := h.sel(req(ir.AllGather, 128)); id != 3 {
		t.Errorf("allgather 128 x 8 x 4 B: Select = %d, want 3", id)
	}
	if id := h.sel(req(ir.AllGather, 129)); id != None {
		t.Errorf("allgather 129 x 8 x 4 B: Select = %d, want None", id)
	}
}

func TestConstraints(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("oop.json", fakeFile{Collective: "allreduce", NRanks: 8, OutOfPlace: true})
	h.file("hier.json", fakeFile{Collective: "allreduce", NRanks: 8, NLocalRanks: 4, InPlace: true, OutOfPlace: true})
	h.file("r4.json", fakeFile{Collective: "allreduce", NRanks: 4, InPlace: true, OutOfPlace: true})
	h.sched(`{"file":"oop.json","collective":"allreduce","nranks":8}`)                   // 0: out of place only (from the file)
	h.sched(`{"file":"hier.json","collective":"allreduce","nranks":8,"preference":"1"}`) // 1: needs 4 ranks per node (from the file)
	h.sched(`{"file":"r4.json","collective":"allreduce","nranks":4,"preference":"2"}`)   // 2: 4 ranks
	h.sched(`{"file":"oop.json","collective":"allreduce","nranks":8,"inplace":false}`)   // 3: out of place, from the manifest
	r := req(ir.AllReduce, 1024)
	if id := h.sel(r); id != 3 { // 1 wins, loads, and turns out to need nlocalranks 4; 3 ties 0 and is later
		t.Fatalf("out of place, 8 per node: Select = %d, want 3", id)
	}
	r.InPlace = true
	if id := h.sel(r); id != None {
		t.Fatalf("in place, 8 per node: Select = %d, want None", id)
	}
	r.NLocalRanks = 4
	if id := h.sel(r); id != 1 {
		t.Fatalf("in place, 4 per node: Select = %d, want 1", id)
	}
	r4 := req(ir.AllReduce, 1024)
	r4.NRanks, r4.NLocalRanks = 4, 4
	if id := h.sel(r4); id != 2 {
		t.Fatalf("4 ranks: Select = %d, want 2", id)
	}
}

func TestAttributeAppearsAtRuntime(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"1"}`)
	// Schedule 1 names an attribute nobody has declared yet.
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"usable":"link_ok","preference":"2"}`)
	r := req(ir.AllReduce, 1024)
	if id := h.sel(r); id != 0 {
		t.Fatalf("before the attribute: Select = %d, want 0", id)
	}
	// Declared, but valid only in a minute.
	h.attr(`{"name":"link_ok","type":"bool","origin":"exo","default":true,"valid_after":"` + stamp(time.Minute) + `"}`)
	if id := h.sel(r); id != 0 {
		t.Fatalf("attribute not yet valid: Select = %d, want 0", id)
	}
	h.clock.advance(time.Minute)
	if id := h.sel(r); id != 1 {
		t.Fatalf("attribute valid: Select = %d, want 1", id)
	}
	h.value("link_ok", `{"value":false}`)
	if id := h.sel(r); id != 0 {
		t.Fatalf("attribute false: Select = %d, want 0", id)
	}
	// A value published for later takes effect when the clock passes it.
	h.value("link_ok", `{"value":true,"valid_after":"`+stamp(2*time.Minute)+`"}`)
	if id := h.sel(r); id != 0 {
		t.Fatalf("value not yet valid: Select = %d, want 0", id)
	}
	h.clock.advance(time.Minute)
	if id := h.sel(r); id != 1 {
		t.Fatalf("value valid: Select = %d, want 1", id)
	}
}

func TestScheduleAppearsAtRuntime(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	r := req(ir.AllReduce, 1024)
	if id := h.sel(r); id != None {
		t.Fatalf("empty manifest: Select = %d", id)
	}
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"valid_after":"` + stamp(time.Hour) + `"}`)
	if id := h.sel(r); id != None {
		t.Fatalf("future entry: Select = %d", id)
	}
	h.clock.advance(time.Hour)
	if id := h.sel(r); id != 0 {
		t.Fatalf("valid entry: Select = %d, want 0", id)
	}
}

func TestNarrowingFromFile(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	f := allreduce8()
	f.MinBytes, f.MaxBytes = 1024, 8192
	h.file("w.json", f)
	h.file("any.json", allreduce8())
	h.sched(`{"file":"any.json","collective":"allreduce","nranks":8}`)
	h.sched(`{"file":"w.json","collective":"allreduce","nranks":8,"max_bytes":4096,"preference":"1"}`)
	for count, want := range map[int64]int{100: 0, 256: 1, 1024: 1, 1025: 0} {
		if id := h.sel(req(ir.AllReduce, count)); id != want {
			t.Errorf("%d B: Select = %d, want %d (window [1024, 4096] = manifest ∩ file)", 4*count, id, want)
		}
	}
	if n := h.loader.loads["w.json"]; n != 1 {
		t.Errorf("w.json loaded %d times, want once", n)
	}
}

func TestCacheAndEpochs(t *testing.T) {
	h := newHarness(t)
	h.s.opt.CheckPeriod = 10
	h.standardAttrs()
	h.attr(`{"name":"w","type":"int","origin":"exo","default":0}`)
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"1"}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"preference":"w"}`)
	r := req(ir.AllReduce, 1024)
	for i := 0; i < 5; i++ {
		if id := h.sel(r); id != 0 {
			t.Fatalf("request %d: %d", i, id)
		}
	}
	h.value("w", `{"value":2}`)
	for i := 5; i < 10; i++ { // still in the first period: the change waits
		if id := h.sel(r); id != 0 {
			t.Fatalf("request %d: %d, want 0 until the next epoch", i, id)
		}
	}
	if id := h.sel(r); id != 1 { // request 10 starts an epoch
		t.Fatalf("request 10: %d, want 1", id)
	}
	st := h.s.Stats()
	if st.Epochs != 2 || st.Snapshots != 2 || st.Requests != 11 || st.Hits != 9 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSelectHitAllocatesNothing(t *testing.T) {
	h := newHarness(t)
	h.s.opt.CheckPeriod = 1 << 30
	h.standardAttrs()
	h.file("a.json", allreduce8())
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"msgsize > 0"}`)
	r := req(ir.AllReduce, 1024)
	h.sel(r)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { h.s.Select(ctx, r) }); n != 0 {
		t.Fatalf("a cache hit allocates %v times", n)
	}
}

func TestBadRequest(t *testing.T) {
	h := newHarness(t)
	for _, r := range []*Request{
		{Coll: ir.NumCollectives, NRanks: 1, Root: -1},
		{Coll: ir.AllReduce, DataType: ir.NumDataTypes, NRanks: 1, Root: -1},
		{Coll: ir.AllReduce, NRanks: 0, Root: -1},
		{Coll: ir.AllReduce, NRanks: 2, NLocalRanks: 3, Root: -1},
		{Coll: ir.Broadcast, NRanks: 2, Root: 2},
		{Coll: ir.AllReduce, NRanks: 2, Count: -1, Root: -1},
		{Coll: ir.AllGather, NRanks: 1 << 16, Count: 1 << 50, DataType: ir.Float64, Root: -1},
	} {
		if _, err := h.s.Select(context.Background(), r); err == nil || !strings.Contains(err.Error(), "bad request") {
			t.Errorf("Select(%+v) = %v, want ErrBadRequest", r, err)
		}
	}
}

func TestExplain(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.attr(`{"name":"slow_rank","type":"int","origin":"exo","default":-1}`)
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.file("c.json", fakeFile{Collective: "allgather", NRanks: 8, OutOfPlace: true})
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"log2(msgsize)","name":"ring"}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"usable":"slow_rank >= 0","preference":"100"}`)
	h.sched(`{"file":"c.json","collective":"allgather","nranks":8}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"max_bytes":16}`)
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"1"}`)
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"nosuch"}`)
	h.sched(`not json`)
	e, err := h.s.Explain(context.Background(), req(ir.AllReduce, 1024))
	if err != nil {
		t.Fatal(err)
	}
	p12 := Number(12)
	one := Number(1)
	want := []Candidate{
		{ID: 0, Name: "ring", File: "a.json", Collective: "allreduce", Replaces: -1, Selectable: true, Matched: true, Usable: true, Preference: &p12, Chosen: true},
		{ID: 1, File: "b.json", Collective: "allreduce", Replaces: -1, Selectable: true, Matched: true, Reason: "usability expression is false"},
		{ID: 2, File: "c.json", Collective: "allgather", Replaces: -1, Selectable: true, Reason: "collective allgather, request is allreduce"},
		{ID: 3, File: "b.json", Collective: "allreduce", Replaces: -1, Selectable: true, Reason: "message size 4096 B above max_bytes 16"},
		{ID: 4, File: "a.json", Collective: "allreduce", Replaces: -1, Selectable: true, Matched: true, Usable: true, Preference: &one, Reason: "outscored by schedule 0"},
		{ID: 5, File: "a.json", Collective: "allreduce", Replaces: -1, Reason: e.Candidates[5].Reason},
		{ID: 6, Replaces: -1, Reason: e.Candidates[6].Reason},
	}
	if d := cmp.Diff(want, e.Candidates); d != "" {
		t.Fatalf("candidates (-want +got):\n%s", d)
	}
	if !strings.Contains(e.Candidates[5].Reason, `unknown attribute "nosuch"`) || !strings.Contains(e.Candidates[6].Reason, "TS0001") {
		t.Fatalf("reasons: %q, %q", e.Candidates[5].Reason, e.Candidates[6].Reason)
	}
	if e.Chosen != 0 || !strings.HasSuffix(e.File, "a.json") || e.MessageBytes != 4096 {
		t.Fatalf("chosen %d %q, %d B", e.Chosen, e.File, e.MessageBytes)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{`"chosen":0`, `"preference":12`, `"matched":true`, `"name":"slow_rank"`, `"value":"-1"`} {
		if !strings.Contains(string(b), frag) {
			t.Errorf("JSON lacks %s:\n%s", frag, b)
		}
	}
	txt := e.String()
	for _, frag := range []string{"chosen: 0", "<- chosen", "outscored by schedule 0", "slow_rank"} {
		if !strings.Contains(txt, frag) {
			t.Errorf("text lacks %q:\n%s", frag, txt)
		}
	}
	if s := fmt.Sprint(Number(1.5)); s != "1.5" {
		t.Errorf("Number prints %s", s)
	}
}

// TestExplainFileConstraints: a schedule whose manifest entry matches the
// request but whose file, once loaded, narrows it away (its own
// message-size window and no out-of-place arrangement, as MSCCL XML's
// minBytes and outofplace=0 do) is reported as not matched, with the file's
// constraints as the reason — not as matched and usable with nothing chosen.
func TestExplainFileConstraints(t *testing.T) {
	h := newHarness(t)
	h.file("hier.xml", fakeFile{Collective: "allreduce", NRanks: 8, MinBytes: 617472, InPlace: true})
	h.sched(`{"file":"hier.xml","collective":"allreduce","nranks":8,"preference":"100"}`)
	ctx := context.Background()
	for round := 0; round < 2; round++ { // first load, then the loaded entry
		e, err := h.s.Explain(ctx, req(ir.AllReduce, 1024))
		if err != nil {
			t.Fatal(err)
		}
		want := []Candidate{{ID: 0, File: "hier.xml", Collective: "allreduce", Replaces: -1, Selectable: true,
			Reason: "message size 4096 B below the file's min_bytes 617472; out-of-place requests not supported by the file"}}
		if d := cmp.Diff(want, e.Candidates); d != "" || e.Chosen != None {
			t.Fatalf("round %d: chosen %d, candidates (-want +got):\n%s", round, e.Chosen, d)
		}
		if txt := e.String(); !strings.Contains(txt, "no       no") || !strings.Contains(txt, "the file's min_bytes 617472") {
			t.Fatalf("round %d: text:\n%s", round, txt)
		}
	}
	big := req(ir.AllReduce, 1<<20)
	big.InPlace = true
	e, err := h.s.Explain(ctx, big)
	if err != nil || e.Chosen != 0 || !e.Candidates[0].Matched {
		t.Fatalf("in-place 4 MiB: %+v, %v", e, err)
	}
}

// TestContradiction: what excludes an entry at load, and the manifest field
// theseusc lint points at.
func TestContradiction(t *testing.T) {
	yes := true
	file := &ScheduleInfo{Collective: ir.AllGather, NRanks: 8, NLocalRanks: 4, MinBytes: 1024, InPlace: true}
	type res struct{ Field, Why string }
	for _, tc := range []struct {
		e    manifest.Schedule
		want res
	}{
		{manifest.Schedule{Collective: ir.AllGather, NRanks: 8}, res{}},
		{manifest.Schedule{Collective: ir.AllReduce, NRanks: 8}, res{"collective", "the file is an allgather schedule, the manifest says allreduce"}},
		{manifest.Schedule{Collective: ir.AllGather, NRanks: 4}, res{"nranks", "the file is for 8 ranks, the manifest says 4"}},
		{manifest.Schedule{Collective: ir.AllGather, NRanks: 8, NLocalRanks: 8}, res{"nlocalranks", "the file needs 4 ranks per node, the manifest says 8"}},
		{manifest.Schedule{Collective: ir.AllGather, NRanks: 8, OutOfPlace: &yes}, res{"outofplace", "the manifest claims out-of-place support the file lacks"}},
		{manifest.Schedule{Collective: ir.AllGather, NRanks: 8, MaxBytes: 512}, res{"max_bytes", "the manifest's window [0, 512] and the file's [1024, 0] do not overlap"}},
	} {
		f, why := Contradiction(&tc.e, file)
		if d := cmp.Diff(tc.want, res{f, why}); d != "" {
			t.Errorf("%+v: (-want +got)\n%s", tc.e, d)
		}
	}
}
