//go:build linux

package theseus

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
)

// TestLLRootedBackToBack: a direct LL broadcast gives its root no
// back-pressure, so without the executor's LL launch fence the root runs
// two launches ahead and overwrites the scratch half a slow reader still
// polls (a hang until the timeout). Many back-to-back launches on 4 ranks
// must all complete with the right values.
func TestLLRootedBackToBack(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	if err := commtest.Write(dir, n, commtest.DefaultAttrs, []commtest.Sched{
		{Algo: "direct", Coll: ir.Broadcast, Protocol: ir.LL, Replaces: -1},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: "host", ContextDir: dir}
	cfg.Options.Timeout = 20 * time.Second
	comms, err := NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Destroy()
		}
	}()
	const count, launches = 64, 40
	res := onEach(comms, func(c *Comm) error {
		r := c.Rank()
		s, err := c.NewStream()
		if err != nil {
			return err
		}
		defer s.Close()
		// Every launch has its own buffers and nothing waits between them:
		// the root's stream may run ahead of the readers'.
		send := make([][]byte, launches)
		recv := make([][]byte, launches)
		sp := make([]Ptr, launches)
		rp := make([]Ptr, launches)
		for l := range launches {
			var err error
			if sp[l], err = c.MemAlloc(4 * count); err != nil {
				return err
			}
			if rp[l], err = c.MemAlloc(4 * count); err != nil {
				return err
			}
			send[l], _ = c.HostBytes(sp[l], 4*count)
			recv[l], _ = c.HostBytes(rp[l], 4*count)
			for i := 0; i < count; i++ {
				binary.LittleEndian.PutUint32(send[l][4*i:], uint32(1000*l+i))
			}
		}
		for l := range launches {
			if err := c.Broadcast(sp[l], rp[l], count, Int32, 0, s); err != nil {
				return err
			}
			if l == 0 && r == 0 {
				t.Logf("schedule %s", c.LastCall().Name)
			}
		}
		if err := s.Synchronize(); err != nil {
			return err
		}
		for l := range launches {
			for i := 0; i < count; i++ {
				if got := binary.LittleEndian.Uint32(recv[l][4*i:]); got != uint32(1000*l+i) {
					t.Errorf("rank %d launch %d element %d = %d", r, l, i, got)
					return nil
				}
			}
		}
		return nil
	})
	for r, err := range res {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}
