//go:build linux

package executor

import (
	"fmt"
	"sync"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// recording is a backend that records the specialised kernel of every
// Prepare (device.Args.Kernel) and prepares on the host backend.
type recording struct {
	device.Backend
	mu   sync.Mutex
	seen map[string]string // "rank dtype" -> the kernel's PTX, or "none"
}

func (b *recording) Prepare(a *device.Args) (device.Prepared, error) {
	b.mu.Lock()
	k := "none"
	if a.Kernel != nil {
		k = string(a.Kernel.PTX)
		for _, p := range a.Kernel.Peers {
			k += ", peer " + string(p.PTX)
		}
	}
	b.seen[fmt.Sprintf("%d %v", a.Rank, a.DataType)] = k
	b.mu.Unlock()
	return b.Backend.Prepare(a)
}

// TestSpecializedKernelsReachPrepare: a bundle's specialised kernels reach
// the backend's Prepare for the rank (the logical rank's kernel) and
// datatype they were built for, with the other ranks' kernels of the
// datatype as its peers (a backend that several ranks of the process
// share loads them all before the first launch: device.Kernel.Peers),
// nothing for other datatypes, and nothing
// with GenericOnly (THESEUS_SPECIALIZED=0); the host backend ignores them
// and computes the same results.
func TestSpecializedKernelsReachPrepare(t *testing.T) {
	const n = 2
	for _, generic := range []bool{false, true} {
		t.Run(fmt.Sprintf("genericOnly=%v", generic), func(t *testing.T) {
			w := newWorld(t, n, Config{InitialScratch: 1 << 16, GenericOnly: generic})
			rec := &recording{Backend: w.dev, seen: map[string]string{}}
			for r := range n {
				w.ex[r].dev, w.ex[r].cfg.Backend = rec, rec
			}
			s := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
			s.Bundle.Kernels = []bundle.Kernel{{Rank: 0, DataType: ir.Float32, PTX: []byte("ptx of rank 0")},
				{Rank: 1, DataType: ir.Float32, PTX: []byte("ptx of rank 1")}}
			for _, dt := range []ir.DataType{ir.Float32, ir.Int32} {
				c := devicetest.Case{Coll: ir.AllReduce, DataType: dt, RedOp: ir.Sum, Count: 100, NRanks: n, Seed: 1}
				if wrong, errs := w.run(s, c, false); wrong != 0 || errs[0] != nil || errs[1] != nil {
					t.Fatalf("%v: %d wrong, %v", dt, wrong, errs)
				}
			}
			for r := range n {
				want := fmt.Sprintf("ptx of rank %d, peer ptx of rank %d", r, 1-r)
				if generic {
					want = "none"
				}
				if got := rec.seen[fmt.Sprintf("%d float32", r)]; got != want {
					t.Errorf("rank %d float32: kernel %q, want %q", r, got, want)
				}
				if got := rec.seen[fmt.Sprintf("%d int32", r)]; got != "none" {
					t.Errorf("rank %d int32: kernel %q, want none", r, got)
				}
			}
		})
	}
}
