package proxy

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
)

// Benchmarks between this process (rank 0) and a peer process (rank 1,
// rankMain's "bench" mode), over UCX_TLS=tcp on loopback unless UCX_TLS is
// set (UCX_TLS=all: UCX's defaults, shared memory allowed). Figures:
// docs/transport.md.

type benchPair struct {
	*shared
	ch uint16
}

const benchData = 64<<20 + 4096

func startBenchPeer(b *testing.B) *benchPair { return startBenchPeerOpts(b, ConnOptions{}) }

// startBenchPeerOpts is startBenchPeer with rank 0's connection options.
func startBenchPeerOpts(b *testing.B, o ConnOptions) *benchPair {
	b.Helper()
	needUCX(b)
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=1/2/bench/%s", rankEnv, hex.EncodeToString(id[:])), "MSCCLPP_SOCKET_IFNAME=lo", "THESEUS_TIMEOUT=600000")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	boot, err := bootstrap.Init(ctx, id, 0, 2, bootstrap.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	bp, err := benchSetup(ctx, p, boot, 0, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		p.Close()
		boot.Close()
		// Over TCP the peer sees the close at once; over shared memory UCX
		// reports a gone peer only through its keepalive, if at all.
		cmd.Process.Kill()
		cmd.Wait()
		bp.data.Free()
		bp.sem.Free()
	})
	return bp
}

// benchSetup: channel 0 signals the peer's word 0.
func benchSetup(ctx context.Context, p *Proxy, boot *bootstrap.Bootstrap, rank int, o ConnOptions) (*benchPair, error) {
	sh, err := connectShared(ctx, p, boot, rank, []int{1 - rank}, o, benchData)
	if err != nil {
		return nil, err
	}
	bp := &benchPair{shared: sh}
	bp.ch, err = sh.c.AddChannel(1-rank, 1, 0)
	return bp, err
}

// benchPeer echoes: each signal from rank 0 is answered with an 8-byte put
// and a signal, until rank 0 goes away.
func (r *rankEnvT) benchPeer(ctx context.Context) error {
	bp, err := benchSetup(ctx, r.p, r.boot, r.rank, ConnOptions{})
	if err != nil {
		return err
	}
	sem := (*uint64)(bp.sem.Ptr)
	for k := uint64(1); ; k++ {
		for {
			err := bp.c.WaitSignal(sem, k, 0)
			if err == nil {
				break
			}
			if bp.c.Err() == nil && isTimeout(err) {
				continue // a long bandwidth run: no signals meanwhile
			}
			os.Exit(0) // rank 0 is done
		}
		if _, err := bp.c.Post(Desc{Op: OpPut | OpSignal, Channel: bp.ch, Size: 8, SrcOff: 64, DstOff: 64}); err != nil {
			os.Exit(0)
		}
	}
}

func isTimeout(err error) bool {
	var t errTimeout
	return errors.As(err, &t)
}

// BenchmarkPut: b.N puts of one size back to back and one flush, all
// timed: bytes per second delivered.
func BenchmarkPut(b *testing.B) {
	bp := startBenchPeer(b)
	b.Logf("transport: %s", bp.c.Transports(1))
	for _, size := range []int{8 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for range b.N {
				if err := bp.c.Put(bp.ch, 0, 0, 0, 0, uint32(size)); err != nil {
					b.Fatal(err)
				}
			}
			if err := bp.c.Flush(bp.ch); err != nil { // inside the timing
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPutSignalLatency: an 8-byte put and a signal to the peer, which
// answers with the same; ns/op is the round trip, us/oneway half of it.
func BenchmarkPutSignalLatency(b *testing.B) {
	bp := startBenchPeer(b)
	b.Logf("transport: %s", bp.c.Transports(1))
	sem := (*uint64)(bp.sem.Ptr)
	k := *sem
	start := time.Now()
	n := 0
	for b.Loop() {
		k++
		if _, err := bp.c.Post(Desc{Op: OpPut | OpSignal, Channel: bp.ch, Size: 8}); err != nil {
			b.Fatal(err)
		}
		if err := bp.c.WaitSignal(sem, k, 1); err != nil {
			b.Fatal(err)
		}
		n++
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(n)/2, "us/oneway")
}

// BenchmarkPutStaged is BenchmarkPut from a "device" region on the staged
// path (host memory standing in for device memory, a memmove Stager), with
// the staging buffer of two halves (2 MiB, as before) and the default
// (16 pieces), each with one synchronous copy per put and with the copies
// of a round batched (BatchStager): how much of the wire the staging
// keeps busy.
func BenchmarkPutStaged(b *testing.B) {
	for _, stage := range []int{2 << 20, DefaultStageBytes} {
		for _, batch := range []bool{false, true} {
			b.Run(fmt.Sprintf("stage%dMiB/batch=%v", stage>>20, batch), func(b *testing.B) { benchPutStaged(b, stage, batch) })
		}
	}
}

func benchPutStaged(b *testing.B, stage int, batch bool) {
	dev := alloc(b, benchData)
	var st Stager = &memmoveStager{dev: []HostBlock{dev}}
	if batch {
		st = &batchStager{memmoveStager: memmoveStager{dev: []HostBlock{dev}}}
	}
	bp := startBenchPeerOpts(b, ConnOptions{Stager: st, StageBytes: stage})
	if bp.c.p.CUDA() {
		b.Skip("this UCX build handles CUDA memory: device regions go direct")
	}
	reg, err := bp.c.Register(Mem{Addr: uintptr(dev.Ptr), Size: dev.Size, Kind: DeviceMem, SourceOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for range b.N {
				if err := bp.c.Put(bp.ch, reg.ID, 0, 0, 0, uint32(size)); err != nil {
					b.Fatal(err)
				}
			}
			if err := bp.c.Flush(bp.ch); err != nil {
				b.Fatal(err)
			}
		})
	}
}
