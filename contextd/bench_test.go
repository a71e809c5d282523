package contextd

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/contextd/api"
)

// cluster starts n in-process daemons that form a cluster (n = 1: alone).
func cluster(b testing.TB, n int) []*Daemon {
	dir := b.TempDir()
	var routes []string
	var ports []int
	for range n {
		p := freePort(b)
		ports = append(ports, p)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var ds []*Daemon
	for i := range n {
		cfg := Config{DataDir: filepath.Join(dir, fmt.Sprint(i), "data"), ContextsDir: filepath.Join(dir, fmt.Sprint(i), "contexts"),
			Name: fmt.Sprintf("n%d", i), Margin: -1}
		if n > 1 {
			cfg.ClusterListen, cfg.Routes = fmt.Sprintf("127.0.0.1:%d", ports[i]), routes
		}
		d, err := Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		ds = append(ds, d)
	}
	for _, d := range ds {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err := d.Ready(ctx)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := ds[0].Attr(context.Background(), "bench", api.AttrRequest{Name: "x", Origin: "exo", Type: "int", ValidAfter: "always"}); err != nil {
		b.Fatal(err)
	}
	return ds
}

// BenchmarkContextd measures, on 1 node and on a 3-node cluster on
// loopback (every write fsynced: JetStream SyncAlways, the materialiser's
// appends and checkpoints):
//
//   - visible: one set through node i%n, from the request until every
//     node has applied it (fsynced into its context directory); p50 and
//     p99 in milliseconds over b.N publications;
//   - set: sets from 16 concurrent clients spread over the nodes, in sets
//     per second (each acknowledged once in the log and applied on its
//     node).
//
// docs/contextd.md records the figures.
func BenchmarkContextd(b *testing.B) {
	for _, n := range []int{1, 3} {
		ds := cluster(b, n)
		ctx := context.Background()
		b.Run(fmt.Sprintf("nodes=%d/visible", n), func(b *testing.B) {
			lat := make([]float64, 0, b.N)
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				p, err := ds[i%n].Value(ctx, "bench", api.ValueRequest{Name: "x", Value: fmt.Sprint(i), ValidAfter: "always"})
				if err != nil {
					b.Fatal(err)
				}
				for _, d := range ds {
					if err := d.WaitApplied(ctx, p.Seq); err != nil {
						b.Fatal(err)
					}
				}
				lat = append(lat, float64(time.Since(t0).Microseconds())/1e3)
			}
			slices.Sort(lat)
			b.ReportMetric(lat[len(lat)/2], "p50-ms")
			b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "p99-ms")
		})
		b.Run(fmt.Sprintf("nodes=%d/set", n), func(b *testing.B) {
			const clients = 16
			var wg sync.WaitGroup
			next := make(chan int)
			t0 := time.Now()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						if _, err := ds[c%n].Value(ctx, "bench", api.ValueRequest{Name: "x", Value: fmt.Sprint(i), ValidAfter: "always"}); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			for i := 0; b.Loop(); i++ {
				next <- i
			}
			close(next)
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "sets/s")
		})
	}
}
