//go:build linux

package theseus

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// The driverless model's point-to-point engine (BenchmarkP2PCallHost): the
// host work of cuda.Backend.PrepareP2P and the driver calls it makes,
// counted, without a driver. Memory that is not the backend's own
// (foreign: cudaMalloc'd buffers, as nccl-tests allocates them) is found
// by Lookup in driverlessP2P.foreign at the cost cuda.Backend.Lookup pays
// for it: cuCtxSetCurrent, cuMemGetAddressRange and cuPointerGetAttribute,
// three calls into C.
type driverlessP2P struct {
	foreign device.RegionSet
	// Counters (atomic: PrepareP2P and Lookup run on the ranks' goroutines):
	// prepares (PrepareP2P), device allocations, control-stream syncs,
	// calls into C and driver calls made by PrepareP2P and Lookup.
	prepares, allocs, syncs, cgo, driver atomic.Int64
}

// driverlessP2PPrepared is a prepared launch of the model's engine: the
// launch argument (as driverlessPrepared), the descriptor blob as
// cuda.PrepareP2P builds it.
type driverlessP2PPrepared struct{ blob []byte }

func (*driverlessP2PPrepared) Release() {}

// p2pRec stands for kernel/launch.h's theseus_p2p_xfer (32 bytes).
type p2pRec struct {
	buf, bytes, gen uint64
	dtype, matrix   uint32
}

// PrepareP2P implements device.P2PPreparer with cuda.Backend.PrepareP2P's
// host work and driver calls: the records and the descriptor blob built,
// then on a held thread cuCtxSetCurrent, two cuThreadExchangeStreamCaptureMode,
// cuDeviceGetAttribute, the occupancy query, cuMemAlloc, cuMemsetD8Async,
// cuMemcpyHtoDAsync and cuStreamSynchronize of the control stream, each a
// call into C.
func (b *driverless) PrepareP2P(a *device.P2PArgs) (device.Prepared, error) {
	if a == nil {
		return nil, errors.New("driverless: PrepareP2P without arguments")
	}
	if err := a.Geometry.Check(); err != nil {
		return nil, err
	}
	var recs []p2pRec
	for _, list := range [][]device.P2PPeer{a.Sends, a.Recvs} {
		for _, pr := range list {
			for _, x := range pr.Xfers {
				recs = append(recs, p2pRec{buf: uint64(x.Buf), bytes: uint64(x.Bytes), gen: x.Offer, dtype: uint32(x.DataType)})
			}
		}
	}
	blob := make([]byte, 256+48*(len(a.Sends)+len(a.Recvs)))
	if len(recs) > 0 {
		blob = append(blob, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(recs))), len(recs)*int(unsafe.Sizeof(p2pRec{})))...)
	}
	runtime.LockOSThread()
	const calls = 9
	b.p2p.cgo.Add(calls)
	b.p2p.driver.Add(calls)
	b.p2p.allocs.Add(1)
	b.p2p.syncs.Add(1)
	b.p2p.prepares.Add(1)
	runtime.UnlockOSThread()
	return &driverlessPrepared{Prepared: &driverlessP2PPrepared{blob: blob}, arg: new(driverlessArg)}, nil
}

// RebaseP2P implements device.P2PRebaser with cuda.Backend.RebaseP2P's
// host work: a copy of the launch argument with its buffer offsets moved,
// no driver call.
func (b *driverless) RebaseP2P(pp device.Prepared, send, recv int64) (device.Prepared, error) {
	p, ok := pp.(*driverlessPrepared)
	if !ok {
		return nil, errors.New("driverless: rebase of another backend's launch")
	}
	q := &driverlessPrepared{Prepared: p.Prepared, arg: new(driverlessArg)}
	*q.arg = *p.arg
	q.arg.words[3] += uint64(send)
	q.arg.words[4] += uint64(recv)
	return q, nil
}

// allocForeign allocates n bytes that Lookup finds only through the
// (modelled) driver, as cudaMalloc'd memory.
func (b *driverless) allocForeign(n int64) (device.Ptr, error) {
	p, err := b.Null.Alloc(n)
	if err != nil {
		return 0, err
	}
	r, _ := b.Null.Lookup(p, n)
	b.p2p.foreign.Add(r)
	return p, nil
}

// BenchmarkP2PCallHost is the host time of one repeated point-to-point
// group (GroupStart; Send of 8 bytes to the peer; Recv of 8 bytes from the
// peer; GroupEnd, nccl-tests' sendrecv at 8 B) between 2 ranks as
// goroutines of this process, each on its own stream, with the embedded
// default selection context:
//
//   - backend: "driverless", the CUDA backend's host work without its
//     driver (BenchmarkCallHostCPU's model, with driverless.PrepareP2P) on
//     buffers the backend did not allocate (cudaMalloc'd, as nccl-tests
//     allocates them: every Lookup of them asks the modelled driver);
//     "host", the host backend (its launches run the host engine on the
//     streams' goroutines, beside the callers, on this machine's cores);
//   - variant: "same", the same buffers every call; "shift", the buffers
//     move by one message per call within one allocation, as nccl-tests'
//     startColl moves them (8 B apart over 8192 positions: a sweep to 64
//     KiB, -e 64K), so that no call finds its buffers' plan again.
//
// Metrics, per group call: host-ns/call, the slower rank's wall time in
// its calls (on "host" the enqueue only: each rank waits for its stream
// every p2pBenchBatch calls, outside the timed part); allocs/call (both
// ranks'); on "driverless" prepares/call (PrepareP2P), dev-allocs/call and
// syncs/call (cuMemAlloc and control-stream synchronisations in them),
// cgo-calls/call and driver-calls/call (PrepareP2P, Lookup and the
// launches); on both walks/call and plan-launches/call (Stats().P2P) and
// rebases/call (L3 entries made from another call shape's: Rebases).
//
//	go test ./runtime/theseus -run '^$' -bench BenchmarkP2PCallHost -benchtime 20000x -count 5
func BenchmarkP2PCallHost(b *testing.B) {
	for _, be := range []string{"driverless", "host"} {
		for _, v := range []struct {
			name  string
			steps int
		}{{"same", 1}, {"shift", 8192}} {
			b.Run(be+"/"+v.name, func(b *testing.B) {
				dir := b.TempDir()
				if err := contexts.Materialize(dir); err != nil {
					b.Fatal(err)
				}
				benchP2PCall(b, be, dir, v.steps)
			})
		}
	}
}

// p2pBenchBatch is how many calls BenchmarkP2PCallHost's host ranks
// enqueue before they wait for their streams (below the host stream's
// queue depth).
const p2pBenchBatch = 64

func benchP2PCall(b *testing.B, backend, dir string, steps int) {
	const n, bytes = 2, 8
	var dl *driverless
	cfg := Config{Backend: backend, ContextDir: dir}
	if backend == "driverless" {
		dl = &driverless{Null: devicetest.NewNull()}
		cfg.Options.Backend = dl
	} else {
		cfg.Backend = host.Name
	}
	comms, err := NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	streams := make([]Stream, n)
	send, recv := make([]Ptr, n), make([]Ptr, n)
	for r, c := range comms {
		if streams[r], err = c.NewStream(); err != nil {
			b.Fatal(err)
		}
		for _, p := range []*Ptr{&send[r], &recv[r]} {
			if dl != nil {
				*p, err = dl.allocForeign(int64(steps) * bytes)
			} else {
				*p, err = c.MemAlloc(int64(steps) * bytes)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	pos := make([]int, n)
	call := func(r int) error {
		c := comms[r]
		off := Ptr(pos[r] * bytes)
		pos[r] = (pos[r] + 1) % steps
		c.GroupStart()
		if err := c.Send(send[r]+off, bytes, Uint8, 1-r, streams[r]); err != nil {
			return err
		}
		if err := c.Recv(recv[r]+off, bytes, Uint8, 1-r, streams[r]); err != nil {
			return err
		}
		return c.GroupEnd()
	}
	host := make([]time.Duration, n)
	run := func(calls int, timed bool) error {
		return errors.Join(ranks.Each(n, func(r int) error {
			for done := 0; done < calls; {
				k := calls - done
				if dl == nil {
					k = min(k, p2pBenchBatch)
				}
				t0 := time.Now()
				for range k {
					if err := call(r); err != nil {
						return err
					}
				}
				if timed {
					host[r] += time.Since(t0)
				}
				if err := streams[r].Synchronize(); err != nil {
					return err
				}
				done += k
			}
			return nil
		})...)
	}
	if err := run(100, false); err != nil { // connections, offers, imports
		b.Fatal(err)
	}
	type snap struct {
		walks, plans, rebases             uint64
		prepares, allocs, syncs, cgo, drv int64
	}
	take := func() (s snap) {
		for _, c := range comms {
			st := c.Stats().Executor.P2P
			s.walks += st.Walks
			s.plans += st.PlanLaunches
			s.rebases += st.Rebases
		}
		if dl != nil {
			s.prepares, s.allocs, s.syncs = dl.p2p.prepares.Load(), dl.p2p.allocs.Load(), dl.p2p.syncs.Load()
			s.cgo, s.drv = dl.p2p.cgo.Load(), dl.p2p.driver.Load()
		}
		return s
	}
	var launchCgo, launchDrv int64
	streamCalls := func() (cgo, drv int64) {
		if dl == nil {
			return 0, 0
		}
		for _, s := range streams {
			ds := s.(*driverlessStream)
			cgo += ds.cgo
			drv += ds.driver
		}
		return cgo, drv
	}
	s0 := take()
	c0, d0 := streamCalls()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	err = run(b.N, true)
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		b.Fatal(err)
	}
	s1 := take()
	c1, d1 := streamCalls()
	launchCgo, launchDrv = c1-c0, d1-d0
	calls := float64(n * b.N)
	b.ReportMetric(float64(slices.Max(host).Nanoseconds())/float64(b.N), "host-ns/call")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/calls, "allocs/call")
	b.ReportMetric(float64(s1.walks-s0.walks)/calls, "walks/call")
	b.ReportMetric(float64(s1.plans-s0.plans)/calls, "plan-launches/call")
	b.ReportMetric(float64(s1.rebases-s0.rebases)/calls, "rebases/call")
	if dl != nil {
		b.ReportMetric(float64(s1.prepares-s0.prepares)/calls, "prepares/call")
		b.ReportMetric(float64(s1.allocs-s0.allocs)/calls, "dev-allocs/call")
		b.ReportMetric(float64(s1.syncs-s0.syncs)/calls, "syncs/call")
		b.ReportMetric(float64(s1.cgo-s0.cgo+launchCgo)/calls, "cgo-calls/call")
		b.ReportMetric(float64(s1.drv-s0.drv+launchDrv)/calls, "driver-calls/call")
	}
}
