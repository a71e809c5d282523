package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/diag"
)

func TestLintContext(t *testing.T) {
	r := theseusc(t, "lint", "testdata/context").want(t, cli.ExitOK)
	golden(t, "lint_context.txt", r.out)

	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("attribute_manifest.jsonl", `{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}
{"name":"sendbuf","type":"int","origin":"endo","path":"request.sendbuf"}
{"name":"slow_rank","type":"int","origin":"exo","default":-1}
{"name":"slow_rank","type":"float","origin":"exo"}

{"name":"torn","type":"int","origin":"exo"`)
	// The third value is over the runtime's 1 MiB line bound: the runtime
	// skips it, and lint says so.
	write("slow_rank.jsonl", "{\"value\":3}\n{\"value\":\"three\"}\n{\"value\":1,\"pad\":\""+strings.Repeat("x", 1<<20)+"\"}\n")
	write("copy1.json", string(mustRead(t, "testdata/copy1.json")))
	write("race.json", string(mustRead(t, filepath.Join(badDir, "race.json"))))
	write("schedule_manifest.jsonl", `{"file":"copy1.json","collective":"allreduce","nranks":1,"preference":"sendbuf % 2"}
{"file":"copy1.json","collective":"allreduce","nranks":1,"usable":"msgsize >"}
{"file":"race.json","collective":"allreduce","nranks":1,"preference":"nosuch + 1"}
{"file":"copy1.json","collective":"allreduce","nranks":1,"replaces":7}
{"file":"copy1","collective":"allreduce","nranks":1}
`)
	write("copy1", string(mustRead(t, "testdata/copy1.json"))) // no extension: the runtime does not load it
	j := theseusc(t, "lint", "--json", dir).want(t, cli.ExitFindings)
	var rep cli.Report
	if err := json.Unmarshal([]byte(j.out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Files) != 1 || rep.Files[0].Format != cli.KindContext {
		t.Errorf("files %+v", rep.Files)
	}
	var got []string
	for _, d := range rep.Diagnostics {
		got = append(got, string(d.Code)+" "+d.Severity.String()+" "+filepath.Base(d.File)+":"+strings.TrimPrefix(d.Where(), d.File+":"))
	}
	want := []string{
		"TS0010 error attribute_manifest.jsonl:4:1",   // slow_rank declared twice
		"TS0205 error race.json:28:13",                // the schedule file races
		"TS0212 warning schedule_manifest.jsonl:1:72", // rank-local policy: an agreement step
		"TS0300 error schedule_manifest.jsonl:2:77",   // syntax error in usable
		"TS0301 error schedule_manifest.jsonl:3:71",   // unknown attribute
		"TS0003 error schedule_manifest.jsonl:4:69",   // replaces a later entry
		"TS0003 error slow_rank.jsonl:2:10",           // a string value for an int
		"TS0011 error slow_rank.jsonl:3:1",            // a line over 1 MiB
		"TS0003 error schedule_manifest.jsonl:5:1",    // a schedule file without an extension
	}
	if len(got) != len(want) {
		t.Fatalf("got %d diagnostics:\n%s", len(got), strings.Join(got, "\n"))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if g == w {
				found = true
			}
		}
		if !found {
			t.Errorf("no diagnostic %q in:\n%s", w, strings.Join(got, "\n"))
		}
	}
	for _, d := range rep.Diagnostics {
		if _, ok := diag.Lookup(d.Code); !ok || d.Hint == "" && d.Code != diag.ImportNote {
			t.Errorf("diagnostic without documented code or hint: %s", d)
		}
	}
}

// TestLintContextContradictions: a manifest entry whose collective, nranks,
// nlocalranks, claimed arrangement or window contradicts its schedule file
// is an error at that field (the runtime excludes such an entry for good),
// where it used to lint clean.
func TestLintContextContradictions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copy1 := string(mustRead(t, "testdata/copy1.json"))
	write("copy1.json", copy1)
	// An in-place-only copy for messages of at least 1 KiB.
	write("oop.json", strings.Replace(copy1, `"outofplace":true,`, `"outofplace":false,"min_bytes":1024,`, 1))
	write("schedule_manifest.jsonl", `{"file":"copy1.json","collective":"allreduce","nranks":2}
{"file":"copy1.json","collective":"allgather","nranks":1}
{"file":"copy1.json","collective":"allreduce","nranks":1}
{"file":"oop.json","collective":"allreduce","nranks":1,"outofplace":true}
{"file":"oop.json","collective":"allreduce","nranks":1,"max_bytes":512}
{"file":"oop.json","collective":"allreduce","nranks":1,"inplace":true,"max_bytes":4096}
`)
	r := theseusc(t, "lint", dir).want(t, cli.ExitFindings)
	sf := filepath.Join(dir, "schedule_manifest.jsonl")
	want := []string{
		sf + ":1:56: error[TS0003]: schedule 0: the file is for 1 ranks, the manifest says 2; the runtime excludes this entry (hint: make the entry's nranks agree with copy1.json)",
		sf + ":2:35: error[TS0003]: schedule 1: the file is an allreduce schedule, the manifest says allgather; the runtime excludes this entry (hint: make the entry's collective agree with copy1.json)",
		sf + ":4:69: error[TS0003]: schedule 3: the manifest claims out-of-place support the file lacks; the runtime excludes this entry (hint: make the entry's outofplace agree with oop.json)",
		sf + ":5:68: error[TS0113]: schedule 4: the manifest's window [0, 512] and the file's [1024, 0] do not overlap; the runtime excludes this entry (hint: make the entry's max_bytes agree with oop.json)",
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if strings.Contains(l, "error[") {
			got = append(got, l)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s\nstdout:\n%s", d, r.out)
	}
}

// TestLintContextGenerated: lint DIR builds and verifies generated entries
// (the default context lints clean), and reports a channel expression that
// reads more than the shape, a generator that cannot serve the nranks an
// entry pins, and an entry that serves none of the shapes lint builds.
func TestLintContextGenerated(t *testing.T) {
	theseusc(t, "lint", "../../examples/contexts/default").want(t, cli.ExitOK)
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("attribute_manifest.jsonl", `{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}
{"name":"nranks","type":"int","origin":"endo","path":"request.nranks"}
`)
	write("schedule_manifest.jsonl", `{"gen":"ring","collective":"allreduce","channels":"clamp(64 / nranks, 1, 32)","preference":"1"}
{"gen":"ring","collective":"allreduce","channels":"msgsize / 1024"}
{"gen":"ring","collective":"allreduce","nranks":4,"avoid":[1]}
{"gen":"dbtree","collective":"allreduce","avoid":[20]}
{"gen":"ring","collective":"allreduce","channels":"nranks / 0"}
{"gen":"ring","collective":"allreduce","channels":"64 / (nranks - 1)"}
{"gen":"ring","collective":"allreduce","channels":"nranks > 2"}
`)
	j := theseusc(t, "lint", "--json", dir).want(t, cli.ExitFindings)
	var rep cli.Report
	if err := json.Unmarshal([]byte(j.out), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rep.Diagnostics {
		got = append(got, string(d.Code)+" "+d.Severity.String()+" "+strings.TrimPrefix(d.Where(), d.File+":"))
	}
	want := []string{
		"TS0003 error 2:52",   // channels reads msgsize
		"TS0003 error 3:9",    // a ring keeps every rank relaying: avoid fails at 4 ranks
		"TS0003 warning 4:9",  // rank 20: none of the shapes lint builds
		"TS0003 error 5:52",   // channels divide by zero at every shape: the entry serves nothing
		"TS0003 warning 6:52", // ... at 1 rank only: excluded there
		"TS0302 error 7:52",   // a bool is no channel count
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s\n%s", d, j.out)
	}
	for _, w := range []string{"it serves nothing", "a channels expression must be int or float"} {
		if !strings.Contains(j.out, w) {
			t.Errorf("no %q in the report:\n%s", w, j.out)
		}
	}
}
