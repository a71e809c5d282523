//go:build linux

package theseus

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// TestEnumValues pins the NCCL 2.25.1 values and their IR mapping.
func TestEnumValues(t *testing.T) {
	types := map[DataType]ir.DataType{0: ir.Int8, 1: ir.Uint8, 2: ir.Int32, 3: ir.Uint32, 4: ir.Int64, 5: ir.Uint64,
		6: ir.Float16, 7: ir.Float32, 8: ir.Float64, 9: ir.Bfloat16, 10: ir.Fp8E4M3, 11: ir.Fp8E5M2}
	for d, want := range types {
		if got, ok := d.IR(); !ok || got != want {
			t.Errorf("datatype %d -> %v, want %v", d, got, want)
		}
	}
	ops := map[RedOp]ir.RedOp{0: ir.Sum, 1: ir.Prod, 2: ir.Max, 3: ir.Min, 4: ir.Avg}
	for o, want := range ops {
		if got, ok := o.IR(); !ok || got != want {
			t.Errorf("redop %d -> %v, want %v", o, got, want)
		}
	}
	for _, d := range []DataType{-1, NumTypes, 1 << 20} {
		if _, ok := d.IR(); ok {
			t.Errorf("datatype %d accepted", d)
		}
	}
	for _, o := range []RedOp{-1, NumOps, math.MaxInt32} {
		if _, ok := o.IR(); ok {
			t.Errorf("redop %d accepted", o)
		}
	}
	if Char != Int8 || Int != Int32 || Half != Float16 || Float != Float32 || Double != Float64 {
		t.Error("aliases")
	}
}

// TestBadInput: every documented per-call error, and nothing is selected or
// materialised for it.
func TestBadInput(t *testing.T) {
	comms, _ := localComms(t, 2, nil)
	c := comms[1] // rank 1: in-place offsets are nonzero
	buf, err := c.MemAlloc(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	segments := host.Segments()
	const huge = math.MaxInt64 / 4
	cases := []struct {
		name string
		call func() error
		code Code
	}{
		{"datatype -1", func() error { return c.AllReduce(buf, buf+4096, 8, -1, Sum, nil) }, InvalidArgument},
		{"datatype 12", func() error { return c.AllGather(buf, buf+4096, 8, NumTypes, nil) }, InvalidArgument},
		{"redop 5 (premulsum ids)", func() error { return c.AllReduce(buf, buf+4096, 8, Float32, NumOps, nil) }, InvalidArgument},
		{"redop -1", func() error { return c.ReduceScatter(buf, buf+4096, 8, Float32, -1, nil) }, InvalidArgument},
		{"root -1", func() error { return c.Broadcast(buf, buf+4096, 8, Float32, -1, nil) }, InvalidArgument},
		{"root nranks", func() error { return c.Reduce(buf, buf+4096, 8, Float32, Sum, 2, nil) }, InvalidArgument},
		{"root of gather", func() error { return c.Gather(buf, buf+4096, 8, Float32, 7, nil) }, InvalidArgument},
		{"count -1", func() error { return c.AllReduce(buf, buf+4096, -1, Float32, Sum, nil) }, InvalidArgument},
		{"count overflow", func() error { return c.AllGather(buf, buf+4096, huge, Float64, nil) }, InvalidArgument},
		{"null send", func() error { return c.AllReduce(0, buf+4096, 8, Float32, Sum, nil) }, InvalidArgument},
		{"null recv", func() error { return c.AllReduce(buf, 0, 8, Float32, Sum, nil) }, InvalidArgument},
		{"null root send of scatter", func() error { return c.Scatter(0, buf, 8, Float32, 1, nil) }, InvalidArgument},
		{"address wraps", func() error { return c.AllReduce(Ptr(math.MaxUint64-16), buf, 8, Float32, Sum, nil) }, InvalidArgument},
		{"overlap", func() error { return c.AllReduce(buf, buf+16, 8, Float32, Sum, nil) }, InvalidArgument},
		{"allgather in place at the wrong offset", func() error { return c.AllGather(buf, buf, 8, Float32, nil) }, InvalidArgument},
		{"not congruent mod 16", func() error { return c.AllReduce(buf+4, buf+4096, 8, Float32, Sum, nil) }, InvalidUsage},
		{"alltoall not congruent", func() error { return c.AlltoAll(buf, buf+4096+8, 8, Float32, nil) }, InvalidUsage},
	}
	for _, tc := range cases {
		before := c.Stats()
		err := tc.call()
		var e *Error
		if !errors.As(err, &e) || e.Code != tc.code || CodeOf(err) != tc.code || e.Rank != 1 {
			t.Errorf("%s: %v, want code %v from rank 1", tc.name, err, tc.code)
			continue
		}
		after := c.Stats()
		if d := cmp.Diff(before.Executor, after.Executor); d != "" {
			t.Errorf("%s: the executor moved:\n%s", tc.name, d)
		}
		if before.Selector != after.Selector {
			t.Errorf("%s: the selector moved: %+v -> %+v", tc.name, before.Selector, after.Selector)
		}
	}
	if got := host.Segments(); got != segments {
		t.Errorf("bad calls created %d segments", got-segments)
	}
	if st := c.Stats().Executor; st.L0Setups != 0 || st.Walks != 0 {
		t.Errorf("nothing may be materialised: %+v", st)
	}
	// count 0: nothing to do, and nothing selected.
	if err := c.AllReduce(0, 0, 0, Float32, Sum, nil); err != nil || !c.LastCall().Skipped {
		t.Errorf("count 0: %v, %+v", err, c.LastCall())
	}
	// In place with an odd count is not held to the mod-16 rule.
	errs := onEach(comms, func(x *Comm) error {
		p, _ := x.MemAlloc(2 * 7)
		return x.AllGather(p+Ptr(7*x.Rank()), p, 7, Int8, nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("in-place allgather of 7 bytes, rank %d: %v", r, err)
		}
	}
}

// TestNoSchedule: a request no schedule serves is InvalidUsage wrapping
// ErrNoSchedule (the NCCL layer's cue to fall back).
func TestNoSchedule(t *testing.T) {
	dir := t.TempDir()
	if err := commtest.Write(dir, 2, commtest.DefaultAttrs, commtest.Standard(2)[:1]); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: "host", ContextDir: dir}
	comms, err := NewLocalComms(context.Background(), 2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Destroy()
		}
	}()
	errs := onEach(comms, func(c *Comm) error {
		p, _ := c.MemAlloc(1 << 12)
		return c.AllGather(p, p+2048, 8, Float32, nil)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrNoSchedule) || CodeOf(err) != InvalidUsage {
			t.Errorf("rank %d: %v, want InvalidUsage/ErrNoSchedule", r, err)
		}
	}
	for _, c := range comms {
		if err := c.AsyncError(); err != nil {
			t.Errorf("no schedule is not an asynchronous error: %v", err)
		}
	}
}

// TestLifecycle: finalize, destroy and abort, and calls after them.
func TestLifecycle(t *testing.T) {
	comms, _ := localComms(t, 2, nil)
	res := onEach(comms, func(c *Comm) error {
		p, _ := c.MemAlloc(4096)
		if err := c.AllReduce(p, p+1024, 8, Float32, Sum, nil); err != nil {
			return err
		}
		if err := c.Finalize(); err != nil {
			return err
		}
		if err := c.Finalize(); err != nil {
			return errors.New("second finalize: " + err.Error())
		}
		err := c.AllReduce(p, p+1024, 8, Float32, Sum, nil)
		if !errors.Is(err, ErrState) || CodeOf(err) != InvalidUsage {
			return errors.New("call after finalize: " + errString(err))
		}
		return nil
	})
	for r, err := range res {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	for _, c := range comms {
		if err := c.Destroy(); err != nil {
			t.Errorf("destroy: %v", err)
		}
		if err := c.Destroy(); err != nil {
			t.Errorf("second destroy: %v", err)
		}
		if err := c.Abort(); err != nil {
			t.Errorf("abort after destroy: %v", err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestAbortWhileRunning: Abort from another goroutine stops a rank waiting
// in a collective its peer never joins, and the peer sees the aborted rank
// as lost.
func TestAbortWhileRunning(t *testing.T) {
	comms, _ := localComms(t, 2, func(c *Config) { c.Options.Timeout = 30 * time.Second })
	p, _ := comms[0].MemAlloc(4096)
	done := make(chan error, 1)
	start := time.Now()
	// Rank 1 never joins: rank 0 would wait for the timeout. Wherever the
	// call is when Abort lands (not started, materialising, launched), it
	// must return promptly with an error.
	go func() { done <- comms[0].AllReduce(p, p+1024, 256, Float32, Sum, nil) }()
	comms[0].Abort()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the aborted collective returned no error")
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("abort took %v", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Abort did not stop the collective")
	}
	deadline := time.Now().Add(10 * time.Second)
	for comms[1].AsyncError() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	err := comms[1].AsyncError()
	var e *Error
	if !errors.As(err, &e) || e.Code != RemoteError || !cmp.Equal(e.Peers, []int{0}) || !errors.Is(err, ErrLostRank) {
		t.Errorf("rank 1's async error %v, want RemoteError naming rank 0", err)
	}
	// The broken communicator refuses further calls with that error.
	q, _ := comms[1].MemAlloc(4096)
	if err := comms[1].AllReduce(q, q+1024, 8, Float32, Sum, nil); CodeOf(err) != RemoteError {
		t.Errorf("call on a broken communicator: %v", err)
	}
}

// TestSplit: ncclCommSplit semantics (color groups, key order, NoColor).
func TestSplit(t *testing.T) {
	comms, _ := localComms(t, 4, nil)
	colors := []int{0, 1, 0, NoColor}
	keys := []int{5, 0, 1, 0}
	subs := onEach(comms, func(c *Comm) *Comm {
		s, err := c.Split(colors[c.Rank()], keys[c.Rank()])
		if err != nil {
			t.Errorf("rank %d: %v", c.Rank(), err)
		}
		return s
	})
	type pos struct{ rank, n int }
	want := []*pos{{1, 2}, {0, 1}, {0, 2}, nil}
	for r, s := range subs {
		if (s == nil) != (want[r] == nil) {
			t.Fatalf("rank %d: comm %v, want %v", r, s, want[r])
		}
		if s != nil && (s.Rank() != want[r].rank || s.NRanks() != want[r].n) {
			t.Errorf("rank %d: new rank %d of %d, want %d of %d", r, s.Rank(), s.NRanks(), want[r].rank, want[r].n)
		}
	}
	// The 2-rank group works (its context is the parent's: a 4-rank one,
	// so it has no schedule; an empty call still succeeds).
	var wg sync.WaitGroup
	for _, r := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := subs[r].AllReduce(0, 0, 0, Float32, Sum, nil); err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}()
	}
	wg.Wait()
	for _, s := range subs {
		if s != nil {
			s.Destroy()
		}
	}
}

// TestOneDevicePerProcess: a process binds one device (seed assumption 3).
func TestOneDevicePerProcess(t *testing.T) {
	comms, _ := localComms(t, 1, nil)
	_ = comms
	id, err := GetUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: "host", Device: 1, ContextDir: t.TempDir()}
	_, err = NewComm(context.Background(), id, 0, 1, cfg)
	if !errors.Is(err, ErrLayout) || CodeOf(err) != InvalidUsage {
		t.Errorf("second device in one process: %v, want InvalidUsage/ErrLayout", err)
	}
}

// TestJoinIDFile: the unique-id-file rendezvous.
func TestJoinIDFile(t *testing.T) {
	dir := t.TempDir()
	if err := commtest.WriteStandard(dir, 2); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "id")
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = Join(context.Background(), LaunchInfo{Rank: r, WorldSize: 2, IDFile: file}, Config{Backend: "host", ContextDir: dir})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer comms[r].Destroy()
	}
	if b, err := os.ReadFile(file); err != nil || len(b) != 2*128+1 {
		t.Errorf("id file: %d bytes, %v", len(b), err)
	}
	// A malformed file is an error, not a hang.
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("zz\n"), 0o644)
	cfg := Config{Backend: "host"}
	cfg.Options.Timeout = time.Second
	if _, err := Join(context.Background(), LaunchInfo{Rank: 1, WorldSize: 2, IDFile: bad}, cfg); CodeOf(err) != SystemError {
		t.Errorf("malformed id file: %v", err)
	}
	if _, err := Join(context.Background(), LaunchInfo{Rank: 1, WorldSize: 2, IDFile: filepath.Join(t.TempDir(), "never")}, cfg); CodeOf(err) != SystemError {
		t.Errorf("missing id file: %v", err)
	}
}

func TestLaunchInfoFromEnv(t *testing.T) {
	for _, k := range []string{"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if _, err := LaunchInfoFromEnv(); err == nil {
		t.Error("no launcher variables accepted")
	}
	t.Setenv("OMPI_COMM_WORLD_RANK", "3")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "8")
	t.Setenv("MASTER_ADDR", "10.0.0.1")
	li, err := LaunchInfoFromEnv()
	if err != nil || li != (LaunchInfo{Rank: 3, WorldSize: 8, RootAddr: "10.0.0.1:29500"}) {
		t.Errorf("%+v, %v", li, err)
	}
	t.Setenv("RANK", "x")
	t.Setenv("WORLD_SIZE", "8")
	if _, err := LaunchInfoFromEnv(); err == nil {
		t.Error("RANK=x accepted")
	}
}

// FuzzDecodeID: a unique-id file or root reply never panics the decoder,
// and what it accepts carries a root address.
func FuzzDecodeID(f *testing.F) {
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := decodeID(s)
		if err != nil {
			return
		}
		if _, err := id.Addr(); err != nil {
			t.Fatalf("accepted %q without an address: %v", s, err)
		}
	})
}

// TestWatchdogPolling: AsyncError may be polled from another goroutine
// while collectives run (PyTorch's watchdog does every 100 ms); it stays
// nil on a healthy communicator.
func TestWatchdogPolling(t *testing.T) {
	comms, _ := localComms(t, 2, nil)
	stop := make(chan struct{})
	var polls int
	var bad error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range comms {
				if err := c.AsyncError(); err != nil && bad == nil {
					bad = err
				}
			}
			polls++
		}
	}()
	errs := onEach(comms, func(c *Comm) error {
		p, _ := c.MemAlloc(1 << 16)
		for i := range 200 {
			if err := c.AllReduce(p, p+1<<15, int64(1+i%50), Float32, Sum, nil); err != nil {
				return err
			}
		}
		return nil
	})
	close(stop)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if bad != nil {
		t.Errorf("AsyncError on a healthy communicator: %v", bad)
	}
	t.Logf("%d polls", polls)
}

// TestJoinBadEnvFailsAtOnce: a malformed variable fails Join on a rank
// other than 0 at once, naming the variable, before the unique-id
// rendezvous: rank 0 fails on the same variable and never serves the id,
// so after the rendezvous the other ranks waited THESEUS_TIMEOUT for it
// and then failed naming only the rendezvous (found by a fresh user, with
// THESEUS_PROXY_LANES=17 on every rank of theseus-bench).
func TestJoinBadEnvFailsAtOnce(t *testing.T) {
	for _, kv := range [][2]string{{"THESEUS_PROXY_LANES", "17"}, {"THESEUS_PROXY_STAGING", "gpu"}, {"THESEUS_PROXY_SPIN", "-1"}} {
		t.Run(kv[0], func(t *testing.T) {
			t.Setenv(kv[0], kv[1])
			env.Reset()
			t.Cleanup(env.Reset)
			cfg := Config{Backend: "host"}
			cfg.Options.Timeout = time.Minute // no rank 0 serves the id: a rendezvous would wait this long
			_, err := Join(context.Background(), LaunchInfo{Rank: 1, WorldSize: 2, RootAddr: "127.0.0.1:1"}, cfg)
			var e *Error
			if !errors.As(err, &e) || e.Code != InvalidArgument || !strings.Contains(err.Error(), kv[0]) {
				t.Fatalf("Join with %s=%s: %v, want an InvalidArgument naming the variable", kv[0], kv[1], err)
			}
		})
	}
}
