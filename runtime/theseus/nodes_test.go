//go:build linux

package theseus

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

func needUCX(t testing.TB) {
	t.Helper()
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
	if _, ok := os.LookupEnv("UCX_TLS"); !ok {
		t.Setenv("UCX_TLS", "tcp")
	}
}

// nodeComms creates nodes x per ranks as goroutines of this process, rank
// r on simulated node r/per (its own host id), on the default context.
func nodeComms(t *testing.T, nodes, per int) []*Comm {
	t.Helper()
	n := nodes * per
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := Config{Backend: "host"}
			cfg.Options.Timeout = 20 * time.Second
			cfg.Options.InitialScratch = 1 << 20
			cfg.Options.HostID = fmt.Sprintf("node%d", r/per)
			comms[r], errs[r] = NewComm(context.Background(), id, r, n, cfg)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Destroy()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms
}

// TestNodesInProcess: 2 nodes of 2 ranks as goroutines of this process
// (each simulated node's ranks with their own proxy), UCX over TCP: a
// sample of every collective computes right through port channels
// between the nodes.
func TestNodesInProcess(t *testing.T) {
	needUCX(t)
	comms := nodeComms(t, 2, 2)
	var cases []devicetest.Case
	for i, coll := range allColls {
		for _, count := range []int64{7, 1000003} {
			cases = append(cases, devicetest.Case{Coll: coll, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: 4,
				Root: i % 4, InPlace: i%2 == 0, Seed: uint64(i + 1)})
		}
	}
	res := onEach(comms, func(c *Comm) rankResult { return runCases(c, cases) })
	for r, x := range res {
		if x.Err != nil || x.Wrong != 0 {
			t.Errorf("rank %d: %d wrong: %v", r, x.Wrong, x.Err)
		}
		var names []string
		for k := range x.Schedules {
			names = append(names, k)
		}
		t.Logf("rank %d: %d cases, schedules %s", r, x.Cases, strings.Join(names, " "))
	}
}
