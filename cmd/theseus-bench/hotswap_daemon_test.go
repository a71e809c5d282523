package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/contextd"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
	"github.com/theseus-ccl/theseus/examples/contexts"
)

// TestHotSwapThroughDaemon: with a theseus-contextd serving the context the
// benchmark reads, the hot swap publishes slow_rank through the daemon
// (what `theseus-context set slow_rank 2` does) and every rank switches at
// the same request, and back.
func TestHotSwapThroughDaemon(t *testing.T) {
	dir := t.TempDir()
	d, err := contextd.Start(contextd.Config{DataDir: filepath.Join(dir, "data"), ContextsDir: filepath.Join(dir, "contexts"), Margin: -1, Name: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	reqs, err := publish.Seed(contexts.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		switch {
		case r.Attr != nil:
			_, err = d.Attr(ctx, "default", *r.Attr)
		case r.Sched != nil:
			_, err = d.Sched(ctx, "default", *r.Sched)
		case r.Value != nil:
			_, err = d.Value(ctx, "default", *r.Value)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// An operator's setting, which the demonstration must put back
	// (finding 02).
	if _, err := d.Value(ctx, "default", api.ValueRequest{Name: "slow_rank", Value: "3", ValidAfter: "always"}); err != nil {
		t.Fatal(err)
	}
	ctxDir := filepath.Join(d.ContextsDir(), "default")
	code, out, errs := runBench(t, "--json", "--nranks", "4", "-b", "8", "-e", "8", "--coll", "allreduce", "--context", ctxDir, "--contextd", d.Socket())
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	hs := rep.HotSwap
	if hs == nil || hs.Attribute != "slow_rank" || !hs.Consistent || len(hs.Switches) != 2 || len(hs.Published) != 2 {
		t.Fatalf("hot swap %+v", hs)
	}
	if !strings.Contains(hs.Published[0].Where, "theseus-contextd") || hs.Published[0].Value != 2 || hs.Published[1].Value != 3 {
		t.Fatalf("published %+v", hs.Published)
	}
	for _, s := range hs.Switches {
		if s.Ranks != "all" {
			t.Fatalf("switch %+v", s)
		}
	}
	if hs.Switches[0].Request != hsSlowAt+5 || hs.Switches[1].Request != hsBackAt+5 {
		t.Fatalf("switches at requests %d and %d, want %d and %d", hs.Switches[0].Request, hs.Switches[1].Request, hsSlowAt+5, hsBackAt+5)
	}
	log, _ := os.ReadFile(filepath.Join(ctxDir, contexts.SlowRankLog))
	lines := strings.Split(strings.TrimSuffix(string(log), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], `{"value":3`) || !strings.HasPrefix(lines[1], `{"value":2,`) || !strings.HasPrefix(lines[2], `{"value":3,`) {
		t.Fatalf("slow_rank.jsonl, want 3 (the operator's), 2, then 3 again:\n%s", log)
	}

	// A context that already holds the value the demonstration publishes:
	// it would switch nothing, so it is skipped, saying why, and nothing
	// is published.
	if _, err := d.Value(ctx, "default", api.ValueRequest{Name: "slow_rank", Value: "2", ValidAfter: "always"}); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runBench(t, "--json", "--nranks", "4", "-b", "8", "-e", "8", "--coll", "allreduce", "--context", ctxDir, "--contextd", d.Socket())
	rep = Report{}
	if code != cli.ExitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.HotSwap == nil || !strings.Contains(rep.HotSwap.Skipped, "already has slow_rank = 2") {
		t.Fatalf("a context at the demonstration's value: exit %d, %+v\n%s", code, rep.HotSwap, errs)
	}
	if log, _ := os.ReadFile(filepath.Join(ctxDir, contexts.SlowRankLog)); strings.Count(string(log), "\n") != 4 {
		t.Fatalf("published although skipped:\n%s", log)
	}
}
