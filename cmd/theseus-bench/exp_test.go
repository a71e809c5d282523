package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

func TestExp(t *testing.T) {
	dir, rm, err := contexts.TempDir("")
	if err != nil {
		t.Fatal(err)
	}
	defer rm()
	cfg := theseus.Config{Backend: "host", ContextDir: dir}
	comms, err := theseus.NewLocalComms(context.Background(), 4, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, coll := range []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.AllToAll, ir.Broadcast, ir.Reduce, ir.Gather, ir.Scatter} {
		for _, size := range []int64{8, 1 << 16, 1 << 20, 16 << 20, 64 << 20} {
			count := size / 4 / ir.MaxBlocks(coll, 4)
			var wg sync.WaitGroup
			start := time.Now()
			const iters = 3
			for _, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, _ := c.MemAlloc(size)
					r, _ := c.MemAlloc(size)
					for i := 0; i < iters; i++ {
						if err := c.Collective(coll, s, r, count, theseus.Float32, theseus.Sum, 0, nil); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			d := time.Since(start) / iters
			t.Logf("%s %d: %v per iter (%s) %.2f GB/s", coll, size, d, comms[0].LastCall().Name, float64(size)/d.Seconds()/1e9)
		}
	}
}
