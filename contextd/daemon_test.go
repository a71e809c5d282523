package contextd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/client"
	"github.com/theseus-ccl/theseus/contextd/publish"
)

func example(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func start(t testing.TB, cfg Config) *Daemon {
	t.Helper()
	d, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

func single(t testing.TB, dir string) Config {
	return Config{DataDir: filepath.Join(dir, "data"), ContextsDir: filepath.Join(dir, "contexts"), Margin: -1, Name: "n0"}
}

// TestSingleNode: publications through the socket land in the context
// directory, the reply waits for them, and a restarted daemon resumes
// after the last entry applied.
func TestSingleNode(t *testing.T) {
	dir := t.TempDir()
	d := start(t, single(t, dir))
	c, err := client.New(client.Options{Socket: d.Socket()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if st, err := os.Stat(d.Socket()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v mode %v", err, st.Mode())
	}
	for _, r := range []api.AttrRequest{
		{Name: "msgsize", Origin: "endo", Path: "request.messagesize"},
		{Name: "slow_rank", Origin: "exo", Type: "int", Default: "-1"},
	} {
		if _, err := c.Attr(ctx, "default", r); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.Sched(ctx, "default", api.SchedRequest{FileName: "ring.json", File: example(t, "allreduce_ring_8rank_simple.json"),
		Collective: "allreduce", Preference: "slow_rank < 0 ? 10 : 1"})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Applied || p.ID != 0 || p.Seq == 0 {
		t.Fatalf("reply %+v", p)
	}
	ctxDir := filepath.Join(dir, "contexts", "default")
	if _, err := os.Stat(filepath.Join(ctxDir, p.File)); err != nil {
		t.Fatal(err)
	}
	v, err := c.Value(ctx, "default", api.ValueRequest{Name: "slow_rank", Value: "2"})
	if err != nil || !v.Applied {
		t.Fatal(v, err)
	}
	// Rejected: nothing goes into the log.
	before := d.Applied()
	_, err = c.Value(ctx, "default", api.ValueRequest{Name: "nosuch", Value: "2"})
	if e, ok := err.(*api.Error); !ok || e.Reason != api.ReasonUnknownAttribute {
		t.Fatalf("unknown attribute: %v", err)
	}
	if d.logLast(ctx) != before {
		t.Fatal("a rejected publication reached the log")
	}
	st, err := c.Status(ctx)
	if err != nil || len(st.Nodes) != 1 || st.Nodes[0].Applied != v.Seq || st.Nodes[0].Lag != 0 {
		t.Fatalf("status %+v, %v", st, err)
	}
	m, err := c.Metrics(ctx)
	if err != nil || !strings.Contains(m, fmt.Sprintf(`theseus_contextd_applied_sequence{node="n0"} %d`, v.Seq)) ||
		!strings.Contains(m, `theseus_contextd_rejections_total{node="n0",reason="unknown_attribute"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
	files := snapshot(t, ctxDir)
	d.Close()
	d2 := start(t, single(t, dir))
	if d2.Applied() != v.Seq {
		t.Fatalf("restarted at %d, want %d", d2.Applied(), v.Seq)
	}
	c2, _ := client.New(client.Options{Socket: d2.Socket()})
	v2, err := c2.Value(ctx, "default", api.ValueRequest{Name: "slow_rank", Value: "-1"})
	if err != nil || v2.ID != 1 {
		t.Fatal(v2, err)
	}
	if got := snapshot(t, ctxDir); !strings.HasPrefix(got, strings.TrimSuffix(files, "\n")) && !strings.Contains(got, `{"value":2,`) {
		t.Fatalf("after the restart:\n%s", got)
	}
}

func snapshot(t testing.TB, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && info.Name() != publish.RootLock { // the lock names its daemon
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			fmt.Fprintf(&b, "== %s\n%s", rel, data)
		}
		return nil
	})
	return b.String()
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestClusterInProcess: three daemons in one process form a cluster; a
// publication on one is applied on all three, byte for byte.
func TestClusterInProcess(t *testing.T) {
	dir := t.TempDir()
	ports := []int{freePort(t), freePort(t), freePort(t)}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var ds []*Daemon
	errs := make(chan error, 3)
	for i := range 3 {
		cfg := Config{DataDir: filepath.Join(dir, fmt.Sprint(i), "data"), ContextsDir: filepath.Join(dir, fmt.Sprint(i), "contexts"),
			Name: fmt.Sprintf("n%d", i), ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes, Margin: -1}
		d, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		ds = append(ds, d)
	}
	for _, d := range ds {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs <- d.Ready(ctx)
		}()
	}
	for range ds {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, err := ds[0].Attr(ctx, "default", api.AttrRequest{Name: "slow_rank", Origin: "exo", Type: "int", Default: "-1"}); err != nil {
		t.Fatal(err)
	}
	var last uint64
	for i := range 30 {
		p, err := ds[i%3].Value(ctx, "default", api.ValueRequest{Name: "slow_rank", Value: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		last = max(last, p.Seq)
	}
	// A second declaration of the name, on another node, is refused.
	if _, err := ds[2].Attr(ctx, "default", api.AttrRequest{Name: "slow_rank", Origin: "exo", Type: "float"}); err == nil {
		t.Fatal("the name was declared twice")
	}
	for _, d := range ds {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := d.WaitApplied(wctx, last); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	s0 := snapshot(t, filepath.Join(dir, "0", "contexts"))
	for i := 1; i < 3; i++ {
		if s := snapshot(t, filepath.Join(dir, fmt.Sprint(i), "contexts")); s != s0 {
			t.Fatalf("node %d differs:\n%s\nnode 0:\n%s", i, s, s0)
		}
	}
	if n := strings.Count(s0, `{"value":`); n != 30 {
		t.Fatalf("%d values, want 30:\n%s", n, s0)
	}
	st := ds[1].Status(ctx)
	if len(st.Nodes) != 3 {
		t.Fatalf("status: %+v", st)
	}

	// Finding 06: a node that is down is listed, as down, with what it
	// said last; without a quorum a publication fails at once as
	// unavailable, saying so and that nothing was published.
	ds[1].Status(ctx)
	ds[2].Close()
	st = ds[1].Status(ctx) // known from n1's earlier status
	if len(st.Nodes) != 3 || st.Nodes[0].Down || st.Nodes[1].Down || !st.Nodes[2].Down || st.Nodes[2].Node != "n2" ||
		st.Nodes[2].Applied != last || st.Nodes[2].LastSeen == "" || !strings.Contains(st.Nodes[2].Error, "not answering") {
		t.Fatalf("status with n2 down: %+v", st)
	}
	st = ds[0].Status(ctx) // known from JetStream's meta group only
	if len(st.Nodes)+st.Unnamed != 3 || st.Nodes[0].Down || st.Nodes[1].Down || st.Unnamed == 0 && !st.Nodes[2].Down {
		t.Fatalf("status with n2 down, from a node that never saw it: %+v", st)
	}
	ds[1].Close()
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := ds[0].Value(pctx, "default", api.ValueRequest{Name: "slow_rank", Value: "7"})
	if !Unavailable(err) || !strings.Contains(err.Error(), "no quorum: 1 of 3 nodes answer") || pctx.Err() != nil {
		t.Fatalf("a publication without a quorum: %v (deadline: %v)", err, pctx.Err())
	}
	if n := strings.Count(snapshot(t, filepath.Join(dir, "0", "contexts")), `{"value":`); n != 30 {
		t.Fatalf("%d values on n0 after a publication without a quorum, want 30", n)
	}
}

// TestJournal: the checkpoint journal replays its deltas and ignores a
// torn last line; a first line that is not a checkpoint is an error.
func TestJournal(t *testing.T) {
	p := filepath.Join(t.TempDir(), checkpointFile)
	os.WriteFile(p, []byte(`{"version":1,"seq":3,"sizes":{"c/a.jsonl":10},"attr_seq":{"c":1}}`+"\n"+
		`{"seq":5,"sizes":{"c/x.jsonl":4}}`+"\n"+`{"seq":9,"sizes":{"c/a.js`), 0o600)
	cp, err := readJournal(p)
	if err != nil || cp.Seq != 5 || cp.Sizes["c/a.jsonl"] != 10 || cp.Sizes["c/x.jsonl"] != 4 || cp.AttrSeq["c"] != 1 {
		t.Fatalf("%+v, %v", cp, err)
	}
	os.WriteFile(p, []byte(`{"seq":5}`+"\n"), 0o600)
	if _, err := readJournal(p); err == nil {
		t.Fatal("a journal without its header was accepted")
	}
}

// TestOneDaemonPerContextsDir (finding 07): a second daemon, with its own
// data directory, is refused on a contexts directory that a running
// daemon materialises (both would append to the same files, and one's
// materialiser would stop for good), and --local publication into one of
// its contexts is refused; once the first stops, the second may start.
func TestOneDaemonPerContextsDir(t *testing.T) {
	dir := t.TempDir()
	d := start(t, single(t, dir))
	cfg := single(t, filepath.Join(dir, "second"))
	cfg.ContextsDir = filepath.Join(dir, "contexts")
	if d2, err := Start(cfg); err == nil {
		d2.Close()
		t.Fatal("a second daemon started on the contexts directory of a running one")
	} else if !strings.Contains(err.Error(), "is in use by another theseus-contextd") || !strings.Contains(err.Error(), filepath.Join(dir, "data")) {
		t.Fatalf("a second daemon on the same contexts directory: %v", err)
	}
	l := &publish.Local{Dir: filepath.Join(dir, "contexts", "default")}
	if _, err := l.Attr(api.AttrRequest{Name: "a", Origin: "exo", Type: "int"}); !errors.Is(err, publish.ErrDaemonRoot) {
		t.Fatalf("--local into a daemon's context: %v", err)
	}
	d.Close()
	start(t, cfg)
}

// TestDecodeStrict (finding 12, L2): a request is read as the manifests
// are: a field given twice (in any case: encoding/json matches names
// case-insensitively) and data after the object are refused.
func TestDecodeStrict(t *testing.T) {
	for body, want := range map[string]string{
		`{"name":"slow_rank","value":"1"}`:               "",
		`{"name":"slow_rank","value":"1","value":"2"}`:   `field "value" given twice`,
		`{"name":"slow_rank","value":"1","VALUE":"2"}`:   `field "VALUE" given twice`,
		`{"name":"slow_rank","value":"1"} trailing`:      "data after the JSON object",
		`{"name":"slow_rank","value":"1"}{"name":"x"}`:   "data after the JSON object",
		`{"name":"slow_rank","value":"1","nosuch":true}`: "unknown field",
		`["name"]`: "malformed request",
	} {
		var r api.ValueRequest
		err := decode1([]byte(body), &r)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
