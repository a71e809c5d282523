package selector

import (
	"context"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// Each bad input gets a clear, positioned, coded message, and selection
// goes on with the rest of the context.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
		want  int      // selection for an 8-rank 4 KiB allreduce
		warn  []string // fragments of one warning
	}{
		{"malformed schedule line", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"1"`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:70", "TS0001", "malformed JSON"}},
		{"malformed attribute line", func(h *harness) {
			h.attr(`{"name":"x","type":"int",}`)
			h.attr(`{"name":"y","type":"int","origin":"exo","default":3}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"y == 3"}`)
		}, 0, []string{"attribute_manifest.jsonl:4:", "TS0001"}},
		{"malformed value line", func(h *harness) {
			h.attr(`{"name":"y","type":"int","origin":"exo","default":3}`)
			h.value("y", `{"value":7}`)
			h.value("y", `{"value":`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"y == 7"}`)
		}, 0, []string{"y.jsonl:2:10", "TS0001"}},
		{"unknown field", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"prefernce":"1"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:54", "TS0002", `"prefernce"`}},
		{"unknown attribute", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"nosuch > 0","preference":"9"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:64", "TS0301", `unknown attribute "nosuch"`}},
		{"usability not bool", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"msgsize","preference":"9"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:64", "TS0302", "must be bool"}},
		{"type error", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"preference":"msgsize && true"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:68", "TS0302", "&& needs bools"}},
		{"wrong value type", func(h *harness) {
			h.attr(`{"name":"y","type":"int","origin":"exo","default":3}`)
			h.value("y", `{"value":2.5}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"y == 3"}`)
		}, 0, []string{"y.jsonl:1:10", "TS0003", "integer"}},
		{"wrong default type", func(h *harness) {
			h.attr(`{"name":"y","type":"bool","origin":"exo","default":1}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"y","preference":"5"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"attribute_manifest.jsonl:4:52", "TS0003", "true or false"}},
		{"syntax error", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"msgsize >> 3","preference":"9"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:73", "TS0300"}},
		{"oversize vector value", func(h *harness) {
			h.attr(`{"name":"v","type":"vector","origin":"exo","default":[1]}`)
			h.value("v", `{"value":[1,2,3,4,5]}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"len(v) == 1"}`)
		}, 0, []string{"v.jsonl:1:10", "TS0304", "THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=4"}},
		{"oversize vector default", func(h *harness) {
			h.attr(`{"name":"v","type":"vector","origin":"exo","default":[1,2,3,4,5]}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"len(v) > 0","preference":"9"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"attribute_manifest.jsonl:4:54", "TS0304"}},
		{"oversize vector literal", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"contains([1,2,3,4,5], 1)","preference":"9"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"schedule_manifest.jsonl:1:", "TS0304"}},
		{"bad endo path", func(h *harness) {
			h.attr(`{"name":"stream","type":"int","origin":"endo","path":"request.stream"}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"stream == 0","preference":"9"}`)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, []string{"attribute_manifest.jsonl:4:54", "TS0305", `"request.stream"`}},
		{"duplicate attribute", func(h *harness) {
			h.attr(`{"name":"y","type":"int","origin":"exo","default":1}`)
			h.attr(`{"name":"y","type":"float","origin":"exo","default":2}`)
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8,"usable":"y == 1"}`)
		}, 0, []string{"attribute_manifest.jsonl:5", "TS0010", "already declared by line 4"}},
		{"schedule fails verification", func(h *harness) {
			f := allreduce8()
			f.Bad = "a.json:3:7: error[TS0204]: the cross-rank happens-before graph has a cycle"
			h.file("bad.json", f)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
			h.sched(`{"file":"bad.json","collective":"allreduce","nranks":8,"preference":"9"}`)
		}, 0, []string{"schedule 1 (bad.json) excluded", "TS0204"}},
		{"file contradicts manifest", func(h *harness) {
			h.file("ag.json", fakeFile{Collective: "allgather", NRanks: 8, OutOfPlace: true})
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
			h.sched(`{"file":"ag.json","collective":"allreduce","nranks":8,"preference":"9"}`)
		}, 0, []string{"schedule 1 (ag.json) excluded", "allgather schedule, the manifest says allreduce"}},
		{"missing schedule file", func(h *harness) {
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
			h.sched(`{"file":"gone.json","collective":"allreduce","nranks":8,"preference":"9"}`)
		}, 0, []string{"schedule 1", "schedule file missing", "gone.json"}},
		{"torn last line", func(h *harness) {
			h.sched(`{"file":"a.json","collective":"allreduce","nranks":8}`)
			h.appendRaw("schedule_manifest.jsonl", `{"file":"b.json","collective":"allreduce","nranks":8,"prefe`)
		}, 0, nil},
		{"blank lines keep positions", func(h *harness) {
			h.sched(``)
			h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
		}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.s.opt.VectorMaxLen = 4
			h.s.rd.mopt.MaxVectorLen = 4
			h.standardAttrs()
			h.file("a.json", allreduce8())
			h.file("b.json", allreduce8())
			tc.setup(h)
			if id := h.sel(req(ir.AllReduce, 1024)); id != tc.want {
				t.Fatalf("Select = %d, want %d; warnings:\n%s", id, tc.want, h.log.dump())
			}
			if tc.warn != nil && !h.log.warned(tc.warn...) {
				t.Fatalf("no warning with %q; warnings:\n%s", tc.warn, h.log.dump())
			}
		})
	}
}

func TestTornLineCompletes(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8}`)
	h.appendRaw("schedule_manifest.jsonl", `{"file":"b.json","collective":"allreduce",`)
	r := req(ir.AllReduce, 1024)
	if id := h.sel(r); id != 0 {
		t.Fatalf("torn: %d", id)
	}
	h.appendRaw("schedule_manifest.jsonl", `"nranks":8,"preference":"1"}`)
	if id := h.sel(r); id != 0 {
		t.Fatalf("still torn (no newline): %d", id)
	}
	h.appendRaw("schedule_manifest.jsonl", "\n")
	if id := h.sel(r); id != 1 {
		t.Fatalf("completed: %d, want 1", id)
	}
	if w := h.log.dump(); w != "" {
		t.Fatalf("a torn line must not be reported: %s", w)
	}
}

func TestMissingFileRetried(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("b.json", allreduce8())
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8}`)
	h.sched(`{"file":"late.json","collective":"allreduce","nranks":8,"preference":"9"}`)
	r := req(ir.AllReduce, 1024)
	for i := 0; i < 5; i++ { // retried at every epoch, logged once
		if id := h.sel(r); id != 0 {
			t.Fatalf("missing: %d", id)
		}
	}
	if n := strings.Count(h.log.dump(), "schedule file missing"); n != 1 {
		t.Fatalf("the missing file was logged %d times, want once:\n%s", n, h.log.dump())
	}
	h.file("late.json", allreduce8())
	if id := h.sel(r); id != 1 {
		t.Fatalf("after the file appears: %d, want 1", id)
	}
}

func TestRankLocalPolicy(t *testing.T) {
	h := newHarness(t)
	h.s.opt.CheckPeriod = 1 << 20
	h.standardAttrs()
	h.attr(`{"name":"sendbuf","type":"int","origin":"endo","path":"request.sendbuf"}`)
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8}`)
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"usable":"sendbuf % 64 == 0","preference":"1"}`)
	r := req(ir.AllReduce, 1024)
	r.SendBuf = 0x1000
	ctx := context.Background()
	before := h.s.Stats().Agreements
	for i := 0; i < 3; i++ {
		if id, _ := h.s.Select(ctx, r); id != 1 {
			t.Fatalf("aligned: %d, want 1", id)
		}
	}
	r.SendBuf = 0x1008
	if id, _ := h.s.Select(ctx, r); id != 0 {
		t.Fatalf("unaligned: %d, want 0", id)
	}
	// One agreement for the first snapshot and one per request (rank-local
	// results are never answered from the cache); the first selection of
	// each of b.json and a.json adds a load step and a second rank-local
	// step (loading may narrow the winner's constraints).
	if got := h.s.Stats().Agreements - before; got != 1+4+2*2 {
		t.Fatalf("%d agreement steps, want 9", got)
	}
	if !h.log.warned("TS0212", "request.sendbuf") {
		t.Fatalf("no rank-local warning:\n%s", h.log.dump())
	}
	// Requests of another collective are not affected.
	if _, err := h.s.Select(ctx, req(ir.AllGather, 1)); err != nil || strings.Contains(h.log.dump(), "allgather") {
		t.Fatal(err)
	}
}
