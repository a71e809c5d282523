package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

// corpusContext builds a selection context holding one corpus file (skipping
// the test when the corpus is absent) and returns its directory.
func corpusContext(t *testing.T, rel, attrs, sched string) string {
	t.Helper()
	src := filepath.Join(*corpusDirFlag, rel)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("no corpus file: %v", err)
	}
	dir := t.TempDir()
	for name, s := range map[string]string{
		filepath.Base(rel):         string(data),
		"attribute_manifest.jsonl": attrs,
		"schedule_manifest.jsonl":  sched,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type explainJSON struct {
	Chosen     int `json:"chosen"`
	Candidates []struct {
		Selectable bool   `json:"selectable"`
		Matched    bool   `json:"matched"`
		Usable     bool   `json:"usable"`
		Reason     string `json:"reason"`
	} `json:"candidates"`
}

// TestSelectMSCCLPPPlan: an MSCCL++ execution plan (a .json without
// "version") is loaded through the verifier in a selection context
// (docs/selection-context.md §1), not excluded for lacking a version field.
// The v0.7 allreduce plan is in-place only, which the explanation of an
// out-of-place request names.
func TestSelectMSCCLPPPlan(t *testing.T) {
	dir := corpusContext(t, "mscclpp-json/v0.7/mscclpp-v0.7.0_allreduce.json",
		`{"name":"slow_rank","type":"int","origin":"exo","default":-1}`+"\n",
		`{"file":"mscclpp-v0.7.0_allreduce.json","collective":"allreduce","nranks":2,"preference":"10"}`+"\n")
	args := []string{"select", "--context", dir, "--coll", "allreduce", "--count", "1024", "--nranks", "2"}
	r := theseusc(t, append(args, "--inplace")...).want(t, cli.ExitOK)
	if !strings.Contains(r.out, "chosen: 0 ") || strings.Contains(r.err, "version") || strings.Contains(r.err, "warning") {
		t.Fatalf("in place:\nstdout %s\nstderr %s", r.out, r.err)
	}
	j := theseusc(t, append(args, "--json")...).want(t, cli.ExitFindings)
	var e explainJSON
	if err := json.Unmarshal([]byte(j.out), &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Candidates) != 1 || !e.Candidates[0].Selectable || e.Candidates[0].Matched ||
		e.Candidates[0].Reason != "out-of-place requests not supported by the file" {
		t.Fatalf("out of place: %+v\nstderr %s", e, j.err)
	}
}

// TestSelectExplainsFileWindow: an MSCCL XML algorithm whose own minBytes
// (617472) and outofplace="0" rule out the request is shown as not matched,
// with that reason, in text and JSON — not as matched, usable and unchosen.
func TestSelectExplainsFileWindow(t *testing.T) {
	const file = "msccl-scheduler_ncv4_ar_hier_12_Simple.xml"
	dir := corpusContext(t, "msccl-xml/"+file, "",
		`{"file":"`+file+`","collective":"allreduce","nranks":4,"preference":"100"}`+"\n")
	args := []string{"select", "--context", dir, "--coll", "allreduce", "--count", "1024", "--nranks", "4"}
	const why = "message size 4096 B below the file's min_bytes 617472; out-of-place requests not supported by the file"
	r := theseusc(t, args...).want(t, cli.ExitFindings)
	if !strings.Contains(r.out, "chosen: none") || !strings.Contains(r.out, "no       no      -           "+why) {
		t.Fatalf("text:\n%s", r.out)
	}
	j := theseusc(t, append(args, "--json")...).want(t, cli.ExitFindings)
	var e explainJSON
	if err := json.Unmarshal([]byte(j.out), &e); err != nil {
		t.Fatal(err)
	}
	want := explainJSON{Chosen: -1}
	want.Candidates = append(want.Candidates, struct {
		Selectable bool   `json:"selectable"`
		Matched    bool   `json:"matched"`
		Usable     bool   `json:"usable"`
		Reason     string `json:"reason"`
	}{Selectable: true, Reason: why})
	if d := cmp.Diff(want, e); d != "" {
		t.Fatalf("json (-want +got):\n%s", d)
	}
	theseusc(t, append(args[:5:5], "--count", "1000000", "--nranks", "4", "--inplace")...).want(t, cli.ExitOK)
}

// TestSelectAtRange: --at outside the years manifests accept (1678–2261)
// is a usage error, never wrapped around to 1970 or 1976.
func TestSelectAtRange(t *testing.T) {
	base := []string{"select", "--context", "testdata/context", "--coll", "allreduce", "--count", "1024", "--at"}
	for _, at := range []string{"9999999999", "-99999999999999", "1e300", "99999999999999", "2262-01-01"} {
		r := theseusc(t, append(base, at)...).want(t, cli.ExitUsage)
		if !strings.Contains(r.err, "theseusc select: --at: ") || !strings.Contains(r.err, "outside 1678-2261") {
			t.Errorf("--at %s: stderr %q", at, r.err)
		}
	}
	r := theseusc(t, append(base, "1735689600.5")...).want(t, cli.ExitOK)
	if !strings.Contains(r.out, "cut 2025-01-01T00:00:00Z") {
		t.Errorf("--at 1735689600.5:\n%s", r.out)
	}
}
