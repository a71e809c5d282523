//go:build linux

package theseus

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/ir"
)

// benchNodesKiB are BenchmarkNodes' sizes (the larger buffer, KiB):
// 32 and 128 MiB, issue 24's range (-theseus.nodes-kib replaces them).
var benchNodesKiB = []int64{32 << 10, 128 << 10}

var nodesKiB = flag.String("theseus.nodes-kib", "", "BenchmarkNodes: the sizes (KiB of the larger buffer), comma-separated")

// BenchmarkNodes runs collectives across 2 simulated nodes of 1 rank each
// (goroutines of this process, each node its own proxy, UCX over TCP on
// loopback unless UCX_TLS is set) on the host backend, and reports busbw
// as nccl-tests defines it (GB/s: allreduce algbw·2(n-1)/n, allgather and
// reduce-scatter algbw·(n-1)/n, algbw = the larger buffer's bytes per
// second). Dividing it by BenchmarkPut's bandwidth
// (runtime/transport/proxy) on the same machine gives the pipeline's
// efficiency: docs/transport.md, "Figures".
func BenchmarkNodes(b *testing.B) {
	if *nodesKiB != "" {
		benchNodesKiB = nil
		for _, f := range strings.Split(*nodesKiB, ",") {
			k, err := strconv.ParseInt(f, 10, 64)
			if err != nil || k <= 0 {
				b.Fatalf("-theseus.nodes-kib %q: want KiB sizes, comma-separated", *nodesKiB)
			}
			benchNodesKiB = append(benchNodesKiB, k)
		}
	}
	needUCX(b)
	const nodes, per = 2, 1
	n := nodes * per
	comms := nodeComms(b, nodes, per, "")
	for _, coll := range []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter} {
		for _, kib := range benchNodesKiB {
			bytes := kib << 10 // the larger buffer
			b.Run(fmt.Sprintf("%v/%dKiB", coll, kib), func(b *testing.B) {
				count := bytes / 4 // float32 elements of the larger buffer
				sendN, recvN := count, count
				switch coll {
				case ir.AllGather:
					sendN = count / int64(n)
				case ir.ReduceScatter:
					recvN = count / int64(n)
				}
				bufs := nodeBufs(b, comms, 4*sendN, 4*recvN)
				call := func() {
					errs := ranks.Each(n, func(r int) error {
						c := comms[r]
						s, d := bufs[r][0], bufs[r][1]
						switch coll {
						case ir.AllReduce:
							return c.AllReduce(s, d, count, Float32, Sum, nil)
						case ir.AllGather:
							return c.AllGather(s, d, sendN, Float32, nil)
						default:
							return c.ReduceScatter(s, d, recvN, Float32, Sum, nil)
						}
					})
					for r, err := range errs {
						if err != nil {
							b.Fatalf("rank %d: %v", r, err)
						}
					}
				}
				call() // warm: connections, registrations, scratch
				b.SetBytes(bytes)
				b.ResetTimer()
				start := time.Now()
				for range b.N {
					call()
				}
				el := time.Since(start)
				algbw := float64(bytes) * float64(b.N) / el.Seconds() / 1e9
				factor := float64(n-1) / float64(n)
				if coll == ir.AllReduce {
					factor *= 2
				}
				b.ReportMetric(algbw*factor, "busbw-GB/s")
				b.Logf("schedule %s", comms[0].LastCall().Name)
			})
		}
	}
}

// BenchmarkNodesSendRecv: 2 simulated nodes of 1 rank, host backend, UCX
// over TCP between them: each rank sends the larger buffer to the other and
// receives the same (one group), through the point-to-point engine's FIFO
// across nodes (docs/p2p.md, "Across nodes"). busbw as nccl-tests'
// sendrecv (= algbw, the bytes one rank sends per second).
func BenchmarkNodesSendRecv(b *testing.B) {
	needUCX(b)
	comms := nodeComms(b, 2, 1, "")
	for _, kib := range []int64{64, 4096, 32768} {
		bytes := kib << 10
		b.Run(fmt.Sprintf("%dKiB", kib), func(b *testing.B) {
			count := bytes / 4
			bufs := nodeBufs(b, comms, bytes, bytes)
			call := func() {
				errs := ranks.Each(2, func(r int) error {
					c := comms[r]
					c.GroupStart()
					if err := c.Send(bufs[r][0], count, Float32, 1-r, nil); err != nil {
						return err
					}
					if err := c.Recv(bufs[r][1], count, Float32, 1-r, nil); err != nil {
						return err
					}
					return c.GroupEnd()
				})
				for r, err := range errs {
					if err != nil {
						b.Fatalf("rank %d: %v", r, err)
					}
				}
			}
			call()
			b.SetBytes(bytes)
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				call()
			}
			b.ReportMetric(float64(bytes)*float64(b.N)/time.Since(start).Seconds()/1e9, "busbw-GB/s")
			b.Logf("rank 0: %+v", comms[0].Stats().Executor.P2P)
		})
	}
}

// nodeBufs allocates every rank's send and receive buffers (sendBytes,
// recvBytes), freed when the benchmark ends.
func nodeBufs(b *testing.B, comms []*Comm, sendBytes, recvBytes int64) [][2]Ptr {
	b.Helper()
	bufs := make([][2]Ptr, len(comms))
	for r, c := range comms {
		s, err := c.MemAlloc(sendBytes)
		if err != nil {
			b.Fatal(err)
		}
		d, err := c.MemAlloc(recvBytes)
		if err != nil {
			b.Fatal(err)
		}
		bufs[r] = [2]Ptr{s, d}
		b.Cleanup(func() {
			c.MemFree(s)
			c.MemFree(d)
		})
	}
	return bufs
}
