package cuda

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// TestWorldLoadsKernelsBeforeLaunching: a World with specialised kernels
// (TestDifferentialSpecialized's) loads every rank's before it launches
// any. A module load waits for the context's running kernels, and rank 0's
// kernel waits for rank 1's: loading rank 1's after launching rank 0's
// timed out every first launch on the H200 (fifteenth run, calls C and D).
// CPU only: the loads and launches are recorded, not made.
func TestWorldLoadsKernelsBeforeLaunching(t *testing.T) {
	for _, n := range []int{2, 4} {
		p, err := gen.Generate("oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
		if err != nil {
			t.Fatal(err)
		}
		b, ds, err := passes.Compile(p, passes.Options{})
		if err != nil || b == nil {
			t.Fatalf("%v %v", err, ds)
		}
		tables := make([]*optable.Table, n)
		for r := range tables {
			if tables[r], err = b.Table(r); err != nil {
				t.Fatal(err)
			}
		}
		var events []string
		fnOf := map[driver.Function]int{}
		oldLaunch, oldLoad := worldLaunch, specLoad
		t.Cleanup(func() { worldLaunch, specLoad = oldLaunch, oldLoad })
		specLoad = func(_ driver.Context, k *device.Kernel) (driver.Function, error) {
			r := int(k.PTX[0])
			events = append(events, fmt.Sprintf("load %d", r))
			fn := driver.Function(100 + r)
			fnOf[fn] = r
			return fn, nil
		}
		worldLaunch = func(fn driver.Function, grid, block int, s driver.Stream, a *Launch) error {
			r, ok := fnOf[fn]
			if !ok {
				return fmt.Errorf("launch of a kernel that is not a rank's specialised one (%v)", fn)
			}
			events = append(events, fmt.Sprintf("launch %d", r))
			return nil
		}
		w := &World{tables: tables, n: n, Timeout: time.Second, Threads: 512,
			tableDev: make([]driver.Ptr, n), chanRT: make([]driver.Ptr, n), publish: make([]driver.Ptr, n),
			barriers: make([]driver.Ptr, n), claim: make([]driver.Ptr, n), streams: make([]driver.Stream, n),
			bufs: make([][3]driver.Ptr, n), sizes: make([]launch.Sizes, n), units: make([]unitWork, n)}
		w.req = launch.Request{Count: 1, DataType: ir.Float32, RedOp: ir.Sum}
		w.pl = w.placement(w.req)
		w.Kernels = func(l int, dt ir.DataType) *device.Kernel {
			ptx := []byte{byte(l)}
			return &device.Kernel{Key: sha256.Sum256(ptx), PTX: ptx}
		}
		if err := w.launchAll(); err != nil {
			t.Fatal(err)
		}
		var want []string
		for r := range n {
			want = append(want, fmt.Sprintf("load %d", r))
		}
		for r := range n {
			want = append(want, fmt.Sprintf("launch %d", r))
		}
		if !slices.Equal(events, want) {
			t.Errorf("%d ranks: %v, want every load before the first launch: %v", n, events, want)
		}
	}
}
