package interp

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

func lower(t *testing.T, p *ir.Program) []*optable.Table {
	t.Helper()
	tabs, err := optable.LowerAll(p)
	if err != nil {
		t.Fatal(err)
	}
	return tabs
}

func world(t *testing.T, tabs []*optable.Table, req Request) *World {
	t.Helper()
	w, err := NewWorld(tabs)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AllocBuffers(req); err != nil {
		t.Fatal(err)
	}
	return w
}

func putI32(b []byte, vals ...int32) {
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
}

func getI32(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestElementRuleUnevenCount checks the geometry of ir.md §2 on a count
// that leaves a short last piece and empty trailing pieces: 2 ranks, C = 2,
// 2 slices, count 9 int32 -> Stride 4 (16 bytes): pieces [0,4) [4,8) [8,9)
// [9,9). Every element must be reduced exactly once.
func TestElementRuleUnevenCount(t *testing.T) {
	tabs := lower(t, irtest.PairsAllReducePrimitive(2))
	req := Request{Count: 9, DataType: ir.Int32, RedOp: ir.Sum, Slices: 2, Launch: 1}
	w := world(t, tabs, req)
	putI32(w.Bufs[0].Input, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	putI32(w.Bufs[1].Input, 10, 20, 30, 40, 50, 60, 70, 80, 90)
	if err := Run(context.Background(), tabs, req, w); err != nil {
		t.Fatal(err)
	}
	want := []int32{11, 22, 33, 44, 55, 66, 77, 88, 99}
	for p := range 2 {
		if d := cmp.Diff(want, getI32(w.Bufs[p].Output)); d != "" {
			t.Errorf("rank %d (-want +got):\n%s", p, d)
		}
	}
}

// TestAvgEpilogue: avg is sum inside the schedule, then each rank divides
// its result (integers truncate toward zero).
func TestAvgEpilogue(t *testing.T) {
	tabs := lower(t, progs.AllPairs(ir.AllReduce, 3, 1, 0))
	req := Request{Count: 4, DataType: ir.Int32, RedOp: ir.Avg, Launch: 1, InPlace: true}
	w := world(t, tabs, req)
	putI32(w.Bufs[0].Input, 1, -1, 7, 100)
	putI32(w.Bufs[1].Input, 1, -1, 0, 100)
	putI32(w.Bufs[2].Input, 2, -2, 0, 100)
	if err := Run(context.Background(), tabs, req, w); err != nil {
		t.Fatal(err)
	}
	want := []int32{1, -1, 2, 100} // 4/3, -4/3, 7/3, 300/3
	for p := range 3 {
		if d := cmp.Diff(want, getI32(w.Bufs[p].Output)); d != "" {
			t.Errorf("rank %d (-want +got):\n%s", p, d)
		}
	}
}

// TestPacketLayout checks the LL bytes ir.md §5.4 defines: in a 2-rank LL
// allreduce (C = 1, count 4 int32 = 16 payload bytes, Stride 4), rank 0
// writes its input as packets into slot 0 of rank 1's scratch, in the half
// of the launch's parity.
func TestPacketLayout(t *testing.T) {
	tabs := lower(t, progs.AllPairsLL(ir.AllReduce, 2, 1))
	for _, pt := range []ir.PacketType{ir.LL16, ir.LL8} {
		for _, launch := range []uint64{5, 6} {
			req := Request{Count: 4, DataType: ir.Int32, RedOp: ir.Sum, PacketType: pt, Launch: launch}
			w := world(t, tabs, req)
			putI32(w.Bufs[0].Input, 0x11111111, 0x22222222, 0x33333333, 0x44444444)
			putI32(w.Bufs[1].Input, 1, 2, 3, 4)
			if err := Run(context.Background(), tabs, req, w); err != nil {
				t.Fatal(err)
			}
			// Scratch: 2 halves x 2 chunks x 32 bytes.
			s := w.Bufs[1].Scratch
			if len(s) != 128 {
				t.Fatalf("scratch %d bytes, want 128", len(s))
			}
			half := s[64*(launch&1):][:32] // slot 0 = chunk 0 of the half
			var want []int32
			f := int32(launch + 1) // launch.LLFlag(launch) = launch mod (2^32-1) + 1
			if pt == ir.LL16 {
				want = []int32{0x11111111, f, 0x22222222, f, 0x33333333, f, 0x44444444, f}
			} else {
				want = []int32{0x11111111, f, 0x22222222, f, 0x33333333, f, 0x44444444, f}
			}
			if d := cmp.Diff(want, getI32(half)); d != "" {
				t.Errorf("%v launch %d: rank 1 scratch slot 0 (-want +got):\n%s", pt, launch, d)
			}
			other := s[64*(1-launch&1):][:64]
			if d := cmp.Diff(make([]int32, 16), getI32(other)); d != "" {
				t.Errorf("%v launch %d: the other half was written:\n%s", pt, launch, d)
			}
			if d := cmp.Diff([]int32{0x11111112, 0x22222224, 0x33333336, 0x44444448}, getI32(w.Bufs[1].Output)); d != "" {
				t.Errorf("%v: output (-want +got):\n%s", pt, d)
			}
		}
	}
}

func TestLLFlag(t *testing.T) {
	for _, c := range []struct {
		launch uint64
		want   uint32
	}{{1, 2}, {2, 3}, {0xFFFFFFFE, 0xFFFFFFFF}, {0xFFFFFFFF, 1}, {0x100000000, 2}, {1<<64 - 1, 1}} {
		if got := launch.LLFlag(c.launch); got != c.want {
			t.Errorf("launch.LLFlag(%#x) = %#x, want %#x", c.launch, got, c.want)
		}
	}
}

// TestPacketShortChunk: a packet destination is written for the whole
// Stride, with zero data past the chunk's length and valid flags (count 5
// int32 on C = 1: Stride 8, so 3 padding elements).
func TestPacketShortChunk(t *testing.T) {
	tabs := lower(t, progs.AllPairsLL(ir.AllGather, 2, 1))
	req := Request{Count: 5, DataType: ir.Int32, PacketType: ir.LL8, Launch: 3}
	w := world(t, tabs, req)
	putI32(w.Bufs[0].Input, 1, 2, 3, 4, 5)
	putI32(w.Bufs[1].Input, 6, 7, 8, 9, 10)
	if err := Run(context.Background(), tabs, req, w); err != nil {
		t.Fatal(err)
	}
	// Rank 1's scratch: 2 halves x 2 chunks x (2*8*4 = 64 bytes); launch 3 is half 1; slot 0 holds rank 0's.
	slot := w.Bufs[1].Scratch[128:][:64]
	want := []int32{1, 4, 2, 4, 3, 4, 4, 4, 5, 4, 0, 4, 0, 4, 0, 4} // flag launch.LLFlag(3) = 4
	if d := cmp.Diff(want, getI32(slot)); d != "" {
		t.Errorf("slot (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, getI32(w.Bufs[1].Output)); d != "" {
		t.Errorf("output (-want +got):\n%s", d)
	}
}

// TestLaunchCounterWrap runs consecutive launches across the 24-bit epoch
// wrap of the dependency counters and the 32-bit LL flag wrap... but never
// with flag 0 on a cleared scratch (see the report on ir.md §5.4).
func TestLaunchCounterWrap(t *testing.T) {
	deps := lower(t, progs.DepsAllReduce(2, 1))
	req := Request{Count: 64, DataType: ir.Int32, RedOp: ir.Sum, Slices: 3}
	w := world(t, deps, req)
	for _, l := range []uint64{1<<24 - 2, 1<<24 - 1, 1 << 24, 1<<24 + 1, 1<<40 + 7} {
		req.Launch = l
		for p := range 2 {
			for e := range 64 {
				binary.LittleEndian.PutUint32(w.Bufs[p].Input[4*e:], uint32(e+p+int(l&7)))
			}
		}
		if err := Run(context.Background(), deps, req, w); err != nil {
			t.Fatalf("launch %d: %v", l, err)
		}
		for e := range 64 {
			if got, want := int32(binary.LittleEndian.Uint32(w.Bufs[1].Output[4*e:])), int32(2*e+1+2*int(l&7)); got != want {
				t.Fatalf("launch %#x elem %d: %d want %d", l, e, got, want)
			}
		}
	}
	ll := lower(t, progs.AllPairsLL(ir.AllReduce, 2, 1))
	req = Request{Count: 3, DataType: ir.Int32, RedOp: ir.Sum}
	w = world(t, ll, req)
	for _, l := range []uint64{1<<32 - 3, 1<<32 - 2, 1<<32 - 1, 1<<32 + 1, 1<<32 + 2} {
		req.Launch = l
		putI32(w.Bufs[0].Input, 1, 2, int32(l))
		putI32(w.Bufs[1].Input, 10, 20, 30)
		if err := Run(context.Background(), ll, req, w); err != nil {
			t.Fatalf("launch %#x: %v", l, err)
		}
		if d := cmp.Diff([]int32{11, 22, int32(l) + 30}, getI32(w.Bufs[0].Output)); d != "" {
			t.Errorf("launch %#x (-want +got):\n%s", l, d)
		}
	}
}

// hang is a 2-rank program whose rank 1 waits on a channel rank 0 never
// signals (rank 0 just copies).
func hang() *ir.Program {
	b := irtest.New(ir.AllReduce, 2, 1)
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	b.Rank(0).PrimTB().Copy(1, irtest.I(0), irtest.O(0))
	b.Rank(1).PrimTB().Copy(1, irtest.I(0), irtest.O(0))
	b.Rank(1).PrimTB().Wait(0)
	return b.Build()
}

func TestTimeoutNamesTheWait(t *testing.T) {
	tabs := lower(t, hang())
	req := Request{Count: 4, DataType: ir.Float32, Launch: 1, Timeout: 50 * time.Millisecond}
	w := world(t, tabs, req)
	err := Run(context.Background(), tabs, req, w)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Rank != 1 || e.TB != 1 || e.Step != 0 || e.Op != ir.OpWait || e.PeerRank() != 0 {
		t.Fatalf("err = %#v", e)
	}
	want := "interp: rank 1 tb 1 step 0 (wait, slice 0): timed out after"
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "semaphore of channel 0 (signals from rank 0 channel 0): inbound 0, expected 1") {
		t.Errorf("message %q", err)
	}
}

// TestDeadlockReportsEveryWaiter: both ranks wait before they signal.
func TestDeadlockReportsEveryWaiter(t *testing.T) {
	b := irtest.New(ir.AllReduce, 2, 1)
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	for r := range 2 {
		b.Rank(r).PrimTB().Wait(0).Signal(0).Copy(1, irtest.I(0), irtest.O(0))
	}
	tabs := lower(t, b.Build())
	req := Request{Count: 4, DataType: ir.Float32, Launch: 1, Timeout: 30 * time.Millisecond}
	err := Run(context.Background(), tabs, req, world(t, tabs, req))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []string{"rank 0 tb 0 step 0 (wait", "rank 1 tb 0 step 0 (wait"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error does not mention %q:\n%v", s, err)
		}
	}
}

func TestContextCancel(t *testing.T) {
	tabs := lower(t, hang())
	req := Request{Count: 4, DataType: ir.Float32, Launch: 1, Timeout: time.Hour}
	w := world(t, tabs, req)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, tabs, req, w) }()
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrAborted) {
		t.Errorf("err = %v, want context.Canceled and ErrAborted", err)
	}
}

func TestRequestAndMemoryErrors(t *testing.T) {
	pairs := lower(t, irtest.PairsAllReducePrimitive(2)) // out of place only
	ll := lower(t, progs.AllPairsLL(ir.AllReduce, 2, 1))
	bc := lower(t, progs.AllPairs(ir.Broadcast, 2, 1, 0))
	good := Request{Count: 8, DataType: ir.Float32, Launch: 1}
	cases := []struct {
		name string
		tabs []*optable.Table
		req  func(*Request)
		mem  func(*World)
		want string
	}{
		{"in place unsupported", pairs, func(r *Request) { r.InPlace = true }, nil, "does not support in-place"},
		{"negative count", pairs, func(r *Request) { r.Count = -1 }, nil, "count -1 < 0"},
		{"launch 0", pairs, func(r *Request) { r.Launch = 0 }, nil, "launch counter 0"},
		{"data type", pairs, func(r *Request) { r.DataType = ir.NumDataTypes }, nil, "unknown data type"},
		{"redop", pairs, func(r *Request) { r.RedOp = ir.NumRedOps }, nil, "unknown reduction op"},
		{"LL sliced", ll, func(r *Request) { r.Slices = 2 }, nil, "never sliced"},
		{"root", bc, func(r *Request) { r.Root = 5 }, nil, "root 5 outside 0..1"},
		{"small output", pairs, nil, func(w *World) { w.Bufs[1].Output = w.Bufs[1].Output[:8] },
			"rank 1 tb 0 step 2 (reduce, slice 0): destination 0 output chunk 0: bytes [0, 16) outside its output buffer of 8 bytes"},
		{"small peer input", pairs, nil, func(w *World) { w.Bufs[0].Input = nil },
			"input chunk 0: bytes [0, 16) outside"}, // rank 0's own read, or rank 1's of rank 0's input, fails first
		{"unaligned scratch", ll, nil, func(w *World) { w.Bufs[0].Scratch = w.Bufs[0].Scratch[4:] }, "not 16-byte aligned"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := good
			w := world(t, c.tabs, req)
			if c.req != nil {
				c.req(&req)
			}
			if c.mem != nil {
				c.mem(w)
			}
			err := Run(context.Background(), c.tabs, req, w)
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want an *Error containing %q", err, c.want)
			}
			if c.mem == nil && len(unjoin(err)) != 1 {
				t.Errorf("a bad request gave %d errors, want 1:\n%v", len(unjoin(err)), err)
			}
		})
	}
}

// TestRunRankSharedWords runs each rank through RunRank with memory made
// the way a multi-process host backend makes it: semaphore words carved
// out of one byte slice (a stand-in for an mmap'd segment) with Words, and
// each rank's view of its peers' buffers wired by hand.
func TestRunRankSharedWords(t *testing.T) {
	tabs := lower(t, progs.DepsAllReduce(2, 2))
	req := Request{Count: 100, DataType: ir.Float32, RedOp: ir.Sum, InPlace: true, Slices: 2}
	seg := alloc(64)
	words, err := Words(seg, 2) // one channel end per rank
	if err != nil {
		t.Fatal(err)
	}
	expected := make([]uint64, 2) // private, one per rank
	var bufs [2]Buffers
	for p := range 2 {
		if bufs[p], err = NewBuffers(tabs[p], p, req); err != nil {
			t.Fatal(err)
		}
	}
	var mems [2]*RankMem
	for p := range 2 {
		mems[p] = &RankMem{Buffers: bufs[p], Ends: []End{{
			Inbound: &words[p], PeerInbound: &words[1-p], Expected: &expected[p], Peer: bufs[1-p],
		}}}
		if err := InitEnds(tabs[p], mems[p].Ends); err != nil {
			t.Fatal(err)
		}
	}
	for launch := uint64(1); launch <= 3; launch++ {
		req.Launch = launch
		for p := range 2 {
			for e := range 100 {
				binary.LittleEndian.PutUint32(bufs[p].Input[4*e:], math.Float32bits(float32(e*(p+1))))
			}
		}
		errs := make(chan error, 2)
		for p := range 2 {
			go func() { errs <- RunRank(context.Background(), tabs[p], p, req, mems[p]) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for p := range 2 {
			for e := range 100 {
				if got := math.Float32frombits(binary.LittleEndian.Uint32(bufs[p].Output[4*e:])); got != float32(3*e) {
					t.Fatalf("launch %d rank %d elem %d: %v", launch, p, e, got)
				}
			}
		}
	}
	// Balanced: every end is back at inbound - expected = Init (0).
	for p := range 2 {
		if words[p] != expected[p] {
			t.Errorf("rank %d: inbound %d, expected %d after balanced launches", p, words[p], expected[p])
		}
	}
}

func TestBufferSizes(t *testing.T) {
	tabs := lower(t, progs.AllPairs(ir.AllGather, 4, 1, 0))
	got, err := launch.BufferSizes(tabs[2], 2, Request{Count: 10, DataType: ir.Float16, Launch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(Sizes{Input: 20, Output: 80, Scratch: 0}, got); d != "" {
		t.Errorf("allgather (-want +got):\n%s", d)
	}
	ll := lower(t, progs.AllPairsLL(ir.AllReduce, 2, 3))
	got, err = launch.BufferSizes(ll[0], 0, Request{Count: 10, DataType: ir.Int32, Launch: 1})
	if err != nil {
		t.Fatal(err)
	}
	// C = 3, Stride = 4 int32; scratch 6 chunks x 2 (packets) x 16 bytes x 2 halves.
	if d := cmp.Diff(Sizes{Input: 40, Output: 40, Scratch: 6 * 2 * 16 * 2}, got); d != "" {
		t.Errorf("LL allreduce (-want +got):\n%s", d)
	}
}

func TestNewBuffersInPlace(t *testing.T) {
	tabs := lower(t, progs.AllPairs(ir.ReduceScatter, 3, 1, 0))
	b, err := NewBuffers(tabs[1], 1, Request{Count: 4, DataType: ir.Int32, Launch: 1, InPlace: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Input) != 48 || len(b.Output) != 16 || &b.Output[0] != &b.Input[16] {
		t.Errorf("reducescatter in place: output must be input + rank*count")
	}
}

// TestRemoteRefOutOfRange: a remote ref into a peer buffer that is too
// small is an error naming the peer, not a crash.
func TestRemoteRefOutOfRange(t *testing.T) {
	b := irtest.New(ir.AllReduce, 2, 1)
	c, _ := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	b.Rank(0).PrimTB().Copy(1, irtest.Remote(irtest.I(0), c), irtest.O(0))
	b.Rank(1).PrimTB().Copy(1, irtest.I(0), irtest.O(0))
	tabs := lower(t, b.Build())
	req := Request{Count: 8, DataType: ir.Float64, Launch: 1}
	own, err := NewBuffers(tabs[0], 0, req)
	if err != nil {
		t.Fatal(err)
	}
	var in, exp, peerIn uint64
	m := &RankMem{Buffers: own, Ends: []End{{Inbound: &in, PeerInbound: &peerIn, Expected: &exp,
		Peer: Buffers{Input: make([]byte, 40)}}}}
	err = RunRank(context.Background(), tabs[0], 0, req, m)
	want := "interp: rank 0 tb 0 step 0 (copy, slice 0): source 0 input chunk 0: bytes [0, 64) outside rank 1's input buffer of 40 bytes"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}

// TestLLAsymmetricScratch: an LL broadcast in which only the receiver has
// scratch. The writer must find the receiver's scratch half for launch 2
// (half 0) and launch 3 (half 1) although its own scratch is empty; halves
// span the program's largest scratch on every rank.
func TestLLAsymmetricScratch(t *testing.T) {
	b := irtest.New(ir.Broadcast, 2, 1).Protocol(ir.LL).Arrangements(true, true)
	c0, _ := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	b.Rank(0).PrimTB().Copy(1, irtest.I(0), irtest.O(0), irtest.Remote(irtest.Packet(irtest.S(0)), c0))
	b.Rank(1).Chunks(0, 0, 1).PrimTB().Copy(1, irtest.Packet(irtest.S(0)), irtest.O(0))
	tabs := lower(t, b.Build())
	req := Request{Count: 6, DataType: ir.Int32, Timeout: time.Second}
	w := world(t, tabs, req)
	for launch := uint64(1); launch <= 4; launch++ {
		req.Launch = launch
		putI32(w.Bufs[0].Input, 1, 2, 3, 4, 5, int32(launch))
		if err := Run(context.Background(), tabs, req, w); err != nil {
			t.Fatalf("launch %d: %v", launch, err)
		}
		if d := cmp.Diff([]int32{1, 2, 3, 4, 5, int32(launch)}, getI32(w.Bufs[1].Output)); d != "" {
			t.Errorf("launch %d (-want +got):\n%s", launch, d)
		}
	}
	// Stride 8 int32: one chunk is 64 bytes of packets; two halves on both ranks.
	for p := range 2 {
		if s, _ := launch.BufferSizes(tabs[p], p, req); s.Scratch != 128 {
			t.Errorf("rank %d LL scratch %d bytes, want 128", p, s.Scratch)
		}
	}
}

func TestScratchHalfOffset(t *testing.T) {
	ll := lower(t, progs.AllPairsLL(ir.AllReduce, 2, 3)) // 6 scratch chunks
	for _, c := range []struct {
		launch uint64
		want   int64
	}{{1, 6 * 2 * 16}, {2, 0}, {7, 6 * 2 * 16}} {
		got, err := launch.ScratchHalfOffset(ll[1], 1, Request{Count: 10, DataType: ir.Int32, Launch: c.launch})
		if err != nil || got != c.want {
			t.Errorf("launch %d: %d, %v; want %d", c.launch, got, err, c.want)
		}
	}
	simple := lower(t, progs.AllPairs(ir.AllToAll, 2, 1, 0))
	if got, err := launch.ScratchHalfOffset(simple[0], 0, Request{Count: 10, DataType: ir.Int32, Launch: 3}); err != nil || got != 0 {
		t.Errorf("simple: %d, %v", got, err)
	}
}

// TestEmptyChunksSkipped: 2^30 chunks per block over a count of 5
// elements: almost every chunk is empty, and a copy over all of them must
// finish at once (no spin through a billion empty chunks).
func TestEmptyChunksSkipped(t *testing.T) {
	const C = 1 << 30
	b := irtest.New(ir.AllReduce, 1, C)
	b.Rank(0).PrimTB().Copy(C, irtest.I(0), irtest.O(0))
	tabs := lower(t, b.Build())
	req := Request{Count: 5, DataType: ir.Int32, Launch: 1, Slices: 3}
	w := world(t, tabs, req)
	putI32(w.Bufs[0].Input, 1, 2, 3, 4, 5)
	// A spin through 3 x 2^30 chunks would take minutes and hit the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Run(ctx, tabs, req, w); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int32{1, 2, 3, 4, 5}, getI32(w.Bufs[0].Output)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
