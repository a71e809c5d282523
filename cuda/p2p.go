package cuda

/*
#include "kernel/launch.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// The point-to-point engine on the GPU (docs/p2p.md; the kernel is
// kernel/p2p.cuh, the protocol runtime/launch's p2p.go): PrepareP2P
// uploads a launch's descriptor (kernel/launch.h's theseus_p2p_launch and
// its arrays) once per call shape, and the launch is the uint8 module's
// theseus_p2p entry on 2 x channels threadblocks, launched through the
// stream as any prepared launch (CaptureLaunch: CUDA graphs capture it).

// P2PKernelName is the point-to-point engine's entry point, in the uint8
// module only (the engine moves bytes).
const P2PKernelName = "theseus_p2p"

// P2PBasesName is an entry point that does nothing, in the uint8 modules
// whose P2PKernelName adds the launch argument's buffer offsets to its
// send-side and receive-side buffers (kernel/p2p.cuh, p2p_base): those
// whose launches RebaseP2P moves. A module built before them (through
// THESEUS_PTX_DIR) lacks it: its launches are prepared for every call's
// buffers.
const P2PBasesName = "theseus_p2p_bases"

// p2pContract is 0 when kernel/launch.h's copy of the contract's numbers
// is runtime/launch's (TestP2PContract; no GPU needed).
func p2pContract() int {
	pairs := [][2]int64{
		{C.THESEUS_P2P_LINE, launch.P2PLine}, {C.THESEUS_P2P_CHUNK_ALIGN, launch.P2PChunkAlign},
		{C.THESEUS_P2P_STATE_CHUNKS, launch.P2PStateChunks}, {C.THESEUS_P2P_STATE_TRANSFERS, launch.P2PStateTransfers},
		{C.THESEUS_P2P_STATE_ARRIVED, launch.P2PStateArrived},
		{C.THESEUS_P2P_HDR_FLAG, launch.P2PHdrFlag}, {C.THESEUS_P2P_HDR_TSEQ, launch.P2PHdrTSeq},
		{C.THESEUS_P2P_HDR_TOTAL, launch.P2PHdrTotal}, {C.THESEUS_P2P_HDR_OFF, launch.P2PHdrOff},
		{C.THESEUS_P2P_HDR_LEN, launch.P2PHdrLen}, {C.THESEUS_P2P_HDR_KIND, launch.P2PHdrKind},
		{C.THESEUS_P2P_HDR_WANT, launch.P2PHdrWant}, {C.THESEUS_P2P_HDR_WANTT, launch.P2PHdrWantT},
		{C.THESEUS_P2P_POST_TSEQ, launch.P2PPostTSeq}, {C.THESEUS_P2P_POST_TOTAL, launch.P2PPostTotal},
		{C.THESEUS_P2P_POST_TYPE, launch.P2PPostType}, {C.THESEUS_P2P_POST_ADDR, launch.P2PPostAddr},
		{C.THESEUS_P2P_POST_GEN, launch.P2PPostGen},
		{C.THESEUS_P2P_KIND_DATA, launch.P2PKindData}, {C.THESEUS_P2P_KIND_DIRECT, launch.P2PKindDirect},
		{C.THESEUS_P2P_KIND_ERROR, launch.P2PKindError}, {C.THESEUS_P2P_KIND_ABORT, launch.P2PKindAbort},
		{C.THESEUS_P2P_POST_ERROR, launch.P2PPostError}, {C.THESEUS_P2P_POST_ABORT, launch.P2PPostAbort},
		{C.THESEUS_P2P_ABORT_SEQ, launch.P2PAbortSeq}, {C.THESEUS_P2P_MAX_MATRIX, p2pMaxMatrix},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			return 1
		}
	}
	return 0
}

// p2pMaxMatrix is comm.MaxAlltoAllvRanks (the kernel's shared prefix sums);
// cuda does not import the communicator, so the number is stated twice and
// checked here and in comm's tests.
const p2pMaxMatrix = 1024

// PrepareP2P implements device.P2PPreparer: the descriptor and its arrays
// in one device allocation, uploaded on the control stream; the launch
// argument names it.
func (b *Backend) PrepareP2P(a *device.P2PArgs) (device.Prepared, error) {
	if a == nil {
		return nil, errors.New("cuda: PrepareP2P without arguments")
	}
	g := a.Geometry
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("cuda: p2p geometry: %w", err)
	}
	r, err := p2pRecords(a)
	if err != nil {
		return nil, err
	}
	peers, xfers, imps, selfs, chans, lanes := r.peers, r.xfers, r.imps, r.selfs, r.chans, r.lanes
	desc := C.theseus_p2p_launch{chunk_bytes: C.int64_t(g.ChunkBytes), eager_bytes: C.int64_t(a.EagerBytes), slots: C.int32_t(g.Slots),
		channels: C.int32_t(g.Channels), nsend: C.int32_t(len(a.Sends)), nrecv: C.int32_t(len(a.Recvs)), nself: C.int32_t(len(selfs)),
		direct: C.int32_t(b2u8(a.Direct))}
	if m := a.Matrix; m != nil {
		if a.NRanks > p2pMaxMatrix {
			return nil, fmt.Errorf("cuda: AlltoAllv of %d ranks: the kernel serves up to %d", a.NRanks, p2pMaxMatrix)
		}
		desc.matrix, desc.check = C.uint64_t(m.Counts), C.uint64_t(m.Check)
		desc.send_cap, desc.recv_cap, desc.elem_size = C.int64_t(m.SendCap), C.int64_t(m.RecvCap), C.int64_t(m.ElemSize)
	}
	// One allocation: the descriptor, then the arrays, each 16-aligned.
	var blob []byte
	put := func(p unsafe.Pointer, n int) uint64 {
		off := uint64(len(blob))
		blob = append(blob, unsafe.Slice((*byte)(p), n)...)
		for len(blob)%16 != 0 {
			blob = append(blob, 0)
		}
		return off
	}
	// The help records (kernel/p2p.cuh, "Helping"): zeroed with the rest,
	// kept by the prepared launch, one line pair per channel.
	helps := p2pHelps(a)
	dOff := put(unsafe.Pointer(&desc), int(unsafe.Sizeof(desc)))
	offs := [6]uint64{}
	for i, arr := range []struct {
		p unsafe.Pointer
		n int
	}{
		{unsafe.Pointer(unsafe.SliceData(peers)), len(peers) * int(unsafe.Sizeof(C.theseus_p2p_peer{}))},
		{unsafe.Pointer(unsafe.SliceData(xfers)), len(xfers) * int(unsafe.Sizeof(C.theseus_p2p_xfer{}))},
		{unsafe.Pointer(unsafe.SliceData(imps)), len(imps) * int(unsafe.Sizeof(C.theseus_p2p_import{}))},
		{unsafe.Pointer(unsafe.SliceData(selfs)), len(selfs) * int(unsafe.Sizeof(C.theseus_p2p_copy{}))},
		{unsafe.Pointer(unsafe.SliceData(chans)), len(chans) * 2},
		{unsafe.Pointer(unsafe.SliceData(lanes)), len(lanes) * int(unsafe.Sizeof(C.theseus_p2p_lane{}))},
	} {
		offs[i] = uint64(len(blob))
		if arr.n > 0 {
			put(arr.p, arr.n)
		}
	}
	var helpOff uint64
	if helps {
		for len(blob)%C.THESEUS_P2P_HELP_BYTES != 0 {
			blob = append(blob, 0)
		}
		helpOff = uint64(len(blob))
		blob = append(blob, make([]byte, g.Channels*C.THESEUS_P2P_HELP_BYTES)...)
	}
	want := p2pWantThreads(a.Threads, p2pLargest(a))
	nlocal := p2pSharing(a)
	p := &prepared{b: b, arg: newLaunch(), grid: 2 * g.Channels, threads: want}
	err = b.with(func() (err error) {
		prev, err := driver.ExchangeCaptureMode(driver.CaptureModeRelaxed) // (as Prepare: it may run during a capture)
		if err != nil {
			return err
		}
		defer driver.ExchangeCaptureMode(prev)
		defer func() {
			if err != nil {
				p.Release()
			}
		}()
		k, err := kernel(b.dev.Context(), ir.Uint8)
		if err != nil {
			return err
		}
		if k.p2p == 0 {
			return fmt.Errorf("cuda: the uint8 module has no %s entry", P2PKernelName)
		}
		p.fn, p.p2pBases = k.p2p, k.p2pBases
		sms, aerr := b.dev.Attribute(driver.AttrMultiprocessorCount)
		if aerr != nil {
			sms = 0 // (p2pFitThreads: the device cannot be asked)
		}
		p.threads = p2pFitThreads(want, nlocal*p.grid, sms, k.p2p.MaxActiveBlocksPerSM)
		m, err := b.zeroed(int64(len(blob)))
		if err != nil {
			return err
		}
		p.mem = append(p.mem, m)
		base := uint64(m)
		// The arrays' addresses go into the descriptor before it is uploaded.
		d := (*C.theseus_p2p_launch)(unsafe.Pointer(&blob[dOff]))
		d.peers, d.xfers, d.imports, d.selfs = C.uint64_t(base+offs[0]), C.uint64_t(base+offs[1]), C.uint64_t(base+offs[2]), C.uint64_t(base+offs[3])
		if helps {
			d.help = C.uint64_t(base + helpOff)
		}
		d.chans, d.lanes = C.uint64_t(base+offs[4]), C.uint64_t(base+offs[5])
		if err := driver.CopyHtoDAsync(m, blob, b.ctl); err != nil {
			return err
		}
		fillLaunch(p.arg, launchFields{abort: driver.Ptr(a.Abort), timeout: a.Timeout, rank: a.Rank, nranks: a.NRanks, launch: 1, elemSize: 1, dtype: ir.Uint8})
		fillP2P(p.arg, driver.Ptr(base+dOff))
		return b.ctl.Synchronize()
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// RebaseP2P implements device.P2PRebaser: a copy of p's launch argument
// whose buffer offsets (buf[0] and buf[1], which the kernel adds to every
// send-side and receive-side buffer: kernel/p2p.cuh, p2p_base) move by send
// and recv bytes; the descriptor, its help records and every other device
// word are p's (Release of the copy frees nothing). No driver call, no
// allocation but the copy. Errors: device.ErrNotRebasable when p's kernel
// module does not add the offsets (P2PBasesName); a p that is not a
// point-to-point launch of this backend.
func (b *Backend) RebaseP2P(pp device.Prepared, send, recv int64) (device.Prepared, error) {
	p, ok := pp.(*prepared)
	if !ok || p == nil || p.b != b || p.arg.p2p == 0 {
		return nil, fmt.Errorf("cuda: point-to-point rebase of a %T", pp)
	}
	if !p.p2pBases {
		return nil, device.ErrNotRebasable
	}
	q := &prepared{b: b, fn: p.fn, arg: newLaunch(), grid: p.grid, threads: p.threads, p2pBases: true}
	*q.arg = *p.arg
	moveP2PBases(q.arg, send, recv)
	q.st = p.st // the argument's stream fields are p's
	return q, nil
}

// moveP2PBases adds send and recv bytes to a point-to-point launch
// argument's buffer offsets (modulo 2^64, as the kernel adds them).
func moveP2PBases(a *Launch, send, recv int64) {
	a.buf[0] += C.uint64_t(uint64(send))
	a.buf[1] += C.uint64_t(uint64(recv))
}

// p2pBasesOf are a launch argument's buffer offsets (tests).
func p2pBasesOf(a *Launch) (send, recv int64) { return int64(a.buf[0]), int64(a.buf[1]) }

// The threads per threadblock of a point-to-point launch (docs/p2p.md,
// "Threads"). They are the rank's own (the peer's launch need not use the
// same): the context's threads, else THESEUS_NTHREADS, else by the
// launch's largest transfer (an AlltoAllv's by the CPU matrix): SmallThreads
// up to P2PSmallBytes (a small launch starts and synchronises sooner),
// DefaultThreads above (with idle lanes helping the direct copies, 1024
// threads drew less at 1 GiB than 512: 935 against 955 GB/s,
// bench/results/2026-12-01-h200-twelfth, call G2b). Then fewer, halving,
// while the launch's grid times the ranks of the node (which may share the
// GPU) would not be resident at once.
const P2PSmallBytes = 4 << 10

// P2PMaxThreads is the most threads per threadblock of the point-to-point
// kernel (kernel/launch.h, THESEUS_P2P_MAX_THREADS: its launch bound, which
// leaves it up to 128 registers a thread); a context's threads or
// THESEUS_NTHREADS above it are clamped to it.
const P2PMaxThreads = C.THESEUS_P2P_MAX_THREADS

// p2pWantThreads is the threads a launch asks for: set (the context's,
// when > 0), else THESEUS_NTHREADS, else by largest, the launch's largest
// transfer in bytes.
func p2pWantThreads(set int, largest int64) int {
	if set > 0 {
		return min(set, P2PMaxThreads)
	}
	if n, ok := envThreads(); ok {
		return min(n, P2PMaxThreads)
	}
	if largest <= P2PSmallBytes {
		return SmallThreads
	}
	return DefaultThreads
}

// p2pFitThreads returns the most threads, want or fewer by halving (down
// to 32), at which blocks threadblocks of the kernel are resident at once
// on sms multiprocessors (perSM: the occupancy per block size,
// cuOccupancyMaxActiveBlocksPerMultiprocessor). When the device cannot be
// asked (sms <= 0 or an error), at most DefaultThreads (the launch as it
// ran before the size rule); when no size fits, want (the launch then
// waits on its peers until THESEUS_TIMEOUT, as docs/p2p.md's limits say).
func p2pFitThreads(want, blocks, sms int, perSM func(threads, sharedBytes int) (int, error)) int {
	if sms <= 0 {
		return min(want, DefaultThreads)
	}
	for t := want; t >= 32; t = t / 2 / 32 * 32 {
		err := residentFit(map[int]int{t: blocks}, sms, func(threads int) (int, error) { return perSM(threads, 0) })
		if err == nil {
			return t
		}
		if !errors.Is(err, ErrNotResident) {
			return min(want, DefaultThreads)
		}
	}
	return want
}

// p2pSharing is how many launches like a's may share the GPU for the
// residency check: the ranks counted on this rank's device
// (P2PArgs.DeviceRanks), else the ranks of its node, else all of them.
// (Simulated nodes on one GPU, with distinct MSCCLPP_HOSTIDs, share it
// although they are on different nodes: counting the node's ranks only,
// 2 nodes x 2 ranks on one H200 launched 4 grids of 64 blocks of 512
// threads at one block a multiprocessor, and an alltoall whose channel
// shares overflowed the FIFO waited on blocks never scheduled.)
func p2pSharing(a *device.P2PArgs) int {
	switch {
	case a.DeviceRanks > 0:
		return a.DeviceRanks
	case a.LocalRanks > 0:
		return a.LocalRanks
	}
	return a.NRanks
}

// p2pLargest is a's largest transfer in bytes: its sends', receives' and
// self copies', an AlltoAllv's by the CPU matrix.
func p2pLargest(a *device.P2PArgs) int64 {
	var n int64
	for _, list := range [][]device.P2PPeer{a.Sends, a.Recvs} {
		for _, pr := range list {
			for _, x := range pr.Xfers {
				n = max(n, x.Bytes)
			}
		}
	}
	for _, s := range a.Self {
		n = max(n, s.Bytes)
	}
	if a.Matrix != nil {
		n = max(n, a.Matrix.MaxBytes)
	}
	return n
}

// p2pHelp reports THESEUS_P2P_HELP (docs/env.md): on unless set to 0.
func p2pHelp() bool {
	on, err := env.P2PHelp.Bool()
	return on || err != nil
}

// p2pHelps reports whether a's launch shares its direct copies with idle
// lanes (kernel/p2p.cuh, "Helping"): THESEUS_P2P_HELP on, and a send that
// may be written directly (Direct, into a peer whose offers this rank
// imported, above the eager bytes). Otherwise the kernel runs as without
// helping, polling nothing more.
func p2pHelps(a *device.P2PArgs) bool {
	if !a.Direct || !p2pHelp() {
		return false
	}
	for _, pr := range a.Sends {
		if len(pr.Imports) == 0 {
			continue
		}
		for _, x := range pr.Xfers {
			if x.Bytes > a.EagerBytes || x.Matrix && a.Matrix != nil && a.Matrix.SendCap > a.EagerBytes {
				return true
			}
		}
	}
	return false
}

// p2pRecs are a launch's records (kernel/launch.h): the peers (sends, then
// receives), their transfers and imports, the self copies, and the proxy
// channels of the peers on other nodes.
type p2pRecs struct {
	peers []C.theseus_p2p_peer
	xfers []C.theseus_p2p_xfer
	imps  []C.theseus_p2p_import
	selfs []C.theseus_p2p_copy
	chans []uint16
	lanes []C.theseus_p2p_lane
}

// p2pRecords builds a's records. A peer on another node (device.P2PPort:
// docs/p2p.md, "Across nodes") gets its lanes (each connection's FIFO and
// ticket counter), the regions of its block copy and of the peer's block,
// and per channel its arrival and credit channels (of lane ch mod lanes);
// the kernel's engine then runs the host engine's protocol over the proxy
// (kernel/p2p.cuh, p2p_send_port and p2p_recv_port).
func p2pRecords(a *device.P2PArgs) (*p2pRecs, error) {
	g := a.Geometry
	r := &p2pRecs{}
	add := func(list []device.P2PPeer) error {
		for i := range list {
			pr := &list[i]
			if pr.Local.Size < g.ConnBytes() || pr.Remote.Size < g.ConnBytes() {
				return fmt.Errorf("cuda: p2p connection with rank %d: blocks of %d and %d bytes for a geometry of %d", pr.Peer, pr.Local.Size, pr.Remote.Size, g.ConnBytes())
			}
			rec := C.theseus_p2p_peer{local: C.uint64_t(pr.Local.Ptr), remote: C.uint64_t(pr.Remote.Ptr), peer: C.int32_t(pr.Peer),
				first: C.uint32_t(len(r.xfers)), nxfer: C.uint32_t(len(pr.Xfers)), imp_first: C.uint32_t(len(r.imps)), nimport: C.uint32_t(len(pr.Imports))}
			if pt := pr.Port; pt != nil {
				switch {
				case len(pt.Lanes) == 0 || slices.ContainsFunc(pt.Lanes, func(l device.P2PLane) bool { return l.Conn == nil || l.Conn.FIFO() == 0 || l.Head == 0 }):
					return fmt.Errorf("cuda: p2p connection with rank %d on another node: %d lane(s), not each with a FIFO and ticket counter for the kernel to post to", pr.Peer, len(pt.Lanes))
				case len(pt.Arrive) < g.Channels || len(pt.Credit) < g.Channels:
					return fmt.Errorf("cuda: p2p connection with rank %d on another node: %d arrival and %d credit channels for %d channels", pr.Peer, len(pt.Arrive), len(pt.Credit), g.Channels)
				case len(pr.Imports) > 0:
					return fmt.Errorf("cuda: p2p connection with rank %d on another node: %d imports (no memory is mapped across nodes)", pr.Peer, len(pr.Imports))
				}
				rec.lane_first, rec.nlanes = C.uint32_t(len(r.lanes)), C.uint32_t(len(pt.Lanes))
				for _, l := range pt.Lanes {
					r.lanes = append(r.lanes, C.theseus_p2p_lane{fifo: C.uint64_t(l.Conn.FIFO()), head: C.uint64_t(l.Head)})
				}
				rec.chan_first, rec.src_region, rec.dst_region = C.uint32_t(len(r.chans)), C.uint16_t(pt.Src), C.uint16_t(pt.Dst)
				for ch := range g.Channels {
					r.chans = append(r.chans, pt.Arrive[ch], pt.Credit[ch])
				}
			}
			r.peers = append(r.peers, rec)
			for _, x := range pr.Xfers {
				r.xfers = append(r.xfers, C.theseus_p2p_xfer{buf: C.uint64_t(x.Buf), bytes: C.uint64_t(x.Bytes), gen: C.uint64_t(x.Offer),
					dtype: C.uint32_t(x.DataType), matrix: C.uint32_t(b2u8(x.Matrix))})
			}
			for _, im := range pr.Imports {
				r.imps = append(r.imps, C.theseus_p2p_import{gen: C.uint64_t(im.ID), peer_base: C.uint64_t(im.PeerBase), size: C.uint64_t(im.Size), local: C.uint64_t(im.Local)})
			}
		}
		return nil
	}
	if err := add(a.Sends); err != nil {
		return nil, err
	}
	if err := add(a.Recvs); err != nil {
		return nil, err
	}
	for _, s := range a.Self {
		r.selfs = append(r.selfs, C.theseus_p2p_copy{dst: C.uint64_t(s.Dst), src: C.uint64_t(s.Src), bytes: C.uint64_t(s.Bytes), matrix: C.uint32_t(b2u8(s.Matrix))})
	}
	return r, nil
}

// fillP2P names the point-to-point descriptor in a launch argument.
func fillP2P(a *Launch, desc driver.Ptr) { a.p2p = C.uint64_t(desc) }

// p2pError turns the kernel's failure record of a point-to-point launch
// into the launch contract's error (as the host engine reports it):
// mismatches (launch.ErrP2PMismatch) and matrix failures
// (launch.ErrP2PMatrix) naming the peer, a peer's failed launch
// (launch.ErrP2PAborted), and timed-out or aborted waits on a peer.
func p2pError(e *KernelError) error {
	if !e.p2p() {
		return nil
	}
	pdt, mdt := ir.DataType(e.Slice>>8), ir.DataType(e.Slice&0xff)
	le := &launch.Error{Rank: e.Rank, Logical: e.Rank, TB: -1, Step: -1, Peer: e.Channel}
	lane := fmt.Sprintf("point-to-point lane %d: ", e.TB)
	const rule = "(NCCL 2.25: a send and its receive must agree on count and datatype; each pair's calls are matched in order)"
	switch e.Code {
	case C.THESEUS_ERR_P2P_MISMATCH:
		le.Err = launch.ErrP2PMismatch
		switch e.What {
		case C.THESEUS_P2P_SENDER:
			le.Msg = fmt.Sprintf("%ssend #%d to rank %d has %d bytes of %s, but rank %d's receive #%d from this rank expects %d bytes of %s; they disagree %s",
				lane, e.Step, e.Channel, e.Want, mdt, e.Channel, e.Step, e.Have, pdt, rule)
		case C.THESEUS_P2P_RECEIVER:
			le.Msg = fmt.Sprintf("%sreceive #%d from rank %d expects %d bytes of %s, but rank %d's send to this rank has %d bytes of %s; they disagree %s",
				lane, e.Step, e.Channel, e.Want, mdt, e.Channel, e.Have, pdt, rule)
		case C.THESEUS_P2P_BY_RECEIVER:
			le.Msg = fmt.Sprintf("%srank %d found that its receive #%d from this rank (%d bytes of %s) and send #%d (%d bytes of %s) disagree %s",
				lane, e.Channel, e.Step, e.Have, pdt, e.Step, e.Want, mdt, rule)
		case C.THESEUS_P2P_BY_SENDER:
			le.Msg = fmt.Sprintf("%srank %d found that its send #%d to this rank (%d bytes of %s) and receive #%d (%d bytes of %s) disagree %s",
				lane, e.Channel, e.Step, e.Have, pdt, e.Step, e.Want, mdt, rule)
		default: // THESEUS_P2P_ORDER
			le.Msg = fmt.Sprintf("%ssend #%d to rank %d: rank %d's receives do not match it (its receive #%d posts here first); they disagree %s",
				lane, e.Want, e.Channel, e.Channel, e.Have, rule)
		}
	case C.THESEUS_ERR_P2P_MATRIX:
		le.Err, le.Peer = launch.ErrP2PMatrix, -1
		if e.What == C.THESEUS_P2P_CHECK {
			le.Msg = fmt.Sprintf("ncclAlltoAllv: the GPU counts matrix holds %d at cell %d, the CPU matrix %d (THESEUS_ALLTOALLV_CHECK)", e.Have, e.Step, e.Want)
		} else {
			le.Msg = fmt.Sprintf("ncclAlltoAllv: the GPU counts matrix %s %d bytes on this rank, the CPU matrix planned %d",
				[2]string{"sends", "receives"}[min(max(e.Slice, 0), 1)], e.Have, e.Want)
		}
	case C.THESEUS_ERR_P2P_PEER:
		le.Err = launch.ErrP2PAborted
		le.Msg = fmt.Sprintf("%srank %d's launch failed while transfer #%d with it was due (see rank %d's error)", lane, e.Channel, e.Step, e.Channel)
	case C.THESEUS_ERR_PORT:
		// (the executor's error of the proxy connection names the cause)
		le.Err = launch.ErrAborted
		le.Msg = fmt.Sprintf("%sport channel to rank %d (another node) failed at transfer #%d with it, channel %d: the proxy failed the connection", lane, e.Channel, e.Step, e.Slice)
	case ErrTimeout, ErrAborted:
		le.Err = launch.ErrTimeout
		if e.Code == ErrAborted {
			le.Err = launch.ErrAborted
		}
		if e.What == C.THESEUS_WAIT_P2P_HELP {
			le.Msg = fmt.Sprintf("%s%s waiting for this rank's helping threadblocks to finish their pieces of the direct write to rank %d (transfer #%d, channel %d: %d of %d done)",
				lane, map[bool]string{true: "timed out", false: "aborted"}[e.Code == ErrTimeout], e.Channel, e.Step, e.Slice, e.Have, e.Want)
			break
		}
		what := map[uint32]string{C.THESEUS_WAIT_P2P_CREDIT: "to free a slot of its FIFO", C.THESEUS_WAIT_P2P_POST: "to post its receive",
			C.THESEUS_WAIT_P2P_HEADER: "to send", C.THESEUS_WAIT_P2P_FIFO: "(the proxy to free a slot of its FIFO)"}[e.What]
		le.Msg = fmt.Sprintf("%s%s waiting for rank %d %s (transfer #%d with it, channel %d)", lane, map[bool]string{true: "timed out", false: "aborted"}[e.Code == ErrTimeout],
			e.Channel, what, e.Step, e.Slice)
	default: // THESEUS_ERR_BADREF from a header
		le.Msg = fmt.Sprintf("%srank %d wrote a header this rank cannot take (transfer #%d: have %d, want %d): a broken peer", lane, e.Channel, e.Step, e.Have, e.Want)
	}
	return le
}

// p2p reports whether e is a point-to-point launch's failure.
func (e *KernelError) p2p() bool {
	switch e.Code {
	case C.THESEUS_ERR_P2P_MISMATCH, C.THESEUS_ERR_P2P_MATRIX, C.THESEUS_ERR_P2P_PEER:
		return true
	}
	return e.What >= C.THESEUS_WAIT_P2P_CREDIT && e.What <= C.THESEUS_WAIT_P2P_HEADER || e.What == C.THESEUS_WAIT_P2P_HELP ||
		e.What == C.THESEUS_WAIT_P2P_FIFO
}
