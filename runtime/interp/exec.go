package interp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// Waiting: spinChecks checks of the condition (yielding every yieldEvery),
// then sleeps doubling from minBackoff up to maxBackoff between checks.
const (
	spinChecks = 64
	yieldEvery = 8
	minBackoff = 2 * time.Microsecond
	maxBackoff = 500 * time.Microsecond
)

// backoffSleep is time.Sleep; the fuzz test makes it a yield, so that
// inputs that deadlock time out quickly on a loaded machine.
var backoffSleep = time.Sleep

type rankRun struct {
	ctx      context.Context
	t        *optable.Table
	rank     int
	g        *geometry
	mem      *RankMem
	peerPhys []int // physical rank at the other end of each channel
	publish  []uint64
	barriers map[int]*barrier
	stop     atomic.Bool
	// help are the distinct proxy connections of the rank's proxied ends:
	// a wait runs their rounds (a peer's puts land in this process's
	// progress).
	help []device.PortConn

	failures launch.Failures
}

type barrier struct {
	count atomic.Int64
	gen   atomic.Uint64
}

func newRankRun(ctx context.Context, t *optable.Table, rank int, g *geometry, mem *RankMem) (*rankRun, error) {
	fail := func(format string, args ...any) error {
		return &Error{Peer: -1, Rank: rank, Logical: t.Rank, TB: -1, Step: -1, Msg: fmt.Sprintf(format, args...)}
	}
	if mem == nil {
		return nil, fail("no memory")
	}
	if len(mem.Ends) < len(t.Channels) {
		return nil, fail("%d channel ends in memory for %d channels", len(mem.Ends), len(t.Channels))
	}
	rr := &rankRun{ctx: ctx, t: t, rank: rank, g: g, mem: mem, peerPhys: make([]int, len(t.Channels)), barriers: map[int]*barrier{}}
	for c, ch := range t.Channels {
		e := &mem.Ends[c]
		if e.Inbound == nil || (e.PeerInbound == nil && e.Port == nil) || e.Expected == nil {
			return nil, fail("channel %d: nil semaphore word", c)
		}
		for _, p := range []*uint64{e.Inbound, e.PeerInbound, e.Expected} {
			if uintptr(unsafe.Pointer(p))%8 != 0 {
				return nil, fail("channel %d: semaphore word not 8-byte aligned", c)
			}
		}
		if e.Port != nil {
			if e.Port.Conn == nil {
				return nil, fail("channel %d: a port end without a connection", c)
			}
			if !slices.Contains(rr.help, e.Port.Conn) {
				rr.help = append(rr.help, e.Port.Conn)
			}
		}
		if g.LL && e.Port == nil && !aligned16(e.Peer.Scratch) {
			return nil, fail("channel %d: the peer's scratch is not 16-byte aligned", c)
		}
		rr.peerPhys[c] = g.Placement.Physical(ch.Peer)
	}
	if g.LL && !aligned16(mem.Scratch) {
		return nil, fail("scratch is not 16-byte aligned")
	}
	switch {
	case mem.Publish == nil:
		rr.publish = make([]uint64, len(t.TBs))
	case len(mem.Publish) < len(t.TBs):
		return nil, fail("%d dependency counters for %d threadblocks", len(mem.Publish), len(t.TBs))
	default:
		rr.publish = mem.Publish
	}
	for _, tb := range t.TBs {
		for _, op := range tb.Ops {
			if op.Code == ir.OpBarrier && rr.barriers[op.Barrier] == nil {
				rr.barriers[op.Barrier] = &barrier{}
			}
		}
	}
	return rr, nil
}

func aligned16(b []byte) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%16 == 0
}

func (rr *rankRun) stopped() bool {
	return rr.stop.Load() || (rr.mem.Abort != nil && atomic.LoadUint64(rr.mem.Abort) != 0)
}

func (rr *rankRun) fail(err error) {
	rr.failures.Add(err)
	rr.stop.Store(true)
	if rr.mem.Abort != nil {
		atomic.StoreUint64(rr.mem.Abort, 1)
	}
}

func (rr *rankRun) run() error {
	var wg sync.WaitGroup
	for ti := range rr.t.TBs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := &tbRun{rr: rr, ti: ti, ops: rr.t.TBs[ti].Ops}
			defer func() {
				if p := recover(); p != nil { // a bug in the interpreter; never crash the process
					rr.fail(&Error{Peer: -1, Rank: rr.rank, Logical: rr.t.Rank, TB: ti, Step: -1, Msg: fmt.Sprintf("internal error: %v", p)})
				}
			}()
			if err := x.run(); err != nil {
				rr.fail(err)
			}
		}()
	}
	wg.Wait()
	if rr.failures.Len() > 0 {
		return rr.failures.Join()
	}
	return rr.epilogue()
}

// epilogue is the avg division (ir.md §8) over the rank's result region.
func (rr *rankRun) epilogue() error {
	g, t := rr.g, rr.t
	if g.RedOp != ir.Avg || !t.Collective.Reduces() || g.Layout.Count == 0 {
		return nil
	}
	if ir.Blocks(t.Collective, ir.Output, t.NRanks, rr.rank, g.Placement.Root) == 0 {
		return nil // reduce: only the root has a result
	}
	kb, chunk := g.Placement.Resolve(rr.rank, ir.Output, 0)
	start := chunk / t.ChunksPerBlock * g.Layout.Count * g.ElemSize
	buf, err := rr.bufferBytes(rr.mem.Buffers, kb, start, start+g.Layout.Count*g.ElemSize, rr.rank)
	if err != nil {
		return &Error{Peer: -1, Rank: rr.rank, Logical: t.Rank, TB: -1, Step: -1, Msg: "avg epilogue: " + err.Error()}
	}
	if err := numeric.Divide(g.DataType, buf, t.NRanks); err != nil {
		return &Error{Peer: -1, Rank: rr.rank, Logical: t.Rank, TB: -1, Step: -1, Msg: "avg epilogue: " + err.Error()}
	}
	return nil
}

func (rr *rankRun) bufferBytes(b Buffers, k ir.BufKind, lo, hi int64, phys int) ([]byte, error) {
	var buf []byte
	switch k {
	case ir.Input:
		buf = b.Input
	case ir.Output:
		buf = b.Output
	default:
		buf = b.Scratch
	}
	if lo < 0 || hi < lo || hi > int64(len(buf)) {
		whose := "its"
		if phys != rr.rank {
			whose = fmt.Sprintf("rank %d's", phys)
		}
		return nil, fmt.Errorf("bytes [%d, %d) outside %s %s buffer of %d bytes", lo, hi, whose, k.LongName(), len(buf))
	}
	return buf[lo:hi:hi], nil
}

// tbRun is one threadblock's goroutine.
type tbRun struct {
	rr  *rankRun
	ti  int
	ops []optable.Op

	// Per-op state, reused.
	k     int
	slice int64
	views []view
	srcs  [][]byte
	tmp   [][]byte // staging buffers: one per packet source, plus the result
	exp   []uint64
}

// view is one ref of a data op resolved for one chunk.
type view struct {
	buf    []byte // plain refs: the chunk's bytes (user: len_R elements; scratch: Stride)
	pkt    []byte // packet refs: the chunk's packet region (2*Stride*size bytes)
	user   bool
	elems  int64
	packet bool
}

func (x *tbRun) errf(cause error, format string, args ...any) error {
	op := ir.OpNop
	step := -1
	if x.k >= 0 && x.k < len(x.ops) {
		op, step = x.ops[x.k].Code, x.k
	}
	return &Error{Peer: -1, Rank: x.rr.rank, Logical: x.rr.t.Rank, TB: x.ti, Step: step, Slice: x.slice, Op: op,
		Msg: fmt.Sprintf(format, args...), Err: cause}
}

func (x *tbRun) run() error {
	g := x.rr.g
	tr := x.rr.mem.Trace
	var t0, tb0 int64
	if tr != nil {
		tb0 = time.Now().UnixNano()
		defer func() { tr.RecordOp(g.Launch, x.ti, -1, 0, ir.OpNop, tb0, time.Now().UnixNano()) }()
	}
	for s := int64(0); s < g.Slices; s++ {
		x.slice = s
		for k := range x.ops {
			x.k = k
			if x.rr.stopped() {
				return x.errf(ErrAborted, "aborted (another threadblock or rank failed)")
			}
			op := &x.ops[k]
			if tr != nil {
				t0 = time.Now().UnixNano()
			}
			for _, d := range op.Deps {
				if err := x.waitDep(d, s); err != nil {
					return err
				}
			}
			var err error
			switch op.Code {
			case ir.OpCopy, ir.OpReduce:
				var port bool
				if port, err = x.portRefs(op); port && err == nil {
					err = x.portPut(op, s)
				} else if err == nil {
					err = x.data(op, s)
				}
			case ir.OpSignal:
				for _, c := range op.Chans {
					e := &x.rr.mem.Ends[c]
					if e.Port == nil {
						atomic.AddUint64(e.PeerInbound, 1)
					} else if err = e.Port.Conn.Signal(e.Port.Channel); err != nil {
						err = x.portErr(err, x.rr.peerPhys[c], "signal to rank %d (channel %d)", x.rr.peerPhys[c], c)
						break
					}
				}
			case ir.OpWait:
				err = x.waitChans(op.Chans)
			case ir.OpBarrier:
				err = x.barrier(op)
			case ir.OpFlush:
				// Host stores are visible once done; a proxied end waits
				// for its puts and signals to complete at the peer.
				for _, c := range op.Chans {
					if e := &x.rr.mem.Ends[c]; e.Port != nil {
						if err = e.Port.Conn.Flush(e.Port.Channel); err != nil {
							err = x.portErr(err, x.rr.peerPhys[c], "flush to rank %d (channel %d)", x.rr.peerPhys[c], c)
							break
						}
					}
				}
			case ir.OpNop:
			default:
				err = x.errf(nil, "op %v cannot run in an op table", op.Code)
			}
			if err != nil {
				return err
			}
			if op.Publish {
				atomic.StoreUint64(&x.rr.publish[x.ti], g.Epoch|uint64(s*int64(len(x.ops))+int64(k)+1))
			}
			if tr != nil {
				tr.RecordOp(g.Launch, x.ti, k, s, op.Code, t0, time.Now().UnixNano())
			}
		}
	}
	return nil
}

// wait blocks until cond holds, the timeout passes, the context is done or
// the rank aborts. what describes the wait for the error message.
func (x *tbRun) wait(cond func() bool, what func() string) error {
	for i := 0; i < spinChecks; i++ {
		if cond() {
			return nil
		}
		if i%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
	}
	start := time.Now()
	sleep := minBackoff
	for {
		if cond() {
			return nil
		}
		if len(x.rr.help) > 0 {
			for _, p := range x.rr.help {
				p.Help()
			}
			if cond() {
				return nil
			}
		}
		if x.rr.stopped() {
			return x.errf(ErrAborted, "aborted while waiting for %s", what())
		}
		if err := x.rr.ctx.Err(); err != nil {
			return x.errf(fmt.Errorf("%w: %w", ErrAborted, err), "%v while waiting for %s", err, what())
		}
		if el := time.Since(start); el >= x.rr.g.Timeout {
			return x.errf(ErrTimeout, "timed out after %v waiting for %s", el.Round(time.Millisecond), what())
		}
		backoffSleep(sleep)
		sleep = min(2*sleep, maxBackoff, max(x.rr.g.Timeout/8, minBackoff))
	}
}

func (x *tbRun) waitChans(chans []int) error {
	ends := x.rr.mem.Ends
	x.exp = x.exp[:0]
	for _, c := range chans {
		x.exp = append(x.exp, atomic.AddUint64(ends[c].Expected, 1))
	}
	exp := x.exp
	for i, c := range chans {
		in, want := ends[c].Inbound, exp[i]
		if atomic.LoadUint64(in) >= want {
			continue
		}
		if pe := ends[c].Port; pe != nil {
			stop := func() error {
				if x.rr.stopped() {
					return ErrAborted
				}
				return x.rr.ctx.Err()
			}
			if err := pe.Conn.WaitSignal(in, want, x.rr.peerPhys[c], stop); err != nil {
				ch := x.rr.t.Channels[c]
				var cause error = err
				if errors.Is(err, ErrAborted) || x.rr.ctx.Err() != nil {
					cause = fmt.Errorf("%w: %w", ErrAborted, err)
				}
				e := x.errf(cause, "waiting for the semaphore of channel %d (signals from rank %d channel %d, a port channel across nodes): inbound %d, expected %d: %v",
					c, x.rr.peerPhys[c], ch.PeerChannel, atomic.LoadUint64(in), want, err)
				e.(*Error).Peer = x.rr.peerPhys[c]
				return e
			}
			continue
		}
		err := x.wait(func() bool { return atomic.LoadUint64(in) >= want }, func() string {
			ch := x.rr.t.Channels[c]
			return fmt.Sprintf("the semaphore of channel %d (signals from rank %d channel %d): inbound %d, expected %d",
				c, x.rr.peerPhys[c], ch.PeerChannel, atomic.LoadUint64(in), want)
		})
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				e.Peer = x.rr.peerPhys[c]
			}
			return err
		}
	}
	return nil
}

func (x *tbRun) waitDep(d ir.Dep, s int64) error {
	g := x.rr.g
	w := &x.rr.publish[d.TB]
	target := uint64(s*int64(len(x.rr.t.TBs[d.TB].Ops)) + int64(d.Step) + 1)
	done := func() bool {
		v := atomic.LoadUint64(w)
		return v&^progressMask == g.Epoch && v&progressMask >= target
	}
	if done() {
		return nil
	}
	return x.wait(done, func() string {
		v := atomic.LoadUint64(w)
		cur := "nothing yet in this launch"
		if v&^progressMask == g.Epoch {
			cur = fmt.Sprintf("progress %d", v&progressMask)
		}
		return fmt.Sprintf("tb %d to complete step %d of slice %d (dependency counter at %s, need %d)", d.TB, d.Step, s, cur, target)
	})
}

func (x *tbRun) barrier(op *optable.Op) error {
	b := x.rr.barriers[op.Barrier]
	gen := b.gen.Load()
	n := int64(op.BarrierTBs)
	if b.count.Add(1) == n {
		b.count.Store(0)
		b.gen.Add(1)
		return nil
	}
	return x.wait(func() bool { return b.gen.Load() != gen }, func() string {
		return fmt.Sprintf("barrier %d (%d of %d threadblocks arrived)", op.Barrier, b.count.Load(), n)
	})
}

// resolveRef maps ref's chunk c (in slice s) to memory.
func (x *tbRun) resolveRef(ref ir.Ref, c, s int64) (view, error) {
	rr, g := x.rr, x.rr.g
	bufs, phys := rr.mem.Buffers, rr.rank
	if ref.Chan >= 0 {
		bufs, phys = rr.mem.Ends[ref.Chan].Peer, rr.peerPhys[ref.Chan]
	}
	if ref.Buf == ir.Scratch {
		lo := g.HalfOff + c*g.ChunkBytes
		if ref.Packet {
			b, err := rr.bufferBytes(bufs, ir.Scratch, lo, lo+g.ChunkBytes, phys)
			return view{pkt: b, elems: g.Layout.Stride, packet: true}, err
		}
		b, err := rr.bufferBytes(bufs, ir.Scratch, lo, lo+g.Layout.Stride*g.ElemSize, phys)
		return view{buf: b, elems: g.Layout.Stride}, err
	}
	kb, chunk := g.Placement.Resolve(phys, ref.Buf, c)
	st, en := g.Layout.UserChunk(chunk, s)
	b, err := rr.bufferBytes(bufs, kb, st*g.ElemSize, en*g.ElemSize, phys)
	return view{buf: b, elems: en - st, user: true}, err
}

func (x *tbRun) staging(i int, n int64) []byte {
	for len(x.tmp) <= i {
		x.tmp = append(x.tmp, nil)
	}
	if int64(cap(x.tmp[i])) < n {
		x.tmp[i] = alloc(n)
	}
	return x.tmp[i][:n]
}

// data runs a copy or reduce (ir.md §5.1), chunk by chunk.
func (x *tbRun) data(op *optable.Op, s int64) error {
	g := x.rr.g
	nref := len(op.Srcs) + len(op.Dsts)
	if g.Layout.Stride == 0 {
		return nil // count 0: every chunk is empty, packet chunks included
	}
	// Chunks whose user-buffer pieces are empty do nothing (L_t = 0) unless
	// the op writes packets; skip them in bulk, so that a table with huge
	// chunk counts over a small request does not spin through them. Piece j
	// of a block (j = chunk mod C, kept by Placement.Resolve) holds data in
	// slice s iff s*C + j < ceil(Count/Stride).
	user, packetDst := -1, false
	for i := 0; i < nref; i++ {
		r := opRef(op, i)
		if r.Buf != ir.Scratch && user < 0 {
			user = i
		}
		if i >= len(op.Srcs) && r.Packet {
			packetDst = true
		}
	}
	C := g.Layout.ChunksPerBlock
	live := (g.Layout.Count+g.Layout.Stride-1)/g.Layout.Stride - s*C // pieces j < live hold data
	skip := user >= 0 && !packetDst
	if skip && live <= 0 {
		return nil
	}
	for t := int64(0); t < op.Count; t++ {
		if skip && live < C {
			if j := (opRef(op, user).Off + t) % C; j >= live {
				t += C - j - 1 // to the next block's piece 0
				continue
			}
		}
		if t&255 == 255 {
			if x.rr.stopped() {
				return x.errf(ErrAborted, "aborted (another threadblock or rank failed)")
			}
			if err := x.rr.ctx.Err(); err != nil {
				return x.errf(fmt.Errorf("%w: %w", ErrAborted, err), "%v", err)
			}
		}
		x.views = x.views[:0]
		L := g.Layout.Stride
		for i := 0; i < nref; i++ {
			ref := opRef(op, i)
			v, err := x.resolveRef(ref, ref.Off+t, s)
			if err != nil {
				return x.errf(nil, "%s %s chunk %d: %v", refRole(op, i), ref.Buf.LongName(), ref.Off+t, err)
			}
			if v.user {
				L = min(L, v.elems)
			}
			x.views = append(x.views, v)
		}
		nb := L * g.ElemSize
		x.srcs = x.srcs[:0]
		for i := range op.Srcs {
			v := &x.views[i]
			if !v.packet {
				x.srcs = append(x.srcs, v.buf[:nb])
				continue
			}
			dst := x.staging(i, nb)
			if err := x.readPackets(v.pkt, dst); err != nil {
				return err
			}
			x.srcs = append(x.srcs, dst)
		}
		dsts := x.views[len(op.Srcs):]
		var res []byte
		first := 0
		if op.Code == ir.OpCopy {
			res = x.srcs[0]
		} else {
			if d0 := &dsts[0]; !d0.packet && !partialOverlap(d0.buf[:nb], x.srcs) {
				res = d0.buf[:nb]
				first = 1
			} else {
				res = x.staging(len(op.Srcs), nb)
			}
			if err := numeric.Reduce(g.DataType, g.RedOp, res, x.srcs); err != nil {
				return x.errf(nil, "%v", err)
			}
		}
		for i := first; i < len(dsts); i++ {
			d := &dsts[i]
			if d.packet {
				x.writePackets(d.pkt, res)
			} else if nb > 0 && unsafe.SliceData(d.buf) != unsafe.SliceData(res) {
				copy(d.buf[:nb], res)
			}
		}
	}
	return nil
}

func opRef(op *optable.Op, i int) ir.Ref {
	if i < len(op.Srcs) {
		return op.Srcs[i]
	}
	return op.Dsts[i-len(op.Srcs)]
}

func refRole(op *optable.Op, i int) string {
	if i < len(op.Srcs) {
		return fmt.Sprintf("source %d", i)
	}
	return fmt.Sprintf("destination %d", i-len(op.Srcs))
}

// partialOverlap reports whether d shares bytes with a source without being
// exactly that source (in which case the element-wise reduction could read
// an element after writing it).
func partialOverlap(d []byte, srcs [][]byte) bool {
	if len(d) == 0 {
		return false
	}
	d0 := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
	for _, s := range srcs {
		if len(s) == 0 {
			continue
		}
		s0 := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
		if s0 != d0 && s0 < d0+uintptr(len(d)) && d0 < s0+uintptr(len(s)) {
			return true
		}
	}
	return false
}

// word32 points at the 4-byte word at byte off of b (4-byte aligned: b is a
// packet region of 16-byte-aligned scratch).
func word32(b []byte, off int) *uint32 {
	if off < 0 || off+4 > len(b) {
		panic("interp: packet word out of range") // unreachable: regions are bounds-checked
	}
	return (*uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), off))
}

// payloadWord is the little-endian data word at byte off of p (zero past
// the end).
func payloadWord(p []byte, off int) uint32 {
	if off+4 <= len(p) {
		return binary.LittleEndian.Uint32(p[off:])
	}
	var w [4]byte
	if off < len(p) {
		copy(w[:], p[off:])
	}
	return binary.LittleEndian.Uint32(w[:])
}

func putPayloadWord(p []byte, off int, v uint32) {
	if off+4 <= len(p) {
		binary.LittleEndian.PutUint32(p[off:], v)
		return
	}
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], v)
	copy(p[off:], w[:])
}

// writePackets writes the payload into a chunk's packet region: the whole
// Stride (len(region)/2 payload bytes), zero data past len(payload), every
// flag the launch's (ir.md §5.4). Data words are stored before flags.
func (x *tbRun) writePackets(region, payload []byte) {
	flag := x.rr.g.Flag
	if x.rr.g.PacketType == ir.LL16 {
		for off := 0; off+16 <= len(region); off += 16 {
			p := off / 2 // payload bytes of this packet start here
			atomic.StoreUint32(word32(region, off), payloadWord(payload, p))
			atomic.StoreUint32(word32(region, off+8), payloadWord(payload, p+4))
			atomic.StoreUint32(word32(region, off+4), flag)
			atomic.StoreUint32(word32(region, off+12), flag)
		}
		return
	}
	for off := 0; off+8 <= len(region); off += 8 {
		atomic.StoreUint32(word32(region, off), payloadWord(payload, off/2))
		atomic.StoreUint32(word32(region, off+4), flag)
	}
}

// readPackets reads len(dst) payload bytes from a chunk's packet region,
// waiting for each packet's flags to carry this launch's flag.
func (x *tbRun) readPackets(region, dst []byte) error {
	flag := x.rr.g.Flag
	ll16 := x.rr.g.PacketType == ir.LL16
	step := 8
	if ll16 {
		step = 16
	}
	if len(dst) == 0 {
		return nil
	}
	// Wait for the last packet first: a writer usually fills a chunk in
	// order, so one wait then covers the rest. Every packet is still checked.
	last := (len(dst) - 1) / (step / 2) * step
	if !packetReady(region, last, ll16, flag) {
		if err := x.waitPacket(region, last, ll16, flag); err != nil {
			return err
		}
	}
	for off := 0; off/2 < len(dst); off += step {
		if !packetReady(region, off, ll16, flag) {
			if err := x.waitPacket(region, off, ll16, flag); err != nil {
				return err
			}
		}
		p := off / 2
		putPayloadWord(dst, p, atomic.LoadUint32(word32(region, off)))
		if ll16 && p+4 < len(dst) {
			putPayloadWord(dst, p+4, atomic.LoadUint32(word32(region, off+8)))
		}
	}
	return nil
}

func packetReady(region []byte, off int, ll16 bool, flag uint32) bool {
	if atomic.LoadUint32(word32(region, off+4)) != flag {
		return false
	}
	return !ll16 || atomic.LoadUint32(word32(region, off+12)) == flag
}

func (x *tbRun) waitPacket(region []byte, off int, ll16 bool, flag uint32) error {
	return x.wait(func() bool { return packetReady(region, off, ll16, flag) }, func() string {
		size := map[bool]int{true: 16, false: 8}[ll16]
		return fmt.Sprintf("the flag of LL packet %d of a scratch chunk to be %#x (launch %d), have %#x",
			off/size, flag, x.rr.g.Launch, atomic.LoadUint32(word32(region, off+4)))
	})
}
