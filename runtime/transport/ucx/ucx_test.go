package ucx

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
)

// helperEnv makes the test binary a helper process (TestMain) that loads
// UCX and prints the result: Load is once per process, so a different
// THESEUS_UCX_LIB needs a process of its own.
const helperEnv = "THESEUS_UCX_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "load" {
		_, err := NewContext(Options{})
		if err != nil {
			os.Stdout.WriteString("ERR " + err.Error() + "\n")
			os.Exit(3)
		}
		os.Stdout.WriteString("OK\n")
		os.Exit(0)
	}
	// Tests here use TCP unless they say otherwise.
	if _, ok := os.LookupEnv("UCX_TLS"); !ok {
		os.Setenv("UCX_TLS", "tcp")
	}
	os.Exit(m.Run())
}

func needUCX(t testing.TB) {
	t.Helper()
	if err := Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
}

func mmap(t testing.TB, n int) []byte {
	t.Helper()
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(b) })
	return b
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// TestLoadMissing: a THESEUS_UCX_LIB that does not exist gives the error
// that names the package and the variable.
func TestLoadMissing(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=load", "THESEUS_UCX_LIB=/nonexistent/libucp.so.0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	for _, want := range []string{"/nonexistent/libucp.so.0", "libucx0", "THESEUS_UCX_LIB"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error %q does not name %q", out, want)
		}
	}
}

func TestGoSignalsSurviveUCX(t *testing.T) {
	needUCX(t)
	c, err := NewContext(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// UCX installs SIGSEGV handlers unless told not to; the Go runtime's
	// must stay, or a nil dereference would crash instead of panicking.
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("nil dereference did not panic")
		}
	}()
	var p *int
	_ = *p
}

type pair struct {
	c      *Context
	w1, w2 *Worker
	ep     *Endpoint // w1 -> w2
	dst    []byte
	mem    *Mem
	rk     *RKey
}

// newPair makes two workers of one context, registers size bytes of w2's
// side and gives w1 an endpoint and the key.
func newPair(t *testing.T, size int) *pair {
	t.Helper()
	needUCX(t)
	c, err := NewContext(Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{c: c}
	if p.w1, err = c.NewWorker(); err != nil {
		t.Fatal(err)
	}
	if p.w2, err = c.NewWorker(); err != nil {
		t.Fatal(err)
	}
	p.dst = mmap(t, size)
	if p.mem, err = c.Map(addr(p.dst), size, Host); err != nil {
		t.Fatal(err)
	}
	key, err := p.mem.PackRKey()
	if err != nil {
		t.Fatal(err)
	}
	if p.ep, err = p.w1.Connect(p.w2.Address(), "test"); err != nil {
		t.Fatal(err)
	}
	if p.rk, err = p.ep.UnpackRKey(key); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.w1.Close()
		p.mem.Unmap()
		p.w2.Close()
		c.Close()
	})
	return p
}

// wait progresses both workers until the request completes (the target of
// a TCP put applies it in its own progress).
func (p *pair) wait(t *testing.T, r *Request) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p.w2.Progress()
		p.w1.Progress()
		done, err := r.Test()
		if done {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatal("request did not complete in 20 s")
		}
	}
}

func TestPutIncFlush(t *testing.T) {
	const size = 1 << 20
	p := newPair(t, size)
	src := mmap(t, size)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	base := uint64(addr(p.dst))
	// An unaligned put, then a fenced increment of the last word.
	if err := p.ep.Put(addr(src)+3, 1000, base+5, p.rk, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.w1.Fence(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := p.ep.Inc(base+size-8, p.rk); err != nil {
			t.Fatal(err)
		}
	}
	r, err := p.w1.Flush() // the worker's flush: every endpoint
	if err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, r); err != nil {
		t.Fatal(err)
	}
	if n := p.ep.InFlight(); n != 0 {
		t.Fatalf("%d operations in flight after the flush", n)
	}
	if d := cmp.Diff(src[3:1003], p.dst[5:1005]); d != "" {
		t.Fatalf("put data (-want +got):\n%s", d)
	}
	if p.dst[4] != 0 || p.dst[1005] != 0 {
		t.Fatalf("put wrote outside its range: %d %d", p.dst[4], p.dst[1005])
	}
	if got := *(*uint64)(unsafe.Pointer(&p.dst[size-8])); got != 3 {
		t.Fatalf("counter = %d, want 3", got)
	}
	lanes := p.ep.Lanes()
	if len(lanes) == 0 || lanes[0].Transport != "tcp" {
		t.Fatalf("lanes %v, want tcp (UCX_TLS=tcp)", lanes)
	}
	if p.ep.Err() != nil {
		t.Fatal(p.ep.Err())
	}
}

// TestUnreachable: an endpoint to a worker that no longer exists fails its
// flush with UCX's own status text, within the wait's deadline.
func TestUnreachable(t *testing.T) {
	needUCX(t)
	c, err := NewContext(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w1, err := c.NewWorker()
	if err != nil {
		t.Fatal(err)
	}
	defer w1.Close()
	gone, err := c.NewWorker()
	if err != nil {
		t.Fatal(err)
	}
	a := gone.Address()
	gone.Close()
	dst := mmap(t, 4096)
	w2, err := c.NewWorker() // a live worker only to have a key of the right format
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	m, err := c.Map(addr(dst), 4096, Host)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	key, _ := m.PackRKey()
	// UCX may refuse at once (TCP: connection refused) or only at the
	// first operations and their flush (a host that does not answer).
	got := func() error {
		ep, err := w1.Connect(a, "gone")
		if err != nil {
			return err
		}
		rk, err := ep.UnpackRKey(key)
		if err != nil {
			return err
		}
		src := mmap(t, 64)
		if err := ep.Put(addr(src), 64, uint64(addr(dst)), rk, nil); err != nil {
			return err
		}
		r, err := ep.Flush()
		if err != nil {
			return err
		}
		start := time.Now()
		err = r.Wait(time.Now().Add(10 * time.Second))
		if time.Since(start) > 11*time.Second {
			t.Errorf("flush took %v", time.Since(start))
		}
		return err
	}()
	var ue *Error
	if !errors.As(got, &ue) || ue.Status == OK {
		t.Fatalf("connect/put/flush to a closed worker: %v, want a UCX error", got)
	}
	if !strings.Contains(got.Error(), ue.Status.String()) || ue.Status.String() == "" {
		t.Fatalf("error %q lacks UCX's status text", got)
	}
	t.Logf("error: %v", got)
}

func TestParseLanes(t *testing.T) {
	info := `#
# UCP endpoint
#
#               peer: <no debug data>
#                 lane[0]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] am am_bw#0 keepalive wireup
#                 lane[1]:  3:rc_mlx5/mlx5_0:1.0 md[2]     -> md[2]/ib/sysdev[255] rma_bw#0 amo
#
#                  rma_bw: mds [2]
`
	got := parseLanes(info)
	want := []Lane{
		{Transport: "tcp", Device: "lo", Uses: []string{"am", "am_bw", "keepalive", "wireup"}},
		{Transport: "rc_mlx5", Device: "mlx5_0:1", Uses: []string{"rma_bw", "amo"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("lanes (-want +got):\n%s", d)
	}
}
