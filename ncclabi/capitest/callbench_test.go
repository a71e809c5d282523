package capitest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	cbOnce sync.Once
	cbProg string
	cbErr  error
)

// callbench builds testdata/ctest/callbench.c against the library.
func callbench(b *testing.B) (*built, string) {
	bl := setup(b)
	cbOnce.Do(func() {
		cbProg = filepath.Join(bl.dir, "callbench")
		cbErr = run(bl.dir, cc(), "-O2", "-Wall", "-Werror", "-I"+filepath.Join(bl.root, "ncclabi", "include"), "-o", cbProg,
			filepath.Join(bl.root, "ncclabi/testdata/ctest/callbench.c"), "-L"+bl.dir, "-ltheseus_nccl", "-Wl,-rpath,"+bl.dir)
	})
	if cbErr != nil {
		b.Fatal(cbErr)
	}
	return bl, cbProg
}

var resultLine = regexp.MustCompile(`(?m)^RESULT (\S+) (\S+) calls (\d+) wall_ns (\S+) cpu_ns (\S+)$`)

// BenchmarkCAPICall is the host cost of ncclAllReduce, ncclBroadcast and
// ncclAllGather called from C through libtheseus_nccl.so: 2 ranks, 2
// processes, the host backend, 1 KiB per rank, b.N calls per rank in
// batches of 256 (testdata/ctest/callbench.c). "same" passes the same
// buffers every call; "cycle" moves them by one message per call over 8
// positions as nccl-tests does at 4 KiB in a sweep to 32 KiB (executor L3
// map hits), "shift" over 8192 positions as in a sweep to 8 GiB (every call
// an executor L3 setup).
// host-ns/call is the slower rank's wall time in its enqueue loops per call
// (what nccl-tests -C 1 reports), cpu-ns/call the calling threads' CPU time
// per call (mean of the ranks). ns/op includes process start, init and the
// stream waits: ignore it. Compare with
// ncclabi/internal/engine's BenchmarkCallPath (the same requests from Go).
//
//	go test ./ncclabi/capitest -run '^$' -bench CAPICall -benchtime 5000x -count 5
func BenchmarkCAPICall(b *testing.B) {
	for _, coll := range []string{"allreduce", "broadcast", "allgather"} {
		for _, v := range []string{"same", "cycle", "shift"} {
			b.Run(coll+"/"+v, func(b *testing.B) {
				bl, prog := callbench(b)
				env := bl.hostEnv("CALLBENCH_ITERS="+strconv.Itoa(b.N), "CALLBENCH_COLLS="+coll, "CALLBENCH_VARIANTS="+v)
				if p := os.Getenv("CALLBENCH_EXTRA_ENV"); p != "" {
					env = append(env, p)
				}
				res := runProgram(b, prog, nil, bl.dir, 2, env, 5*time.Minute)
				var wall, cpu float64
				for _, r := range res {
					m := resultLine.FindStringSubmatch(r.out)
					if r.err != nil || m == nil {
						b.Fatalf("rank %d: %v\n%s", r.rank, r.err, tail(r.out, 30))
					}
					w, _ := strconv.ParseFloat(m[4], 64)
					c, _ := strconv.ParseFloat(m[5], 64)
					wall = max(wall, w)
					cpu += c / float64(len(res))
				}
				b.ReportMetric(wall, "host-ns/call")
				b.ReportMetric(cpu, "cpu-ns/call")
			})
		}
	}
}

// TestCallBench runs the C driver once with few calls, so that it keeps
// building and running (the figures are BenchmarkCAPICall's).
func TestCallBench(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a C program of 2 processes")
	}
	bl := setup(t)
	prog := filepath.Join(bl.dir, "callbench_t")
	if err := run(bl.dir, cc(), "-O2", "-Wall", "-Werror", "-I"+filepath.Join(bl.root, "ncclabi", "include"), "-o", prog,
		filepath.Join(bl.root, "ncclabi/testdata/ctest/callbench.c"), "-L"+bl.dir, "-ltheseus_nccl", "-Wl,-rpath,"+bl.dir); err != nil {
		t.Fatal(err)
	}
	res := runProgram(t, prog, nil, bl.dir, 2, bl.hostEnv("CALLBENCH_ITERS=300"), 2*time.Minute)
	for _, r := range res {
		if r.err != nil {
			t.Fatalf("rank %d: %v\n%s", r.rank, r.err, tail(r.out, 30))
		}
		var got []string
		for _, m := range resultLine.FindAllStringSubmatch(r.out, -1) {
			got = append(got, fmt.Sprintf("%s/%s %s", m[1], m[2], m[3]))
		}
		var want []string
		for _, c := range []string{"allreduce", "broadcast", "allgather"} {
			for _, v := range []string{"same", "cycle", "shift"} {
				want = append(want, c+"/"+v+" 300")
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rank %d: results (-want +got):\n%s\n%s", r.rank, diff, tail(r.out, 30))
		}
	}
}
