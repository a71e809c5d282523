//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// The host backend's point-to-point engine: the reference of the protocol
// of runtime/launch's p2p.go (docs/p2p.md), which the CUDA kernel
// (cuda/kernel/p2p.cuh) runs the same way. A launch runs 2 x Channels lanes
// as goroutines: send lane c writes channel c of every peer it sends to,
// receive lane c reads channel c of every peer it receives from, each
// taking its peers in round order. The data is bytes: results are the same
// as the kernel's bit for bit.

// p2pPrepared is one rank's prepared launch of the engine: the arguments,
// with the connection blocks resolved into this process's memory. User
// buffers are viewed only while a launch runs (as prepared's foreign
// buffers are).
type p2pPrepared struct {
	a            *device.P2PArgs
	abort        *uint64
	sends, recvs []p2pPeer
}

type p2pPeer struct {
	*device.P2PPeer
	local, remote []byte
	// port (a peer on another node): remote is this rank's copy of the
	// peer's block, whose writes are put into it (device.P2PPort).
	port *device.P2PPort
}

func (p *p2pPrepared) Release() {}

// PrepareP2P implements device.P2PPreparer.
func (b *backend) PrepareP2P(a *device.P2PArgs) (device.Prepared, error) {
	if a == nil {
		return nil, errors.New("host: PrepareP2P without arguments")
	}
	if err := a.Geometry.Check(); err != nil {
		return nil, fmt.Errorf("host: p2p geometry: %w", err)
	}
	p := &p2pPrepared{a: a}
	var err error
	if p.abort, err = b.word(a.Abort); err != nil {
		return nil, fmt.Errorf("host: p2p abort word: %w", err)
	}
	conn := a.Geometry.ConnBytes()
	peers := func(list []device.P2PPeer) ([]p2pPeer, error) {
		out := make([]p2pPeer, len(list))
		for i := range list {
			pr := &list[i]
			if pr.Local.Size < conn || pr.Remote.Size < conn {
				return nil, fmt.Errorf("host: p2p connection with rank %d: blocks of %d and %d bytes for a geometry of %d", pr.Peer, pr.Local.Size, pr.Remote.Size, conn)
			}
			l, err := b.bytes(pr.Local.Ptr, conn)
			if err != nil {
				return nil, err
			}
			r, err := b.bytes(pr.Remote.Ptr, conn)
			if err != nil {
				return nil, err
			}
			out[i] = p2pPeer{P2PPeer: pr, local: l, remote: r, port: pr.Port}
			if pt := pr.Port; pt != nil && (len(pt.Lanes) == 0 || slices.ContainsFunc(pt.Lanes, func(l device.P2PLane) bool { return l.Conn == nil }) ||
				len(pt.Arrive) < a.Geometry.Channels || len(pt.Credit) < a.Geometry.Channels) {
				return nil, fmt.Errorf("host: p2p connection with rank %d across nodes: %d lane(s), %d arrival and %d credit channels for %d channels", pr.Peer, len(pt.Lanes), len(pt.Arrive), len(pt.Credit), a.Geometry.Channels)
			}
		}
		return out, nil
	}
	if p.sends, err = peers(a.Sends); err != nil {
		return nil, err
	}
	if p.recvs, err = peers(a.Recvs); err != nil {
		return nil, err
	}
	return p, nil
}

// RebaseP2P implements device.P2PRebaser: a copy of p's arguments with
// every send-side buffer moved by send bytes and every receive-side one by
// recv bytes, sharing p's connection blocks and abort word.
func (b *backend) RebaseP2P(pp device.Prepared, send, recv int64) (device.Prepared, error) {
	p, ok := pp.(*p2pPrepared)
	if !ok || p == nil {
		return nil, fmt.Errorf("host: rebase of a %T", pp)
	}
	a := *p.a
	moved := func(list []device.P2PPeer, d int64) []device.P2PPeer {
		out := make([]device.P2PPeer, len(list))
		for i, pr := range list {
			out[i] = pr
			out[i].Xfers = make([]device.P2PXfer, len(pr.Xfers))
			for j, x := range pr.Xfers {
				x.Buf += device.Ptr(d)
				out[i].Xfers[j] = x
			}
		}
		return out
	}
	a.Sends, a.Recvs = moved(p.a.Sends, send), moved(p.a.Recvs, recv)
	a.Self = make([]device.P2PCopy, len(p.a.Self))
	for i, c := range p.a.Self {
		c.Src += device.Ptr(send)
		c.Dst += device.Ptr(recv)
		a.Self[i] = c
	}
	q := &p2pPrepared{a: &a, abort: p.abort, sends: make([]p2pPeer, len(p.sends)), recvs: make([]p2pPeer, len(p.recvs))}
	for i := range p.sends {
		q.sends[i] = p.sends[i]
		q.sends[i].P2PPeer = &a.Sends[i]
	}
	for i := range p.recvs {
		q.recvs[i] = p.recvs[i]
		q.recvs[i].P2PPeer = &a.Recvs[i]
	}
	return q, nil
}

// p2pRun is one launch of the engine on this rank.
type p2pRun struct {
	ctx  context.Context
	b    *backend
	p    *p2pPrepared
	a    *device.P2PArgs
	g    launch.P2PGeometry
	stop atomic.Bool
	// The matrix's prefix sums (AlltoAllv): rowOff[j] is the byte offset of
	// the block for rank j in the send buffer, colOff[i] that of rank i's
	// block in the receive buffer; n+1 entries each.
	rowOff, colOff []int64

	failures launch.Failures
}

func (r *p2pRun) fail(err error) {
	r.failures.Add(err)
	r.stop.Store(true)
	atomic.StoreUint64(r.p.abort, 1)
}

// errorf is a failure of lane's transfer step (an index into its peer's
// transfers) with peer (-1: none).
func (r *p2pRun) errorf(lane, step, peer int, sentinel error, format string, args ...any) error {
	where := "point-to-point"
	if lane >= 0 {
		where += fmt.Sprintf(" lane %d", lane)
	}
	return &launch.Error{Rank: r.a.Rank, Logical: r.a.Rank, TB: -1, Step: -1, Peer: peer,
		Msg: where + ": " + fmt.Sprintf(format, args...), Err: sentinel}
}

// runP2P runs one launch: the matrix (AlltoAllv) read and checked, then
// every lane.
func runP2P(ctx context.Context, p *p2pPrepared) error {
	r := &p2pRun{ctx: ctx, b: theBackend, p: p, a: p.a, g: p.a.Geometry}
	if p.a.Matrix != nil {
		if err := r.matrix(); err != nil {
			atomic.StoreUint64(p.abort, 1)
			r.poison()
			return err
		}
	}
	k := r.g.Channels
	var wg sync.WaitGroup
	for lane := range 2 * k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if x := recover(); x != nil { // a bug here must not crash the process
					r.fail(r.errorf(lane, -1, -1, nil, "internal error: %v", x))
				}
			}()
			var err error
			if lane < k {
				err = r.sendLane(lane)
			} else {
				err = r.recvLane(lane-k, lane)
			}
			if err != nil {
				r.fail(err)
			}
		}()
	}
	wg.Wait()
	if r.failures.Len() > 0 {
		r.poison()
		return r.failures.Summary(launch.ErrP2PMismatch)
	}
	return nil
}

// poison tells every peer of a failed launch, on every channel, that it
// failed: an abort header in each FIFO that has a free slot, an abort post
// in each post line, so that the peers' launches fail at once instead of
// at their timeout. (The communicator is broken from here on.)
func (r *p2pRun) poison() {
	g := r.g
	for i := range r.p.sends {
		pr := &r.p.sends[i]
		for ch := range g.Channels {
			st := pr.local[g.LaneState(ch, false):]
			sent := w(st, 8*launch.P2PStateChunks)
			if *sent-atomic.LoadUint64(w(pr.local, g.Credit(ch))) >= uint64(g.Slots) {
				continue
			}
			k := int(*sent % uint64(g.Slots))
			hdr := pr.remote[g.Header(ch, k) : g.Header(ch, k)+launch.P2PLine]
			*w(hdr, 8*launch.P2PHdrKind) = launch.P2PKindAbort
			*sent++
			atomic.StoreUint64(w(hdr, 8*launch.P2PHdrFlag), *sent)
			_ = pr.publishPort(ch, g.Header(ch, k)) // (a failed connection tells the peer by itself)
		}
	}
	for i := range r.p.recvs {
		pr := &r.p.recvs[i]
		for ch := range g.Channels {
			post := pr.remote[g.Post(ch) : g.Post(ch)+launch.P2PLine]
			if *w(post, 8*launch.P2PPostType)>>32 == launch.P2PPostError {
				continue // the mismatch says more
			}
			*w(post, 8*launch.P2PPostType) = launch.P2PPostAbort << 32
			atomic.StoreUint64(w(post, 8*launch.P2PPostTSeq), launch.P2PAbortSeq)
			_ = pr.postPort(ch, g.Post(ch))
		}
	}
}

// matrix reads this rank's row and column of the GPU counts matrix, checks
// them against the CPU matrix's capacity (and copy, in checking mode) and
// computes the blocks' offsets.
func (r *p2pRun) matrix() error {
	m, n, me := r.a.Matrix, r.a.NRanks, r.a.Rank
	cb, err := r.b.bytes(m.Counts, int64(n*n)*8)
	if err != nil {
		return r.errorf(-1, -1, -1, nil, "the GPU counts matrix: %v", err)
	}
	counts := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(cb))), n*n)
	var check []uint64
	if m.Check != 0 {
		kb, err := r.b.bytes(m.Check, int64(n*n)*8)
		if err != nil {
			return r.errorf(-1, -1, -1, nil, "the CPU counts matrix's copy: %v", err)
		}
		check = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(kb))), n*n)
	}
	r.rowOff, r.colOff = make([]int64, n+1), make([]int64, n+1)
	for j := range n {
		for _, e := range []struct {
			idx int
			off []int64
		}{{me*n + j, r.rowOff}, {j*n + me, r.colOff}} {
			v := counts[e.idx]
			if check != nil && v != check[e.idx] {
				return r.errorf(-1, -1, -1, launch.ErrP2PMatrix, "ncclAlltoAllv: the GPU counts matrix holds %d at [%d][%d], the CPU matrix %d (THESEUS_ALLTOALLV_CHECK)",
					v, e.idx/n, e.idx%n, check[e.idx])
			}
			b := int64(v) * m.ElemSize
			if v > uint64(1)<<56 || e.off[j] > 1<<62-b {
				b = 1 << 62 // overflow: fails the capacity check below
			}
			e.off[j+1] = e.off[j] + b
		}
	}
	if r.rowOff[n] > m.SendCap || r.colOff[n] > m.RecvCap {
		return r.errorf(-1, -1, -1, launch.ErrP2PMatrix, "ncclAlltoAllv: the GPU counts matrix sends %d and receives %d bytes on this rank, the CPU matrix planned %d and %d",
			r.rowOff[n], r.colOff[n], m.SendCap, m.RecvCap)
	}
	return nil
}

// xfer resolves transfer x with peer (this rank's row or column entry of
// the matrix for Matrix transfers): its bytes and buffer address.
func (r *p2pRun) xfer(x *device.P2PXfer, peer int, recv bool) (int64, device.Ptr) {
	if !x.Matrix {
		return x.Bytes, x.Buf
	}
	off := r.rowOff
	if recv {
		off = r.colOff
	}
	return off[peer+1] - off[peer], x.Buf + device.Ptr(off[peer])
}

// w views the 8-byte word at byte offset off of b.
func w(b []byte, off int64) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// wait blocks until cond holds, the launch stops (another lane failed,
// the abort word, the stream's context) or the timeout passes. A wait on
// a peer of another node (conn non-nil: the lane of the channel waited
// on) waits through its connection (device.PortConn.WaitUntil), which
// helps the proxy progress the puts and signals it waits for instead of
// sleeping; it returns nil when the connection failed (cond's callers
// check it: portErr).
func (r *p2pRun) wait(cond func() bool, lane, step, peer int, conn device.PortConn, what func() string) error {
	if conn != nil {
		return r.waitPort(cond, lane, step, peer, conn, what)
	}
	for i := 0; i < 64; i++ {
		if cond() {
			return nil
		}
		if i%8 == 7 {
			runtime.Gosched()
		}
	}
	timeout := r.timeout()
	start := time.Now()
	sleep := 2 * time.Microsecond
	for {
		if cond() {
			return nil
		}
		if err := r.stopped(lane, step, peer, what); err != nil {
			return err
		}
		if el := time.Since(start); el >= timeout {
			return r.timedOut(lane, step, peer, el, what)
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, 500*time.Microsecond, max(timeout/8, 2*time.Microsecond))
	}
}

// timeout bounds each of the launch's waits (Args.Timeout, else the
// default).
func (r *p2pRun) timeout() time.Duration {
	if r.a.Timeout > 0 {
		return r.a.Timeout
	}
	return launch.DefaultTimeout
}

// stopped is the error of a wait that the launch stopped (another lane
// failed, the abort word, the stream's context), or nil.
func (r *p2pRun) stopped(lane, step, peer int, what func() string) error {
	if r.stop.Load() || atomic.LoadUint64(r.p.abort) != 0 {
		return r.errorf(lane, step, peer, launch.ErrAborted, "aborted while waiting for %s", what())
	}
	if err := r.ctx.Err(); err != nil {
		return r.errorf(lane, step, peer, fmt.Errorf("%w: %w", launch.ErrAborted, err), "%v while waiting for %s", err, what())
	}
	return nil
}

// timedOut is the error of a wait that lasted el, past the timeout.
func (r *p2pRun) timedOut(lane, step, peer int, el time.Duration, what func() string) error {
	return r.errorf(lane, step, peer, launch.ErrTimeout, "timed out after %v waiting for %s", el.Round(time.Millisecond), what())
}

// waitPort is wait for a peer on another node.
func (r *p2pRun) waitPort(cond func() bool, lane, step, peer int, conn device.PortConn, what func() string) error {
	start := time.Now()
	var stopErr error
	stop := func() error {
		stopErr = r.stopped(lane, step, peer, what)
		return stopErr
	}
	err := conn.WaitUntil(cond, peer, stop)
	switch {
	case err == nil || cond() || conn.Err() != nil:
		return nil
	case stopErr != nil:
		return stopErr
	}
	if el := time.Since(start); el >= r.timeout() {
		return r.timedOut(lane, step, peer, el, what)
	}
	return r.portErr(lane, step, peer, err, "%s", what())
}

// view is the memory of a user buffer while the launch runs.
func (r *p2pRun) view(p device.Ptr, n int64, lane, step, peer int, what string) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	b, err := r.b.bytes(p, n)
	if err != nil {
		return nil, r.errorf(lane, step, peer, nil, "%s: %v", what, err)
	}
	return b, nil
}

// sendLane runs send lane ch: its share of the self copies, then channel
// ch of every peer it sends to, in round order.
func (r *p2pRun) sendLane(ch int) error {
	g := r.g
	for i := range r.a.Self {
		c := &r.a.Self[i]
		n, src, dst := c.Bytes, c.Src, c.Dst
		if c.Matrix {
			me := r.a.Rank
			n = r.rowOff[me+1] - r.rowOff[me]
			src, dst = c.Src+device.Ptr(r.rowOff[me]), c.Dst+device.Ptr(r.colOff[me])
		}
		if g.Used(n) <= ch || src == dst {
			continue
		}
		sb, err := r.view(src, n, ch, i, r.a.Rank, "self send buffer")
		if err != nil {
			return err
		}
		db, err := r.view(dst, n, ch, i, r.a.Rank, "self receive buffer")
		if err != nil {
			return err
		}
		used := int64(g.Used(n))
		for j := int64(ch); j*g.ChunkBytes < n; j += used {
			lo, hi := j*g.ChunkBytes, min((j+1)*g.ChunkBytes, n)
			copy(db[lo:hi], sb[lo:hi])
		}
	}
	for pi := range r.p.sends {
		if err := r.sendPeer(ch, &r.p.sends[pi]); err != nil {
			return err
		}
	}
	return nil
}

// sendPeer runs channel ch of the transfers to one peer.
func (r *p2pRun) sendPeer(ch int, pr *p2pPeer) error {
	g, q := r.g, pr.Peer
	st := pr.local[g.LaneState(ch, false):]
	sent, tsent := w(st, 8*launch.P2PStateChunks), w(st, 8*launch.P2PStateTransfers)
	credit := w(pr.local, g.Credit(ch))
	post := pr.local[g.Post(ch) : g.Post(ch)+launch.P2PLine]
	var slotK int // the slot slot returned last
	// slot waits for a free slot of the peer's FIFO (a credit), or for the
	// peer's error post for this transfer, and returns its header and data.
	// While look, it also returns (nil, nil, nil) when the receiver has
	// posted transfer tseq first (no slot taken).
	posted := func(tseq uint64) bool { return atomic.LoadUint64(w(post, 8*launch.P2PPostTSeq)) >= tseq }
	slot := func(step int, tseq uint64, look bool) ([]byte, []byte, error) {
		s := *sent
		err := r.wait(func() bool {
			return s-atomic.LoadUint64(credit) < uint64(g.Slots) || postError(post, tseq) || pr.portFailed() || look && posted(tseq)
		}, ch, step, q, pr.conn(ch), func() string {
			return fmt.Sprintf("rank %d to free a slot of channel %d (send #%d to it; it consumed %d of %d chunks)", q, ch, tseq, atomic.LoadUint64(credit), s)
		})
		if err != nil {
			return nil, nil, err
		}
		if err := pr.portErrNow(); err != nil && s-atomic.LoadUint64(credit) >= uint64(g.Slots) {
			return nil, nil, r.portErr(ch, step, q, err, "a free slot of channel %d (send #%d)", ch, tseq)
		}
		if postError(post, tseq) {
			return nil, nil, r.postMismatch(ch, step, q, post, tseq)
		}
		if look && posted(tseq) {
			return nil, nil, nil // the post first, then (if it gives no destination) a slot
		}
		k := int(s % uint64(g.Slots))
		slotK = k
		return pr.remote[g.Header(ch, k) : g.Header(ch, k)+launch.P2PLine], pr.remote[g.Data(ch, k) : g.Data(ch, k)+g.ChunkBytes], nil
	}
	// publish publishes the header of the slot last returned by slot
	// (across nodes: puts its data, n bytes, and its header, then signals).
	publish := func(hdr []byte, tseq uint64, total, off, n int64, kind uint64, dt ir.DataType) error {
		*w(hdr, 8*launch.P2PHdrTSeq) = tseq
		*w(hdr, 8*launch.P2PHdrTotal) = uint64(total)
		*w(hdr, 8*launch.P2PHdrOff) = uint64(off)
		*w(hdr, 8*launch.P2PHdrLen) = uint64(n)
		*w(hdr, 8*launch.P2PHdrKind) = kind | uint64(dt)<<32
		*sent++
		atomic.StoreUint64(w(hdr, 8*launch.P2PHdrFlag), *sent) // after the data and the header's words
		if pr.port == nil {
			return nil
		}
		if kind == launch.P2PKindData && n > 0 {
			if err := pr.putPort(ch, g.Data(ch, slotK), n, false); err != nil {
				return r.portErr(ch, -1, q, err, "the data of send #%d", tseq)
			}
		}
		if err := pr.publishPort(ch, g.Header(ch, slotK)); err != nil {
			return r.portErr(ch, -1, q, err, "the header of send #%d", tseq)
		}
		return nil
	}
	for i := range pr.Xfers {
		x := &pr.Xfers[i]
		*tsent++
		tseq := *tsent
		total, buf := r.xfer(x, q, false)
		used := int64(g.Used(total))
		if int64(ch) >= used {
			continue
		}
		src, err := r.view(buf, total, ch, i, q, fmt.Sprintf("send #%d's buffer", tseq))
		if err != nil {
			return err
		}
		// A transfer above the eager bytes to a peer whose offers this
		// rank imported goes straight into the receiver's buffer from the
		// first chunk at which the receiver has posted it (the chunks
		// before go through the FIFO): the send never waits for the post,
		// so that it completes into the receiver's FIFO while that has
		// room, also when the receive comes in a later launch (NCCL's
		// ungrouped send, then receive, on both ranks). (Across nodes
		// there are no imports: the FIFO only.)
		look := total > r.a.EagerBytes && r.a.Direct && len(pr.Imports) > 0
		// take looks at the receiver's post for tseq: ok reports whether
		// it is there; dst is the posted buffer as this rank imported it
		// (nil: in no import, the FIFO for the rest).
		take := func() (dst []byte, ok bool, err error) {
			if !posted(tseq) {
				return nil, false, nil
			}
			pt := *w(post, 8*launch.P2PPostType)
			ptotal, pdt := int64(*w(post, 8*launch.P2PPostTotal)), ir.DataType(pt&0xffffffff)
			pseq := atomic.LoadUint64(w(post, 8*launch.P2PPostTSeq))
			if pt>>32 != 0 {
				return nil, true, r.postMismatch(ch, i, q, post, tseq)
			}
			if pseq != tseq {
				// The receiver is past this transfer on this channel: its
				// receive tseq had nothing here, so the two disagree.
				return nil, true, r.errorf(ch, i, q, launch.ErrP2PMismatch, "send #%d to rank %d has %d bytes of %s, but rank %d's receives do not match it (its receive #%d posts here first; NCCL 2.25: a send and its receive must agree on count and datatype; each pair's calls are matched in order)",
					tseq, q, total, x.DataType, q, pseq)
			}
			if ptotal != total || pdt != x.DataType {
				if s := *sent; s-atomic.LoadUint64(credit) < uint64(g.Slots) { // tell the receive, if a slot is free
					slotK = int(s % uint64(g.Slots))
					hdr := pr.remote[g.Header(ch, slotK) : g.Header(ch, slotK)+launch.P2PLine]
					*w(hdr, 8*launch.P2PHdrWant) = uint64(ptotal)
					*w(hdr, 8*launch.P2PHdrWantT) = uint64(pdt)
					_ = publish(hdr, tseq, total, 0, 0, launch.P2PKindError, x.DataType)
				}
				return nil, true, r.errorf(ch, i, q, launch.ErrP2PMismatch, "send #%d to rank %d has %d bytes of %s, but rank %d's receive #%d from this rank expects %d bytes of %s (NCCL 2.25: a send and its receive must agree on count and datatype; each pair's calls are matched in order)",
					tseq, q, total, x.DataType, q, tseq, ptotal, pdt)
			}
			return r.directDst(pr, *w(post, 8*launch.P2PPostGen), device.Ptr(*w(post, 8*launch.P2PPostAddr)), total), true, nil
		}
		// next returns the destination the post gives, or a free slot's
		// header and data.
		next := func() (dst, hdr, data []byte, err error) {
			for {
				if look {
					d, ok, err := take()
					if err != nil {
						return nil, nil, nil, err
					}
					if ok {
						look = false
						if d != nil {
							return d, nil, nil, nil
						}
					}
				}
				if hdr, data, err := slot(i, tseq, look); err != nil || hdr != nil {
					return nil, hdr, data, err
				}
			}
		}
		var dst []byte
		var dlo int64 // the first byte written directly
		for j := int64(ch); j*g.ChunkBytes < total; j += used {
			lo, hi := j*g.ChunkBytes, min((j+1)*g.ChunkBytes, total)
			if dst == nil {
				d, hdr, data, err := next()
				if err != nil {
					return err
				}
				if d == nil {
					copy(data, src[lo:hi])
					if err := publish(hdr, tseq, total, lo, hi-lo, launch.P2PKindData, x.DataType); err != nil {
						return err
					}
					continue
				}
				dst, dlo = d, lo
			}
			copy(dst[lo:hi], src[lo:hi])
		}
		if dst != nil {
			hdr, _, err := slot(i, tseq, false)
			if err != nil {
				return err
			}
			if err := publish(hdr, tseq, total, dlo, g.Share(total, ch)-(dlo/g.ChunkBytes-int64(ch))/used*g.ChunkBytes, launch.P2PKindDirect, x.DataType); err != nil {
				return err
			}
		}
	}
	return nil
}

// directDst is the peer's posted buffer [addr, addr+n) in the allocation
// it offered under id gen, as this rank mapped it, or nil when it has not
// imported that offer.
func (r *p2pRun) directDst(pr *p2pPeer, gen uint64, addr device.Ptr, n int64) []byte {
	if gen == 0 {
		return nil
	}
	for _, im := range pr.Imports {
		if im.ID == gen && addr >= im.PeerBase && int64(addr-im.PeerBase) <= im.Size-n {
			b, err := r.b.bytes(im.Local+(addr-im.PeerBase), n)
			if err != nil {
				return nil
			}
			return b
		}
	}
	return nil
}

// postError reports whether the post holds the peer's error for transfer
// tseq (or its abort).
func postError(post []byte, tseq uint64) bool {
	return atomic.LoadUint64(w(post, 8*launch.P2PPostTSeq)) >= tseq && *w(post, 8*launch.P2PPostType)>>32 != 0
}

func (r *p2pRun) postMismatch(ch, step, q int, post []byte, tseq uint64) error {
	if *w(post, 8*launch.P2PPostType)>>32 == launch.P2PPostAbort {
		return r.errorf(ch, step, q, launch.ErrP2PAborted, "rank %d's launch failed while this rank's send #%d to it was due (see rank %d's error)", q, tseq, q)
	}
	return r.errorf(ch, step, q, launch.ErrP2PMismatch, "rank %d found that its receive #%d from this rank and send #%d disagree (it expects %d bytes of %s; NCCL 2.25: a send and its receive must agree on count and datatype, matched in order per pair)",
		q, tseq, tseq, *w(post, 8*launch.P2PPostTotal), ir.DataType(*w(post, 8*launch.P2PPostType)&0xffffffff))
}

// recvLane runs receive lane ch (threadblock lane): the first receive of
// every peer is posted at once, then channel ch of every peer it receives
// from is read in round order.
func (r *p2pRun) recvLane(ch, lane int) error {
	g := r.g
	// next posts the first receive from i on (of transfer number tseq) that
	// has data on this channel.
	next := func(pr *p2pPeer, i int, tseq uint64) {
		for ; i < len(pr.Xfers); i, tseq = i+1, tseq+1 {
			x := &pr.Xfers[i]
			total, buf := r.xfer(x, pr.Peer, true)
			if g.Used(total) > ch {
				if pr.port != nil {
					return // (no direct writes across nodes: nothing reads the post)
				}
				post := pr.remote[g.Post(ch) : g.Post(ch)+launch.P2PLine]
				*w(post, 8*launch.P2PPostTotal) = uint64(total)
				*w(post, 8*launch.P2PPostType) = uint64(x.DataType)
				*w(post, 8*launch.P2PPostAddr) = uint64(buf)
				*w(post, 8*launch.P2PPostGen) = x.Offer
				atomic.StoreUint64(w(post, 8*launch.P2PPostTSeq), tseq)
				return
			}
		}
	}
	for pi := range r.p.recvs {
		pr := &r.p.recvs[pi]
		next(pr, 0, *w(pr.local[g.LaneState(ch, true):], 8*launch.P2PStateTransfers)+1)
	}
	for pi := range r.p.recvs {
		if err := r.recvPeer(ch, lane, &r.p.recvs[pi], next); err != nil {
			return err
		}
	}
	return nil
}

// recvPeer reads channel ch of the transfers from one peer.
func (r *p2pRun) recvPeer(ch, lane int, pr *p2pPeer, next func(*p2pPeer, int, uint64)) error {
	g, q := r.g, pr.Peer
	st := pr.local[g.LaneState(ch, true):]
	recvd, trecv := w(st, 8*launch.P2PStateChunks), w(st, 8*launch.P2PStateTransfers)
	credit := w(pr.remote, g.Credit(ch))
	post := pr.remote[g.Post(ch) : g.Post(ch)+launch.P2PLine]
	for i := range pr.Xfers {
		x := &pr.Xfers[i]
		*trecv++
		tseq := *trecv
		total, buf := r.xfer(x, q, true)
		used := int64(g.Used(total))
		if int64(ch) >= used {
			continue
		}
		dst, err := r.view(buf, total, lane, i, q, fmt.Sprintf("receive #%d's buffer", tseq))
		if err != nil {
			return err
		}
		// mismatch fails this receive and tells the sender (an error post).
		mismatch := func(stotal int64, sdt ir.DataType, sseq uint64) error {
			*w(post, 8*launch.P2PPostTotal) = uint64(total)
			*w(post, 8*launch.P2PPostType) = uint64(x.DataType) | launch.P2PPostError<<32
			atomic.StoreUint64(w(post, 8*launch.P2PPostTSeq), tseq)
			_ = pr.postPort(ch, g.Post(ch))
			return r.errorf(lane, i, q, launch.ErrP2PMismatch, "receive #%d from rank %d expects %d bytes of %s, but rank %d's send #%d to this rank has %d bytes of %s (NCCL 2.25: a send and its receive must agree on count and datatype; each pair's calls are matched in order)",
				tseq, q, total, x.DataType, q, sseq, stotal, sdt)
		}
		for j := int64(ch); j*g.ChunkBytes < total; j += used {
			k := int(*recvd % uint64(g.Slots))
			hdr := pr.local[g.Header(ch, k) : g.Header(ch, k)+launch.P2PLine]
			want := *recvd + 1
			ready := func() bool { return atomic.LoadUint64(w(hdr, 8*launch.P2PHdrFlag)) >= want }
			if pr.port != nil {
				// Across nodes the signal that follows the header's put.
				arrived := w(st, 8*launch.P2PStateArrived)
				ready = func() bool { return atomic.LoadUint64(arrived) >= want || pr.portFailed() }
			}
			err := r.wait(ready, lane, i, q, pr.conn(ch), func() string {
				return fmt.Sprintf("rank %d's send #%d on channel %d (receive #%d of %d bytes from it)", q, tseq, ch, tseq, total)
			})
			if err != nil {
				return err
			}
			if pr.port != nil {
				if err := pr.portErrNow(); err != nil && atomic.LoadUint64(w(st, 8*launch.P2PStateArrived)) < want {
					return r.portErr(lane, i, q, err, "send #%d on channel %d", tseq, ch)
				}
				if f := atomic.LoadUint64(w(hdr, 8*launch.P2PHdrFlag)); f < want {
					return r.errorf(lane, i, q, nil, "receive #%d from rank %d: the signal of chunk %d arrived before its header (flag %d): the proxy's ordering is broken", tseq, q, want, f)
				}
			}
			kd := *w(hdr, 8*launch.P2PHdrKind)
			kind, sdt := kd&0xffffffff, ir.DataType(kd>>32)
			sseq, stotal := *w(hdr, 8*launch.P2PHdrTSeq), int64(*w(hdr, 8*launch.P2PHdrTotal))
			if kind == launch.P2PKindAbort {
				return r.errorf(lane, i, q, launch.ErrP2PAborted, "rank %d's launch failed while this rank's receive #%d from it was due (see rank %d's error)", q, tseq, q)
			}
			if kind == launch.P2PKindError {
				return r.errorf(lane, i, q, launch.ErrP2PMismatch, "rank %d found that its send #%d to this rank (%d bytes of %s) and receive #%d (%d bytes of %s) disagree (NCCL 2.25: a send and its receive must agree on count and datatype, matched in order per pair)",
					q, sseq, stotal, sdt, tseq, *w(hdr, 8*launch.P2PHdrWant), ir.DataType(*w(hdr, 8*launch.P2PHdrWantT)))
			}
			if sseq != tseq || stotal != total || sdt != x.DataType {
				return mismatch(stotal, sdt, sseq)
			}
			*recvd++
			if kind == launch.P2PKindDirect {
				// The rest of the channel's share, from chunk j on, is in place.
				if err := pr.credit(credit, *recvd, ch); err != nil {
					return r.portErr(lane, i, q, err, "a credit of channel %d", ch)
				}
				rest := g.Share(total, ch) - (j-int64(ch))/used*g.ChunkBytes
				if lo, n := int64(*w(hdr, 8*launch.P2PHdrOff)), int64(*w(hdr, 8*launch.P2PHdrLen)); lo != j*g.ChunkBytes || n != rest {
					return r.errorf(lane, i, q, nil, "receive #%d from rank %d: %d bytes written directly on channel %d from byte %d where %d were due from byte %d (a broken peer)", tseq, q, n, ch, lo, rest, j*g.ChunkBytes)
				}
				break
			}
			lo, n := int64(*w(hdr, 8*launch.P2PHdrOff)), int64(*w(hdr, 8*launch.P2PHdrLen))
			if lo != j*g.ChunkBytes || n != min(g.ChunkBytes, total-lo) {
				return r.errorf(lane, i, q, nil, "receive #%d from rank %d: chunk at %d of %d bytes where chunk %d was due (a broken peer)", tseq, q, lo, n, j)
			}
			copy(dst[lo:lo+n], pr.local[g.Data(ch, k):g.Data(ch, k)+n])
			if err := pr.credit(credit, *recvd, ch); err != nil { // the slot is free
				return r.portErr(lane, i, q, err, "a credit of channel %d", ch)
			}
		}
		next(pr, i+1, tseq+1)
	}
	return nil
}

// Connections across nodes (device.P2PPort): what this rank writes into
// remote (its copy of the peer's block) is put into the peer's block.

// putPort puts n bytes at byte off of the block copy into the peer's
// block, with a signal on channel ch's arrival channel after it when
// signal is set.
func (pr *p2pPeer) putPort(ch int, off, n int64, signal bool) error {
	pt := pr.port
	_, err := pt.Lane(ch).Put(pt.Arrive[ch], pt.Src, uint64(off), pt.Dst, uint64(off), uint32(n), signal)
	return err
}

// publishPort puts the header line at off and signals its arrival (a
// no-op for a peer of this node).
func (pr *p2pPeer) publishPort(ch int, off int64) error {
	if pr.port == nil {
		return nil
	}
	return pr.putPort(ch, off, launch.P2PLine, true)
}

// postPort puts an error or abort post line at off and waits until it is
// at the peer (a no-op for a peer of this node).
func (pr *p2pPeer) postPort(ch int, off int64) error {
	pt := pr.port
	if pt == nil {
		return nil
	}
	if _, err := pt.Lane(ch).Put(pt.Credit[ch], pt.Src, uint64(off), pt.Dst, uint64(off), launch.P2PLine, false); err != nil {
		return err
	}
	return pt.Lane(ch).Flush(pt.Credit[ch])
}

// credit returns a slot of channel ch: the credit word of the peer's
// block becomes n (a store here; across nodes a signal, which adds 1).
func (pr *p2pPeer) credit(word *uint64, n uint64, ch int) error {
	if pt := pr.port; pt != nil {
		return pt.Lane(ch).Signal(pt.Credit[ch])
	}
	atomic.StoreUint64(word, n)
	return nil
}

// conn is the connection that carries channel ch of a peer on another
// node (nil for a peer of this node).
func (pr *p2pPeer) conn(ch int) device.PortConn {
	if pr.port == nil {
		return nil
	}
	return pr.port.Lane(ch)
}

func (pr *p2pPeer) portFailed() bool { return pr.port != nil && pr.port.Err() != nil }

func (pr *p2pPeer) portErrNow() error {
	if pr.port == nil {
		return nil
	}
	return pr.port.Err()
}

// portErr is a failure of the connection to peer (its UCX status text).
func (r *p2pRun) portErr(lane, step, peer int, err error, format string, args ...any) error {
	return r.errorf(lane, step, peer, err, "port channel to rank %d (another node) failed at %s: %v", peer, fmt.Sprintf(format, args...), err)
}
