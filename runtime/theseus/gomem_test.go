//go:build linux

package theseus

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
)

// TestGoMemoryAllReduce: ranks as goroutines passing plain Go memory
// (HostPtr), on LL and Simple one-shot schedules (which read the peers'
// buffers, so the executor stages foreign memory).
func TestGoMemoryAllReduce(t *testing.T) {
	for _, c := range []struct {
		proto      ir.Protocol
		backendMem bool
	}{{ir.LL, false}, {ir.Simple, false}, {ir.LL, true}, {ir.Simple, true}} {
		proto, backendMem := c.proto, c.backendMem
		t.Run(fmt.Sprintf("%v/backendmem=%v", proto, backendMem), func(t *testing.T) {
			const n = 2
			dir := t.TempDir()
			if err := commtest.Write(dir, n, commtest.DefaultAttrs, []commtest.Sched{
				{Algo: "oneshot", Coll: ir.AllReduce, Protocol: proto, Replaces: -1},
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
			const count = 16
			res := onEach(comms, func(c *Comm) []int32 {
				r := c.Rank()
				var send, recv []byte
				var sp, rp Ptr
				if backendMem {
					sp, _ = c.MemAlloc(4 * count)
					rp, _ = c.MemAlloc(4 * count)
					send, _ = c.HostBytes(sp, 4*count)
					recv, _ = c.HostBytes(rp, 4*count)
				} else {
					send, recv = make([]byte, 4*count), make([]byte, 4*count)
					sp, rp = HostPtr(send), HostPtr(recv)
				}
				for i := 0; i < count; i++ {
					binary.LittleEndian.PutUint32(send[4*i:], uint32(i+r*i))
				}
				if err := c.AllReduce(sp, rp, count, Int32, Sum, nil); err != nil {
					t.Errorf("rank %d: %v", r, err)
					return nil
				}
				out := make([]int32, count)
				for i := range out {
					out[i] = int32(binary.LittleEndian.Uint32(recv[4*i:]))
				}
				return out
			})
			for r, got := range res {
				for i, v := range got {
					if v != int32(3*i) {
						t.Fatalf("rank %d: got %v, want element %d = %d", r, got, i, 3*i)
					}
				}
			}
		})
	}
}
