package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/contextd"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// runCLI runs theseus-context in-process.
func runCLI(t *testing.T, args ...string) (cli.ExitCode, string, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errs})
	return code, out.String(), errs.String()
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runCLI(t, args...)
	if code != cli.ExitOK {
		t.Fatalf("theseus-context %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

const ring2 = "../../examples/allreduce_pairs_2rank_simple.json"

// TestSingleNodeRuntimePicksUp: the single-node default, end to end with
// no flags anywhere: a daemon with the defaults of theseus-contextd
// without flags (data in ~/.theseus/contextd, contexts in
// ~/.theseus/contexts), theseus-context new attr and new sched without
// flags, and a communicator with no context configured
// ($HOME/.theseus/contexts/default) runs the new schedule.
func TestSingleNodeRuntimePicksUp(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("THESEUS_SELECTION_CONTEXT", "")
	t.Setenv("MSCCLPP_SELECTION_CONTEXT", "")
	d, err := contextd.Start(contextd.Config{Margin: -1}) // theseus-contextd's flag defaults
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Ready(rctx); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(home, ".theseus", "contextd", "api.sock"); d.Socket() != want {
		t.Fatalf("socket %s, want %s", d.Socket(), want)
	}
	mustRun(t, "new", "attr", "msgsize", "--origin", "endo", "--path", "request.messagesize")
	out := mustRun(t, "--json", "new", "sched", ring2, "--coll", "allreduce", "--usability", "msgsize <= 1048576", "--preference", "msgsize")
	var p api.Published
	if err := json.Unmarshal([]byte(out), &p); err != nil || !p.Applied || p.ID != 0 {
		t.Fatalf("new sched: %s (%v)", out, err)
	}
	if dir := theseus.DefaultContextDir(); dir != filepath.Join(home, ".theseus", "contexts", "default") {
		t.Fatalf("the runtime's default context is %s", dir)
	}
	comms, err := theseus.NewLocalComms(context.Background(), 2, theseus.Config{Backend: "host"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Destroy()
		}
	}()
	var wg sync.WaitGroup
	ids := make([]int, 2)
	errs := make([]error, 2)
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf, err := c.MemAlloc(4096)
			if err == nil {
				err = c.AllReduce(buf, buf, 1024, theseus.Float32, theseus.Sum, nil)
			}
			errs[i], ids[i] = err, c.LastCall().Schedule
		}()
	}
	wg.Wait()
	for i := range comms {
		if errs[i] != nil || ids[i] != p.ID {
			t.Fatalf("rank %d ran schedule %d (%v), want the published %d", i, ids[i], errs[i], p.ID)
		}
	}
	sock := "--socket=" + d.Socket()
	// list and show read the daemon's copy.
	if out := mustRun(t, sock, "list"); !strings.Contains(out, "allreduce_pairs_2rank_simple") || !strings.Contains(out, "true") {
		t.Fatalf("list:\n%s", out)
	}
	if out := mustRun(t, sock, "show", "msgsize"); !strings.Contains(out, "endo int from request.messagesize") {
		t.Fatalf("show:\n%s", out)
	}
	if out := mustRun(t, sock, "status"); !strings.Contains(out, d.Name()) || !strings.Contains(out, "default") {
		t.Fatalf("status:\n%s", out)
	}
}

// TestLocalMode: the same commands without a daemon, init from the
// default context, and the rejections' exit code and reasons.
func TestLocalMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctx")
	loc := "--local=" + dir
	out := mustRun(t, loc, "init", "--from", "default")
	if !strings.Contains(out, "attributes") {
		t.Fatalf("init: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "slow_rank.jsonl")); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, loc, "init")
	if code != cli.ExitFindings || !strings.Contains(errs, "not_empty") {
		t.Fatalf("init of a seeded context: exit %d, %s", code, errs)
	}
	mustRun(t, loc, "set", "slow_rank", "2", "--valid-after", "+0s")
	out = mustRun(t, loc, "--json", "show", "slow_rank")
	var a api.Attribute
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Value != "2" || a.Values != 1 {
		t.Fatalf("show slow_rank: %s", out)
	}
	for _, tc := range []struct {
		args   []string
		reason string
	}{
		{[]string{"set", "slow_rank", "two"}, "wrong_type"},
		{[]string{"set", "nosuch", "1"}, "unknown_attribute"},
		{[]string{"new", "sched", ring2, "--coll", "allreduce", "--preference", "nosuch + 1"}, "bad_expression"},
		{[]string{"new", "sched", ring2, "--coll", "allgather"}, "invalid_schedule"},
		{[]string{"new", "attr", "slow_rank", "--origin", "exo", "--type", "int"}, "duplicate"},
	} {
		code, _, errs := runCLI(t, append([]string{loc}, tc.args...)...)
		if code != cli.ExitFindings || !strings.Contains(errs, "rejected ("+tc.reason+")") {
			t.Errorf("%v: exit %d, %s; want a rejection for %s", tc.args, code, errs, tc.reason)
		}
	}
	// A generated entry: published where the manifest reader knows "gen"
	// (issue 20), refused with that reason where it does not.
	_, ds := manifest.ParseSchedule("s", 1, []byte(`{"gen":"ring","collective":"allreduce"}`), manifest.Options{})
	code, out, errs = runCLI(t, loc, "--json", "new", "sched", "--gen", "ring", "--coll", "allreduce", "--channels", "2", "--preference", "msgsize < 0 ? 0 : 1")
	switch {
	case len(ds) == 0 && (code != cli.ExitOK || !strings.Contains(out, `\"gen\":\"ring\"`) || !strings.Contains(out, `\"channels\":2`)):
		t.Errorf("new sched --gen: exit %d\n%s%s", code, out, errs)
	case len(ds) > 0 && (code != cli.ExitFindings || !strings.Contains(errs, "does not know generated entries")):
		t.Errorf("new sched --gen on a build without generated entries: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := runCLI(t, loc, "status"); code != cli.ExitUsage {
		t.Errorf("status with --local: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "list"); code != cli.ExitUsage || !strings.Contains(errs, "no theseus-contextd is running") {
		t.Errorf("no daemon: exit %d, %s", code, errs)
	}
}

// TestSetNegativeValue (finding 05): set takes a VALUE that starts with
// '-' (slow_rank's "no slow rank" -1, -0.5) as written, with flags before
// NAME or after VALUE, and "--" still works.
func TestSetNegativeValue(t *testing.T) {
	dir := t.TempDir() // an empty directory starts a context
	loc := "--local=" + dir
	mustRun(t, loc, "new", "attr", "slow_rank", "--origin", "exo", "--type", "int", "--default", "-1")
	mustRun(t, loc, "new", "attr", "temp", "--origin", "exo", "--type", "float")
	for _, args := range [][]string{
		{"set", "slow_rank", "-1"},
		{"set", "slow_rank", "-3", "--valid-after", "always"},
		{"set", "--valid-after", "always", "slow_rank", "-4"},
		{"set", "slow_rank", "--", "-5"},
		{"set", "temp", "-0.5"},
	} {
		mustRun(t, append([]string{loc}, args...)...)
	}
	out := mustRun(t, loc, "--json", "show", "slow_rank")
	var a api.Attribute
	if err := json.Unmarshal([]byte(out), &a); err != nil || a.Value != "-5" || a.Values != 4 {
		t.Fatalf("show slow_rank: %s", out)
	}
	if code, _, errs := runCLI(t, loc, "set", "slow_rank", "-1", "extra"); code != cli.ExitUsage || !strings.Contains(errs, `"extra" after VALUE`) {
		t.Errorf("set with a third argument: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, loc, "new", "sched", ring2, "--coll", "allreduce", "--replaces", "-5"); code != cli.ExitUsage || !strings.Contains(errs, "--replaces -5") {
		t.Errorf("--replaces -5: exit %d, %s", code, errs)
	}
}

// TestInitFromAtomic (finding 08): init --from DIR validates every entry
// before it publishes any, so a seed with a bad entry half-way leaves the
// target empty (and a second init is not refused as not_empty), and a
// symbolic link in DIR to a file outside it is refused, its content never
// read.
func TestInitFromAtomic(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	os.MkdirAll(src, 0o755)
	attrs, err := os.ReadFile("../../examples/contexts/default/attribute_manifest.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	ring, err := os.ReadFile(ring2)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "attribute_manifest.jsonl"), attrs, 0o644)
	os.WriteFile(filepath.Join(src, "ring.json"), ring, 0o644)
	os.WriteFile(filepath.Join(src, "bad.json"), []byte(`{"broken`+"\n"), 0o644)
	os.WriteFile(filepath.Join(src, "schedule_manifest.jsonl"),
		[]byte(`{"file":"ring.json","collective":"allreduce","nranks":2}`+"\n"+`{"file":"bad.json","collective":"allreduce","nranks":2}`+"\n"), 0o644)
	dst := filepath.Join(tmp, "dst")
	for try := range 2 {
		code, _, errs := runCLI(t, "--local="+dst, "init", "--from", src)
		if code != cli.ExitFindings || !strings.Contains(errs, "entry") || !strings.Contains(errs, "nothing was published") {
			t.Fatalf("init %d of a seed with a bad entry: exit %d, %s", try, code, errs)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "schedule_manifest.jsonl")); err == nil && len(b) > 0 {
			t.Fatalf("init %d published part of the seed:\n%s", try, b)
		}
		if b, err := os.ReadFile(filepath.Join(dst, "attribute_manifest.jsonl")); err == nil && len(b) > 0 {
			t.Fatalf("init %d published the attributes of a seed it refused:\n%s", try, b)
		}
	}
	// A link to a file outside DIR.
	secret := filepath.Join(tmp, "outside.json")
	os.WriteFile(secret, ring, 0o600)
	os.Remove(filepath.Join(src, "bad.json"))
	if err := os.Symlink(secret, filepath.Join(src, "link.json")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "schedule_manifest.jsonl"), []byte(`{"file":"link.json","collective":"allreduce","nranks":2}`+"\n"), 0o644)
	if code, _, errs := runCLI(t, "--local="+dst, "init", "--from", src); code != cli.ExitUsage || !strings.Contains(errs, "link.json") {
		t.Fatalf("init through a link out of DIR: exit %d, %s", code, errs)
	}
	// A link inside DIR is followed.
	os.Remove(filepath.Join(src, "link.json"))
	os.Symlink("ring.json", filepath.Join(src, "link.json"))
	if out := mustRun(t, "--local="+dst, "init", "--from", src); !strings.Contains(out, "1 schedules") {
		t.Fatalf("init through a link inside DIR: %s", out)
	}
}

// TestDaemonNoAnswer (findings 11 and 06): a daemon that closes the
// connection before answering (it died mid-request) is exit 4 (retry)
// with a message that says the publication may or may not be in the log,
// not Go's transport error; a 503 (no quorum) is exit 4 with the daemon's
// reason.
func TestDaemonNoAnswer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { // read a request's head, then hang up
		defer wg.Done()
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Read(make([]byte, 512))
		c.Close()
	}()
	code, _, errs := runCLI(t, "--socket", sock, "set", "slow_rank", "2")
	wg.Wait()
	if code != cli.ExitRetry || !strings.Contains(errs, "closed the connection before answering") ||
		!strings.Contains(errs, "may or may not be in the log") || strings.Contains(errs, "http://") {
		t.Fatalf("a daemon that hangs up: exit %d, %s", code, errs)
	}
	l.Close()

	os.Remove(sock)
	l2, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(api.Error{Reason: api.ReasonUnavailable, Message: "no quorum: 1 of 3 nodes answer; nothing was published"})
	})}
	go srv.Serve(l2)
	defer srv.Close()
	code, _, errs = runCLI(t, "--socket", sock, "set", "slow_rank", "2")
	if code != cli.ExitRetry || !strings.Contains(errs, "no quorum: 1 of 3 nodes answer; nothing was published") {
		t.Fatalf("a 503: exit %d, %s", code, errs)
	}
}

// TestLowFindings (finding 12, the CLI's): control characters in a name
// are refused (L1); --local refuses a file, and --context beside it, and
// speaks of its directory (L3); an oversize file is reported with its size
// (L6); list and show print a generated entry's generator and "any" ranks,
// and its publication message has no empty file (L9).
func TestLowFindings(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "ctx")
	if err := os.Mkdir(dir, 0o755); err != nil { // an empty directory starts a context
		t.Fatal(err)
	}
	loc := "--local=" + dir
	mustRun(t, loc, "new", "attr", "slow_rank", "--origin", "exo", "--type", "int", "--default", "-1")
	// A directory that does not exist is a usage error, not a new context
	// (a typo in --local).
	for _, args := range [][]string{{"list"}, {"set", "slow_rank", "2"}, {"new", "attr", "x", "--origin", "exo", "--type", "int", "--default", "0"}} {
		if code, _, errs := runCLI(t, append([]string{"--local=" + filepath.Join(tmp, "typo")}, args...)...); code != 2 || !strings.Contains(errs, "no such context directory") {
			t.Errorf("--local of a missing directory, %v: exit %d, %s", args, code, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "typo")); err == nil {
		t.Error("--local created the missing directory")
	}
	for _, name := range []string{"x\x1b[2Jy", "a\nb", "r\u202eevil", "bad\xffutf8"} {
		code, _, errs := runCLI(t, loc, "new", "sched", ring2, "--coll", "allreduce", "--name", name)
		if code != cli.ExitFindings || !strings.Contains(errs, "rejected (bad_name)") {
			t.Errorf("--name %q: exit %d, %s", name, code, errs)
		}
	}
	if code, _, errs := runCLI(t, loc, "set", "slow_rank", "1", "--comment", "a\x1b]0;title\x07"); code != cli.ExitFindings || !strings.Contains(errs, "control character") {
		t.Errorf("--comment with an escape sequence: exit %d, %s", code, errs)
	}
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if code, _, errs := runCLI(t, "--local="+file, "list"); code != cli.ExitUsage || !strings.Contains(errs, "not a directory") {
		t.Errorf("--local FILE: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, loc, "--context", "other", "list"); code != cli.ExitUsage || !strings.Contains(errs, "give no --context") {
		t.Errorf("--local with --context: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, loc, "init"); code != cli.ExitFindings || !strings.Contains(errs, dir+" has 1 attribute") {
		t.Errorf("init of a non-empty --local directory: exit %d, %s", code, errs)
	}
	big := filepath.Join(tmp, "big.json")
	f, _ := os.Create(big)
	f.Truncate(publish.DefaultMaxScheduleBytes + 1000)
	f.Close()
	if code, _, errs := runCLI(t, loc, "new", "sched", big, "--coll", "allreduce"); code != cli.ExitFindings ||
		!strings.Contains(errs, fmt.Sprintf("big.json is %d bytes, over the limit of %d", publish.DefaultMaxScheduleBytes+1000, publish.DefaultMaxScheduleBytes)) {
		t.Errorf("an oversize file: exit %d, %s", code, errs)
	}
	out := mustRun(t, loc, "new", "sched", "--gen", "ring", "--coll", "allreduce", "--name", "genring")
	if strings.HasSuffix(strings.TrimSpace(out), ":") || strings.Contains(out, "): ") {
		t.Errorf("new sched --gen: %q", out)
	}
	if out := mustRun(t, loc, "show", "genring"); !strings.Contains(out, "any ranks, generated by ring") || !strings.Contains(out, "replaces: none") {
		t.Errorf("show of a generated entry:\n%s", out)
	}
	if out := mustRun(t, loc, "list"); !strings.Contains(out, "genring  allreduce   any") {
		t.Errorf("list:\n%s", out)
	}
}

// TestLocalTornLogRejected: a publication into a value log that ends in a
// torn line is refused as a rejection (exit 1, naming the file), not an
// internal failure (fresh user f25).
func TestLocalTornLogRejected(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ctx")
	loc := "--local=" + dir
	mustRun(t, loc, "init", "--from", "default")
	f, err := os.OpenFile(filepath.Join(dir, "slow_rank.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"value":2`)
	f.Close()
	code, _, errs := runCLI(t, loc, "set", "slow_rank", "1")
	if code != cli.ExitFindings || !strings.Contains(errs, "slow_rank.jsonl ends in a torn line") {
		t.Errorf("set into a torn log: exit %d, %s; want %d naming the file", code, errs, cli.ExitFindings)
	}
}
