package selector

import (
	"encoding/json"
	"strings"
	"testing"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// withPrograms returns line with usable_program and preference_program set
// to the given programs.
func withPrograms(t *testing.T, line string, u, p *bc.Program) string {
	t.Helper()
	out, err := manifest.SetFields([]byte(line), []string{manifest.UsableProgramField, manifest.PreferenceProgramField},
		[]json.RawMessage{manifest.EncodeProgram(u), manifest.EncodeProgram(p)})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func compileT(t *testing.T, src string, want policy.Want, attrs policy.AttrMap) *bc.Program {
	t.Helper()
	p, ds := policy.Compile(src, attrs, policy.Options{Want: want})
	if p == nil {
		t.Fatalf("%s: %v", src, ds)
	}
	return p
}

var msgsizeAttr = policy.AttrMap{"msgsize": {Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqMessageSize}}

// TestPrecompiledProgramIsRun: the runtime runs an entry's precompiled
// programs when they are exactly what the entry's text compiles to
// (manifest.Verified): the entry is marked precompiled and selects as its
// text says.
func TestPrecompiledProgramIsRun(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	u := compileT(t, "msgsize >= 0", policy.WantBool, msgsizeAttr)
	p := compileT(t, "7", policy.WantNumber, nil)
	h.sched(withPrograms(t, `{"file":"a.json","collective":"allreduce","nranks":8,"usable":"msgsize >= 0","preference":"7"}`, u, p))
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"preference":"5"}`)
	if id := h.sel(req(ir.AllReduce, 1024)); id != 0 {
		t.Fatalf("Select = %d, want 0 (usable and preferred 7)", id)
	}
	if s := h.s.rd.scheds[0]; !s.precompiled {
		t.Fatal("entry 0 was compiled from its text")
	}
	if s := h.s.rd.scheds[1]; s.precompiled {
		t.Fatal("entry 1 has no programs but is marked precompiled")
	}
}

// TestPrecompiledForgedNotRun (finding 10): programs whose code is not
// what their text compiles to are not run, even though they carry the
// entry's text as their source and pass bytecode.Verify: here compiled
// from "msgsize >= 0" and "7" with the text "msgsize < 0" and "1". The
// text is compiled instead, so the entry is unusable, as its text says.
func TestPrecompiledForgedNotRun(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	u := compileT(t, "msgsize >= 0", policy.WantBool, msgsizeAttr)
	u.Source, u.Spans = "msgsize < 0", nil
	p := compileT(t, "7", policy.WantNumber, nil)
	p.Source, p.Spans = "1", nil
	h.sched(withPrograms(t, `{"file":"a.json","collective":"allreduce","nranks":8,"usable":"msgsize < 0","preference":"1"}`, u, p))
	h.sched(`{"file":"b.json","collective":"allreduce","nranks":8,"preference":"5"}`)
	if id := h.sel(req(ir.AllReduce, 1024)); id != 1 {
		t.Fatalf("Select = %d, want 1 (entry 0 is unusable by its text)", id)
	}
	if s := h.s.rd.scheds[0]; s.precompiled {
		t.Fatal("entry 0's forged programs were run")
	}
}

// TestPrecompiledStaleFallsBack: a program compiled from other text, or
// against an attribute declared differently, or of another format version,
// is not run: the text is compiled (and the fallback logged at INFO), so
// selection is what the text says.
func TestPrecompiledStaleFallsBack(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.attr(`{"name":"slow_rank","type":"float","origin":"exo","default":-1}`)
	h.file("a.json", allreduce8())
	h.file("b.json", allreduce8())
	h.file("c.json", allreduce8())
	always := compileT(t, "true", policy.WantBool, nil)
	ten := compileT(t, "10", policy.WantNumber, nil)
	// Stale text: the program says true, the (edited) text says false.
	h.sched(withPrograms(t, `{"file":"a.json","collective":"allreduce","nranks":8,"usable":"false","preference":"10"}`, always, ten))
	// Compiled for slow_rank int; the manifest declares it float.
	asInt := policy.AttrMap{"slow_rank": {Name: "slow_rank", Type: bc.Int, Origin: bc.Exo}}
	pi := compileT(t, "slow_rank < 0 ? 20 : 0", policy.WantNumber, asInt)
	h.sched(withPrograms(t, `{"file":"b.json","collective":"allreduce","nranks":8,"preference":"slow_rank < 0 ? 20 : 0"}`, always, pi))
	// Another format version: the bytes are not a program this build reads.
	line := withPrograms(t, `{"file":"c.json","collective":"allreduce","nranks":8,"preference":"1"}`, always, compileT(t, "1", policy.WantNumber, nil))
	bin := bc.Marshal(compileT(t, "1", policy.WantNumber, nil))
	bin[4]++
	h.sched(strings.Replace(line, string(manifest.EncodeProgram(compileT(t, "1", policy.WantNumber, nil))), string(mustJSON(bin)), 1))
	if id := h.sel(req(ir.AllReduce, 1024)); id != 1 {
		t.Fatalf("Select = %d, want 1 (entry 0 unusable by its text; 1 prefers 20 from its text)", id)
	}
	for i, s := range h.s.rd.scheds {
		if s.precompiled {
			t.Errorf("entry %d ran a stale program", i)
		}
	}
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	infos := strings.Join(h.log.infos, "\n")
	for _, want := range []string{"schedule 0: usable_program not used (the program was compiled from \"true\"",
		`schedule 1: preference_program not used (attribute "slow_rank" is declared exo float`, "schedule 2: preference_program not used (bytecode: bad encoding: version"} {
		if !strings.Contains(infos, want) {
			t.Errorf("no INFO line containing %q in\n%s", want, infos)
		}
	}
}

func mustJSON(bin []byte) []byte {
	b, _ := json.Marshal(bin) // []byte marshals as standard base64
	return b
}

// TestPrecompiledWaitsForItsAttribute: a program reading an attribute not
// declared yet makes the entry wait, exactly as its text would, and runs
// once the attribute is declared.
func TestPrecompiledWaitsForItsAttribute(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.file("a.json", allreduce8())
	attrs := policy.AttrMap{"slow_rank": {Name: "slow_rank", Type: bc.Int, Origin: bc.Exo}}
	u := compileT(t, "slow_rank < 0", policy.WantBool, attrs)
	h.sched(withPrograms(t, `{"file":"a.json","collective":"allreduce","nranks":8,"usable":"slow_rank < 0"}`, u, compileT(t, "0", policy.WantNumber, nil)))
	r := req(ir.AllReduce, 1024)
	if id := h.sel(r); id != None {
		t.Fatalf("Select = %d before slow_rank is declared, want None", id)
	}
	h.attr(`{"name":"slow_rank","type":"int","origin":"exo","default":-1}`)
	if id := h.sel(r); id != 0 {
		t.Fatalf("Select = %d once slow_rank is declared, want 0", id)
	}
	if !h.s.rd.scheds[0].precompiled {
		t.Fatal("the entry was compiled from its text once its attribute appeared")
	}
}
