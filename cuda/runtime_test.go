package cuda_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/cuda"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// TestRuntimeCollectives runs every collective through the public API on
// the CUDA backend with 4 ranks as goroutines of this process (one GPU, one
// context), and with one rank (whose collectives are local copies: the
// backend runs them as shared work, theseus_units), in and out of place,
// and checks every output element against a direct computation (float32
// inputs that are small integers, so every reduction order gives the same
// sum).
func TestRuntimeCollectives(t *testing.T) {
	gputest.Require(t)
	for _, n := range []int{4, 1} {
		t.Run(fmt.Sprintf("nranks=%d", n), func(t *testing.T) { runtimeCollectives(t, n) })
	}
}

func runtimeCollectives(t *testing.T, n int) {
	comms, _, be := localComms(t, n)
	colls := []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast, ir.Reduce, ir.AllToAll, ir.Gather, ir.Scatter}
	total, wrong := 0, 0
	start := time.Now()
	for _, coll := range colls {
		for _, count := range []int64{1, 7, 1000, 1 << 20} {
			for _, inplace := range []bool{false, true} {
				for _, root := range slices.Compact([]int{0, n - 1}) {
					if !coll.Rooted() && root != 0 {
						continue
					}
					if inplace && (coll == ir.Gather || coll == ir.Scatter) {
						continue // in place only at the root: covered by the host tests
					}
					w, sched, err := runOne(be, comms, coll, count, inplace, root)
					total++
					if err != nil {
						t.Errorf("%v count=%d inplace=%v root=%d: %v", coll, count, inplace, root, err)
						continue
					}
					if w != 0 {
						wrong++
						t.Errorf("%v count=%d inplace=%v root=%d (%s): #wrong = %d", coll, count, inplace, root, sched, w)
					}
				}
			}
		}
	}
	t.Logf("%d cases, %d with #wrong > 0, in %v", total, wrong, time.Since(start))
	fmt.Printf("RUNTIME cuda %d ranks in-process: %d cases, %d wrong\n", n, total, wrong)
}

func blocks(coll ir.Collective, k ir.BufKind, n, rank, root int) int64 {
	b := ir.Blocks(coll, k, n, rank, root)
	return max(b, 0)
}

func val(rank int, i int64) float32 { return float32((int64(rank)*7+i*3)%17 - 8) }

// runOne runs one collective on every rank and returns #wrong summed over
// ranks and rank 0's schedule.
func runOne(be device.Backend, comms []*theseus.Comm, coll ir.Collective, count int64, inplace bool, root int) (int64, string, error) {
	n := len(comms)
	type rb struct{ send, recv, alloc device.Ptr }
	bufs := make([]rb, n)
	blockB := count * 4
	for r := 0; r < n; r++ {
		inB := blocks(coll, ir.Input, n, r, root) * blockB
		outB := blocks(coll, ir.Output, n, r, root) * blockB
		size := max(inB, outB, 16)
		p, err := be.Alloc(size + 256)
		if err != nil {
			return 0, "", err
		}
		bufs[r].alloc = p
		bufs[r].recv = p
		bufs[r].send = p
		if !inplace {
			q, err := be.Alloc(max(inB, 16))
			if err != nil {
				return 0, "", err
			}
			bufs[r].send = q
		} else {
			switch coll {
			case ir.AllGather:
				bufs[r].send = p + device.Ptr(int64(r)*blockB)
			case ir.ReduceScatter:
				bufs[r].recv = p + device.Ptr(int64(r)*blockB)
			}
		}
		in := make([]byte, inB)
		for i := int64(0); i < inB/4; i++ {
			binary.LittleEndian.PutUint32(in[4*i:], math.Float32bits(val(r, i)))
		}
		if inB > 0 {
			if err := be.Upload(bufs[r].send, in); err != nil {
				return 0, "", err
			}
		}
	}
	defer func() {
		for r := range bufs {
			be.Free(bufs[r].alloc)
			if bufs[r].send != bufs[r].alloc && !(inplace && (coll == ir.AllGather)) {
				be.Free(bufs[r].send)
			}
		}
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = comms[r].Collective(coll, bufs[r].send, bufs[r].recv, count, theseus.Float32, theseus.Sum, root, nil)
		}(r)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, "", err
		}
	}
	var bad int64
	for r := 0; r < n; r++ {
		outB := blocks(coll, ir.Output, n, r, root) * blockB
		if outB == 0 {
			continue
		}
		got := make([]byte, outB)
		if err := be.Download(got, bufs[r].recv); err != nil {
			return 0, "", err
		}
		for i := int64(0); i < outB/4; i++ {
			g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
			if g != expect(coll, n, r, root, count, i) {
				bad++
			}
		}
	}
	return bad, comms[0].LastCall().Name, nil
}

func expect(coll ir.Collective, n, r, root int, count, i int64) float32 {
	b, j := i/count, i%count
	sum := func(idx int64) float32 {
		var s float32
		for q := 0; q < n; q++ {
			s += val(q, idx)
		}
		return s
	}
	switch coll {
	case ir.AllReduce, ir.Reduce:
		return sum(i)
	case ir.AllGather, ir.Gather:
		return val(int(b), j)
	case ir.ReduceScatter:
		return sum(int64(r)*count + i)
	case ir.Broadcast:
		return val(root, i)
	case ir.AllToAll:
		return val(int(b), int64(r)*count+j)
	case ir.Scatter:
		return val(root, int64(r)*count+i)
	}
	return 0
}

// BenchmarkOneRankAllReduce is a one-rank communicator's out-of-place
// float32 allreduce of 1 GiB through the public API on the CUDA backend (a
// copy, run as shared work by theseus_units on as many threadblocks as the
// GPU holds), timed over b.N calls on one stream: copy-GB/s counts the
// bytes read and written, memcpy-fraction divides it by cuMemcpyDtoD's
// over the same buffers.
func BenchmarkOneRankAllReduce(b *testing.B) {
	gputest.Require(b)
	const bytes = 1 << 30
	comms, streams, be := localComms(b, 1)
	src, err := be.Alloc(bytes)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Free(src)
	dst, err := be.Alloc(bytes)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Free(dst)
	call := func() error {
		return comms[0].AllReduce(src, dst, bytes/4, theseus.Float32, theseus.Sum, streams[0])
	}
	for range 3 {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	if err := streams[0].Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := call(); err != nil {
			b.Fatal(err)
		}
	}
	if err := streams[0].Synchronize(); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	op := 2 * float64(bytes) * float64(b.N) / el.Seconds()
	var mc float64
	if err := cuda.WithDevice(func() error {
		const reps = 20
		t0 := time.Now()
		for range reps {
			if err := driver.CopyDtoD(driver.Ptr(dst), driver.Ptr(src), bytes); err != nil {
				return err
			}
		}
		if err := driver.Synchronize(); err != nil {
			return err
		}
		mc = 2 * float64(bytes) * reps / time.Since(t0).Seconds()
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(op/1e9, "copy-GB/s")
	b.ReportMetric(op/mc, "memcpy-fraction")
	fmt.Printf("ONERANK allreduce 1 GiB: %.1f GB/s = %.3f of memcpy over the same buffers (schedule %s)\n", op/1e9, op/mc, comms[0].LastCall().Name)
}
