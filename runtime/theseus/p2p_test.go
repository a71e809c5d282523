//go:build linux

package theseus

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// A point-to-point pattern: for rank r of n, its group's ops in call order
// (their counts and datatypes; buffers are the runner's).
type p2pSpec struct {
	recv  bool
	peer  int
	count int64
	dt    DataType
}

type p2pPattern struct {
	name string
	ops  func(r, n int) []p2pSpec
	// ungrouped runs each op as its own call (the pattern orders them so
	// that this cannot deadlock).
	ungrouped bool
	// allreduce puts an AllReduce of 1000 floats in the group first.
	allreduce bool
}

func both(peerS, peerR int, count int64, dt DataType) []p2pSpec {
	return []p2pSpec{{peer: peerS, count: count, dt: dt}, {recv: true, peer: peerR, count: count, dt: dt}}
}

// p2pPatterns are every pattern of issue 22's list: ring, chain, pairs,
// all-pairs with a random matrix (zeros included), sends to oneself, zero
// counts, several sends to the same peer matched in order, a hypercube, a
// collective and point-to-point in one group, ungrouped calls, and a
// datatype sample.
func p2pPatterns() []p2pPattern {
	return []p2pPattern{
		{name: "ring", ops: func(r, n int) []p2pSpec { return both((r+1)%n, (r+n-1)%n, 70001, Float32) }},
		{name: "chain", ops: func(r, n int) []p2pSpec {
			var o []p2pSpec
			if r > 0 {
				o = append(o, p2pSpec{recv: true, peer: r - 1, count: 300001, dt: Uint8})
			}
			if r < n-1 {
				o = append(o, p2pSpec{peer: r + 1, count: 300001, dt: Uint8})
			}
			return o
		}},
		{name: "pairs", ops: func(r, n int) []p2pSpec {
			if q := r ^ 1; q < n {
				return both(q, q, 12345, Float64)
			}
			return nil
		}},
		{name: "all-pairs", ops: func(r, n int) []p2pSpec {
			rng := rand.New(rand.NewSource(11))
			m := make([]int64, n*n)
			for i := range m {
				if rng.Intn(3) != 0 {
					m[i] = int64(rng.Intn(40000))
				}
			}
			var o []p2pSpec
			for k := range n {
				q := (r + k) % n
				o = append(o, p2pSpec{peer: q, count: m[r*n+q], dt: Bfloat16}, p2pSpec{recv: true, peer: q, count: m[q*n+r], dt: Bfloat16})
			}
			return o
		}},
		{name: "self", ops: func(r, n int) []p2pSpec { return both(r, r, 5003, Int32) }},
		{name: "zero counts", ops: func(r, n int) []p2pSpec {
			o := both((r+1)%n, (r+n-1)%n, 0, Float16)
			o = append(o, both((r+1)%n, (r+n-1)%n, 17, Float16)...)
			return append(o, both((r+2)%n, (r+n-2)%n, 0, Float16)...)
		}},
		{name: "same peer thrice", ops: func(r, n int) []p2pSpec {
			var o []p2pSpec
			for k, c := range []int64{100, 200000, 3} {
				o = append(o, p2pSpec{peer: (r + 1) % n, count: c, dt: Int8})
				if k == 1 {
					o = append(o, p2pSpec{recv: true, peer: (r + n - 1) % n, count: 100, dt: Int8})
				}
			}
			return append(o, p2pSpec{recv: true, peer: (r + n - 1) % n, count: 200000, dt: Int8}, p2pSpec{recv: true, peer: (r + n - 1) % n, count: 3, dt: Int8})
		}},
		{name: "hypercube", ops: func(r, n int) []p2pSpec {
			var o []p2pSpec
			for mask := 1; mask < n; mask <<= 1 {
				if q := r ^ mask; q < n {
					o = append(o, both(q, q, int64(1000*mask+1), Float8e4m3)...)
				}
			}
			return o
		}},
		{name: "collective in the group", allreduce: true, ops: func(r, n int) []p2pSpec { return both((r+1)%n, (r+n-1)%n, 999, Int64) }},
		{name: "ungrouped", ungrouped: true, ops: func(r, n int) []p2pSpec {
			q := r ^ 1
			if q >= n {
				return nil
			}
			if r%2 == 0 {
				return both(q, q, 60000, Uint32)
			}
			return []p2pSpec{{recv: true, peer: q, count: 60000, dt: Uint32}, {peer: q, count: 60000, dt: Uint32}}
		}},
		{name: "datatypes", ops: func(r, n int) []p2pSpec {
			var o []p2pSpec
			for i, dt := range []DataType{Int8, Uint64, Float16, Float32, Float8e5m2} {
				o = append(o, both((r+1)%n, (r+n-1)%n, int64(1000+i*7), dt)...)
			}
			return o
		}},
	}
}

// p2pByte is byte i of the k-th transfer from src to dst in round rep.
func p2pByte(src, dst, k, rep int, i int64) byte {
	return byte(int64(src*37+dst*11+k*5+rep*3) + i*7 + i>>8)
}

// runPattern runs pattern p rep times on c (buffers at odd offsets: any
// alignment) and checks every received byte. Buffers are allocated once,
// so repeats launch from plans (and zero-copy after the receivers'
// offers).
func runPattern(c *Comm, p p2pPattern, reps int) error {
	r, n := c.Rank(), c.NRanks()
	specs := p.ops(r, n)
	type buf struct {
		p   Ptr
		b   []byte
		k   int // the op's index among those of its pair and direction
		len int64
	}
	bufs := make([]buf, len(specs))
	seen := map[[2]int]int{}
	var free []Ptr
	defer func() {
		for _, x := range free {
			c.MemFree(x)
		}
	}()
	for i, s := range specs {
		nb := s.count * int64(s.dt.Size())
		base, err := c.MemAlloc(nb + 64)
		if err != nil {
			return err
		}
		free = append(free, base)
		off := int64(1 + 2*i%13)
		b, _ := c.HostBytes(base+Ptr(off), nb)
		key := [2]int{s.peer, 0}
		if s.recv {
			key[1] = 1
		}
		bufs[i] = buf{p: base + Ptr(off), b: b, k: seen[key], len: nb}
		seen[key]++
	}
	var arS, arR Ptr
	if p.allreduce {
		var err error
		if arS, err = c.MemAlloc(4000); err != nil {
			return err
		}
		if arR, err = c.MemAlloc(4000); err != nil {
			return err
		}
		free = append(free, arS, arR)
		in, _ := c.HostBytes(arS, 4000)
		for i := range 1000 {
			*(*float32)(unsafe.Pointer(&in[4*i])) = float32(r + i)
		}
	}
	for rep := range reps {
		for i, s := range specs {
			if !s.recv {
				for j := range bufs[i].b {
					bufs[i].b[j] = p2pByte(r, s.peer, bufs[i].k, rep, int64(j))
				}
			} else {
				clear(bufs[i].b)
			}
		}
		if !p.ungrouped {
			c.GroupStart()
		}
		if p.allreduce {
			if err := c.AllReduce(arS, arR, 1000, Float32, Sum, nil); err != nil {
				return fmt.Errorf("%s: allreduce: %w", p.name, err)
			}
		}
		for i, s := range specs {
			var err error
			if s.recv {
				err = c.Recv(bufs[i].p, s.count, s.dt, s.peer, nil)
			} else {
				err = c.Send(bufs[i].p, s.count, s.dt, s.peer, nil)
			}
			if err != nil {
				return fmt.Errorf("%s: op %d: %w", p.name, i, err)
			}
		}
		if !p.ungrouped {
			if err := c.GroupEnd(); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
		}
		for i, s := range specs {
			if !s.recv {
				continue
			}
			for j, v := range bufs[i].b {
				if want := p2pByte(s.peer, r, bufs[i].k, rep, int64(j)); v != want {
					return fmt.Errorf("%s rep %d: receive %d from rank %d: byte %d of %d = %d, want %d", p.name, rep, bufs[i].k, s.peer, j, bufs[i].len, v, want)
				}
			}
		}
		if p.allreduce {
			out, _ := c.HostBytes(arR, 4000)
			for i := range 1000 {
				want := float32(n*i + n*(n-1)/2)
				if got := *(*float32)(unsafe.Pointer(&out[4*i])); got != want {
					return fmt.Errorf("%s: allreduce [%d] = %v, want %v", p.name, i, got, want)
				}
			}
		}
	}
	return nil
}

// p2pMatrices are AlltoAllv matrices (elements): random with empty cells,
// skewed (4 hot experts receive most, as MoE routing does), empty, and a
// single hot row.
func p2pMatrices(n int) map[string][]int64 {
	rng := rand.New(rand.NewSource(int64(n)))
	out := map[string][]int64{}
	rnd, skew, empty, hot := make([]int64, n*n), make([]int64, n*n), make([]int64, n*n), make([]int64, n*n)
	for i := range n {
		for j := range n {
			if rng.Intn(4) != 0 {
				rnd[i*n+j] = int64(rng.Intn(9000))
			}
			skew[i*n+j] = 10
			if j < 4 {
				skew[i*n+j] = 20000 + int64(rng.Intn(500))
			}
			if i == n/2 {
				hot[i*n+j] = 30000 + int64(j)
			}
		}
	}
	out["random"], out["skewed"], out["empty"], out["single hot row"] = rnd, skew, empty, hot
	return out
}

// runAlltoAllv runs one AlltoAllv of matrix m (element type dt) on c and
// checks what it received.
func runAlltoAllv(c *Comm, m []int64, dt DataType, reps int) error {
	r, n := c.Rank(), c.NRanks()
	es := int64(dt.Size())
	var sendN, recvN int64
	for j := range n {
		sendN += m[r*n+j]
		recvN += m[j*n+r]
	}
	sb, err := c.MemAlloc(sendN*es + 16)
	if err != nil {
		return err
	}
	defer c.MemFree(sb)
	rb, err := c.MemAlloc(recvN*es + 16)
	if err != nil {
		return err
	}
	defer c.MemFree(rb)
	gpu, err := c.MemAlloc(int64(8 * n * n))
	if err != nil {
		return err
	}
	defer c.MemFree(gpu)
	gm, _ := c.HostBytes(gpu, int64(8*n*n))
	for i, v := range m {
		*(*uint64)(unsafe.Pointer(&gm[8*i])) = uint64(v)
	}
	send, recv := sb+3, rb+5
	in, _ := c.HostBytes(send, sendN*es)
	out, _ := c.HostBytes(recv, recvN*es)
	for rep := range reps {
		off := int64(0)
		for j := range n {
			for k := int64(0); k < m[r*n+j]*es; k++ {
				in[off+k] = p2pByte(r, j, 0, rep, k)
			}
			off += m[r*n+j] * es
		}
		clear(out)
		if err := c.AlltoAllv(send, recv, m, gpu, dt, nil); err != nil {
			return err
		}
		off = 0
		for i := range n {
			for k := int64(0); k < m[i*n+r]*es; k++ {
				if want := p2pByte(i, r, 0, rep, k); out[off+k] != want {
					return fmt.Errorf("rep %d: from rank %d: byte %d = %d, want %d", rep, i, k, out[off+k], want)
				}
			}
			off += m[i*n+r] * es
		}
	}
	return nil
}

// runP2PSuite runs every pattern and matrix on c (one rank of it), and
// returns the first failure.
func runP2PSuite(c *Comm) error {
	for _, p := range p2pPatterns() {
		if err := runPattern(c, p, 2); err != nil {
			return err
		}
	}
	for _, name := range []string{"random", "skewed", "empty", "single hot row"} {
		if err := runAlltoAllv(c, p2pMatrices(c.NRanks())[name], Float16, 2); err != nil {
			return fmt.Errorf("alltoallv %s: %w", name, err)
		}
	}
	return nil
}

// TestP2PPatterns: every pattern and AlltoAllv matrix on 2, 4 and 8
// in-process ranks, every byte checked, twice each (the repeat from plans).
func TestP2PPatterns(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms, _ := localComms(t, n, nil)
			for r, err := range onEach(comms, runP2PSuite) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r, c := range comms {
				st := c.Stats().Executor.P2P
				if st.Launches == 0 || st.Connects == 0 {
					t.Errorf("rank %d: %+v", r, st)
				}
			}
		})
	}
}

// A receive whose count differs from its send's: ncclInvalidUsage naming
// the pair, within the timeout, and nothing written past the receive. The
// sender fails too when it still had to wait for the receiver: with the
// mismatch, or with RemoteError naming the receiver whose launch failed; a
// send that fit the FIFO has completed.
func TestP2PMismatch(t *testing.T) {
	comms, _ := localComms(t, 2, func(c *Config) { c.Options.Timeout = 3 * time.Second })
	start := time.Now()
	errs := onEach(comms, func(c *Comm) error {
		buf, _ := c.MemAlloc(1 << 20)
		count := int64(200000)
		if c.Rank() == 1 {
			count = 100000
		}
		c.GroupStart()
		if c.Rank() == 0 {
			c.Send(buf, count, Float32, 1, nil)
		} else {
			c.Recv(buf, count, Float32, 0, nil)
		}
		err := c.GroupEnd()
		if c.Rank() == 1 {
			tail, _ := c.HostBytes(buf+400000, 400000)
			if strings.Trim(string(tail), "\x00") != "" {
				return errors.New("bytes written past the receive")
			}
		}
		return err
	})
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v", el)
	}
	for r, err := range errs {
		var e *Error
		if r == 0 && (err == nil || CodeOf(err) == RemoteError && errors.As(err, &e) && len(e.Peers) == 1 && e.Peers[0] == 1) {
			continue
		}
		if CodeOf(err) != InvalidUsage {
			t.Errorf("rank %d: %v, want ncclInvalidUsage", r, err)
			continue
		}
		if !errors.As(err, &e) || len(e.Peers) != 1 || e.Peers[0] != 1-r || !strings.Contains(err.Error(), "disagree") {
			t.Errorf("rank %d: %v does not name the pair", r, err)
		}
	}
}

// Bad calls are refused with the reason before anything is set up.
func TestP2PBadCalls(t *testing.T) {
	comms, _ := localComms(t, 2, nil)
	c := comms[0]
	buf, _ := c.MemAlloc(4096)
	gpu, _ := c.MemAlloc(64)
	for _, tc := range []struct {
		name string
		code Code
		msg  string
		err  error
	}{
		{"peer out of range", InvalidArgument, "peer 2 out of range", c.Send(buf, 1, Float32, 2, nil)},
		{"negative count", InvalidArgument, "count -1", c.Recv(buf, -1, Float32, 1, nil)},
		{"null buffer", InvalidArgument, "NULL", c.Send(0, 1, Float32, 1, nil)},
		{"buffer too small", InvalidArgument, "too few for 8192 bytes", c.Send(buf, 2048, Float32, 1, nil)},
		{"bad datatype", InvalidArgument, "datatype 12", c.Send(buf, 1, 12, 1, nil)},
		{"self unpaired", InvalidUsage, "must pair up", c.Send(buf, 1, Float32, 0, nil)},
		{"matrix size", InvalidArgument, "holds 3 counts", c.AlltoAllv(buf, buf, []int64{1, 2, 3}, gpu, Int8, nil)},
		{"null gpu matrix", InvalidArgument, "cntMatrixGpu is NULL", c.AlltoAllv(buf, buf, []int64{1, 1, 1, 1}, 0, Int8, nil)},
		{"negative matrix count", InvalidArgument, "negative", c.AlltoAllv(buf, buf, []int64{1, -1, 1, 1}, gpu, Int8, nil)},
		{"overflowing matrix", InvalidArgument, "count overflow", c.AlltoAllv(buf, buf, []int64{1 << 62, 1 << 62, 1, 1}, gpu, Int8, nil)},
		{"matrix buffer too small", InvalidArgument, "too few", c.AlltoAllv(buf, buf, []int64{4000, 4000, 1, 1}, gpu, Int8, nil)},
	} {
		if CodeOf(tc.err) != tc.code || !strings.Contains(fmt.Sprint(tc.err), tc.msg) {
			t.Errorf("%s: %v, want %v containing %q", tc.name, tc.err, tc.code, tc.msg)
		}
	}
	c.GroupStart()
	c.Send(buf, 1, Float32, 1, nil)
	c.Send(buf, 1, Float32, 7, nil)
	if err := c.GroupEnd(); CodeOf(err) != InvalidArgument {
		t.Errorf("a group with a bad call: %v, want the call's error", err)
	}
	if st := c.Stats().Executor.P2P; st.Walks != 0 {
		t.Errorf("bad calls walked: %+v", st)
	}
}

// A point-to-point phase between two ranks while the others issue nothing
// does not move the selector: every rank takes its epochs at the same
// collective requests and selects the same schedules, also when the
// context changes meanwhile.
func TestP2PPhaseKeepsSelectorInStep(t *testing.T) {
	const n = 4
	comms, dir := localComms(t, n, func(c *Config) { c.Options.CheckPeriod = 3 })
	ar := func() []error {
		return onEach(comms, func(c *Comm) error {
			b, _ := c.MemAlloc(4 << 20)
			defer c.MemFree(b)
			for range 4 {
				if err := c.AllReduce(b, b, 1<<20, Float32, Sum, nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, err := range ar() {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range onEach(comms, func(c *Comm) error {
		if c.Rank() > 1 {
			return nil
		}
		p := p2pPatterns()[2] // pairs: ranks 0 and 1 only here
		return runPattern(c, p2pPattern{name: "pairs", ops: func(r, _ int) []p2pSpec { return p.ops(r, 2) }}, 20)
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := PublishValue(dir, "slow_rank", 1); err != nil {
		t.Fatal(err)
	}
	for _, err := range ar() {
		if err != nil {
			t.Fatal(err)
		}
	}
	st0 := comms[0].Stats().Selector
	for r, c := range comms {
		st := c.Stats().Selector
		if st.Epochs != st0.Epochs || st.Requests != st0.Requests || c.LastCall().Schedule != comms[0].LastCall().Schedule {
			t.Errorf("rank %d: %d epochs, %d requests, schedule %d; rank 0: %d, %d, %d", r, st.Epochs, st.Requests, c.LastCall().Schedule,
				st0.Epochs, st0.Requests, comms[0].LastCall().Schedule)
		}
	}
}

// A p2p entry published while the job runs is taken up at the next epoch
// (the hot swap): the pairs reconnect with its geometry, and the data stays
// right.
func TestP2PHotSwap(t *testing.T) {
	const n = 2
	comms, dir := localComms(t, n, func(c *Config) { c.Options.CheckPeriod = 1 })
	ring := p2pPatterns()[0]
	for _, err := range onEach(comms, func(c *Comm) error { return runPattern(c, ring, 2) }) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ch, id := comms[0].P2PInfo(); id != -1 || ch != 16 {
		t.Fatalf("before: entry %d, %d channels; want the built-in 16", id, ch)
	}
	if err := appendLine(dir, `{"gen":"p2p","collective":"sendrecv","chunk_bytes":65536,"channels":3,"slots":2,"preference":"1","name":"narrow"}`); err != nil {
		t.Fatal(err)
	}
	for _, err := range onEach(comms, func(c *Comm) error {
		b, _ := c.MemAlloc(64)
		defer c.MemFree(b)
		for range 2 { // check period 1: the second request is an epoch
			if err := c.AllReduce(b, b, 16, Float32, Sum, nil); err != nil {
				return err
			}
		}
		return runPattern(c, ring, 2)
	}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range comms {
		if cb, sl, ch, id := c.P2PInfo(); id < 0 || cb != 65536 || sl != 2 || ch != 3 || c.Stats().Executor.P2P.Reconnects != 1 {
			t.Errorf("rank %d after: entry %d, %d bytes %d slots %d channels, %+v", r, id, cb, sl, ch, c.Stats().Executor.P2P)
		}
	}
}

// appendLine appends an entry to dir's schedule manifest.
func appendLine(dir, line string) error {
	f, err := os.OpenFile(filepath.Join(dir, manifest.ScheduleManifest), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestP2PDeregisterDropsImports: a registered receive buffer is offered to
// its sender like any allocation (zero-copy from the second call); its
// deregistration withdraws the offer and the sender drops its import
// before Deregister returns (so the memory may be freed), and later
// receives into it are exact (through the FIFO, then offered anew). On a
// communicator that has run no collective there is no service to drop the
// import: Deregister still succeeds and the import stays until Destroy.
func TestP2PDeregisterDropsImports(t *testing.T) {
	for _, collective := range []bool{true, false} {
		t.Run(fmt.Sprintf("collective=%v", collective), func(t *testing.T) {
			comms, _ := localComms(t, 2, nil)
			const n = 1 << 18 // above the eager bytes: the sender writes directly once the receiver has posted
			bufs := make([]Ptr, 2)
			var reg uint64
			for r, err := range onEach(comms, func(c *Comm) error {
				b, err := c.MemAlloc(n)
				if err != nil {
					return err
				}
				bufs[c.Rank()] = b
				if collective {
					if err := c.AllReduce(b, b, 64, Float32, Sum, nil); err != nil {
						return err
					}
				}
				if c.Rank() == 1 {
					reg, err = c.Register(b, n)
				}
				return err
			}) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			round := func(rep int) {
				t.Helper()
				for r, err := range onEach(comms, func(c *Comm) error {
					hb, _ := c.HostBytes(bufs[c.Rank()], n)
					if c.Rank() == 0 {
						for i := range hb {
							hb[i] = p2pByte(0, 1, 0, rep, int64(i))
						}
						return c.Send(bufs[0], n, Uint8, 1, nil)
					}
					clear(hb)
					if err := c.Recv(bufs[1], n, Uint8, 0, nil); err != nil {
						return err
					}
					for i := range hb {
						if want := p2pByte(0, 1, 0, rep, int64(i)); hb[i] != want {
							return fmt.Errorf("rep %d: byte %d = %d, want %d", rep, i, hb[i], want)
						}
					}
					return nil
				}) {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
			}
			// The sender takes an offer up at a call after it has arrived
			// (without waiting for it): rounds until it has, each exact.
			rep := 0
			until := func(imports uint64) {
				t.Helper()
				for ; rep < 100 && comms[0].Stats().Executor.P2P.Imports < imports; rep++ {
					round(rep)
				}
				if st := comms[0].Stats().Executor.P2P; st.Imports != imports {
					t.Fatalf("sender after %d rounds: %+v, want %d imports", rep, st, imports)
				}
			}
			until(1)
			if err := comms[1].Deregister(reg); err != nil {
				t.Fatal(err)
			}
			s0, s1 := comms[0].Stats().Executor.P2P, comms[1].Stats().Executor.P2P
			wantDrops := uint64(0)
			if collective {
				wantDrops = 1
			}
			if s1.Withdrawn != 1 || s0.Drops != wantDrops {
				t.Errorf("after deregistration: receiver withdrew %d offers (want 1), sender dropped %d imports (want %d)", s1.Withdrawn, s0.Drops, wantDrops)
			}
			until(2) // offered anew, under a new id
			round(rep)
		})
	}
}

// TestP2PPersistent: with the persistent executor (THESEUS_EXECUTOR=
// persistent), the collectives go through its queue and the point-to-point
// launches are their streams' own, in call order with them: every pattern
// (collectives in groups included) and matrix exact at 4 ranks.
func TestP2PPersistent(t *testing.T) {
	comms, _ := localComms(t, 4, func(c *Config) { c.Options.Executor = "persistent" })
	for r, err := range onEach(comms, func(c *Comm) error {
		if err := c.AllReduce(0, 0, 0, Float32, Sum, nil); err != nil { // (count 0: nothing)
			return err
		}
		return runP2PSuite(c)
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, c := range comms {
		st := c.Stats().Executor
		if st.Resident.Queued == 0 || st.P2P.Launches == 0 {
			t.Errorf("rank %d: %d launches through the queue, %d point-to-point launches; want both", r, st.Resident.Queued, st.P2P.Launches)
		}
	}
}

// TestP2PUngroupedBothSendFirst: both ranks send to each other, then
// receive, each call on its own (PyTorch's unbatched isend/irecv). NCCL
// completes such a send into the receiver's buffers while they hold it; so
// must Theseus, also above the eager bytes once the sender writes directly
// into the receiver's offered buffers (it must not wait for a post the
// receiver makes only in its next launch).
func TestP2PUngroupedBothSendFirst(t *testing.T) {
	comms, _ := localComms(t, 2, nil)
	for _, n := range []int64{17 * 2, 65537 * 2, 1 << 20} {
		src := make([]Ptr, 2)
		dst := make([]Ptr, 2)
		for r, err := range onEach(comms, func(c *Comm) error {
			var err error
			if src[c.Rank()], err = c.MemAlloc(n); err != nil {
				return err
			}
			dst[c.Rank()], err = c.MemAlloc(n)
			return err
		}) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		for rep := range 4 {
			for r, err := range onEach(comms, func(c *Comm) error {
				me, q := c.Rank(), 1-c.Rank()
				hs, _ := c.HostBytes(src[me], n)
				hd, _ := c.HostBytes(dst[me], n)
				for i := range hs {
					hs[i] = p2pByte(me, q, 0, rep, int64(i))
				}
				clear(hd)
				if err := c.Send(src[me], n, Uint8, q, nil); err != nil {
					return err
				}
				if err := c.Recv(dst[me], n, Uint8, q, nil); err != nil {
					return err
				}
				for i := range hd {
					if want := p2pByte(q, me, 0, rep, int64(i)); hd[i] != want {
						return fmt.Errorf("%d bytes, rep %d: byte %d = %d, want %d", n, rep, i, hd[i], want)
					}
				}
				return nil
			}) {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
		}
		t.Logf("%d bytes: sender stats %+v", n, comms[0].Stats().Executor.P2P)
	}
}
