package interp

import (
	"errors"
	"fmt"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// PortEnd is a channel end through the process's proxy to a peer on
// another node (End.Port; runtime/transport/proxy through the executor's
// device.PortConn): the peer's memory is not mapped here, so a put is a
// descriptor the proxy executes over UCX, a signal an atomic add it orders
// after the channel's puts, and a flush waits for both to complete at the
// peer (docs/transport.md).
type PortEnd struct {
	Conn device.PortConn
	// Channel is the connection's channel of this end: its signals.
	Channel uint16
	// Local and Peer locate this rank's and the peer's input, output and
	// scratch (by ir.BufKind) in the connection's regions, as this launch
	// parity's views see them (Buffers: the scratch view may start inside
	// its region). Size 0: not reachable through this end.
	Local, Peer [ir.NumBufKinds]device.PortBuf
}

// maxPutBytes bounds one descriptor's put (the descriptor's size is 32
// bits): larger contiguous ranges are cut.
const maxPutBytes = 1 << 30

// loc is a ref's chunk as a byte range of one of a rank's buffers.
type loc struct {
	kb     ir.BufKind
	lo, hi int64
	elems  int64 // user buffers: the piece's elements
	user   bool
}

// locate maps ref's chunk c in slice s to a byte range of physical rank
// phys's buffer (the rule of resolveRef, without the memory).
func (x *tbRun) locate(ref ir.Ref, c, s int64, phys int) loc {
	g := x.rr.g
	if ref.Buf == ir.Scratch {
		lo := g.HalfOff + c*g.ChunkBytes
		if ref.Packet {
			return loc{kb: ir.Scratch, lo: lo, hi: lo + g.ChunkBytes, elems: g.Layout.Stride}
		}
		return loc{kb: ir.Scratch, lo: lo, hi: lo + g.Layout.Stride*g.ElemSize, elems: g.Layout.Stride}
	}
	kb, chunk := g.Placement.Resolve(phys, ref.Buf, c)
	st, en := g.Layout.UserChunk(chunk, s)
	return loc{kb: kb, lo: st * g.ElemSize, hi: en * g.ElemSize, elems: en - st, user: true}
}

// portRefs reports whether op touches a peer through a proxied end, and
// checks what the proxy can do: one copy from a local ref to one remote
// ref of the same layout (packets to packets, MSCCL++'s port-channel put).
// The verifier refuses anything else on port channels (TS0116).
func (x *tbRun) portRefs(op *optable.Op) (bool, error) {
	ends := x.rr.mem.Ends
	any := false
	for i := 0; i < len(op.Srcs)+len(op.Dsts); i++ {
		r := opRef(op, i)
		if r.Chan >= 0 && ends[r.Chan].Port != nil {
			any = true
			if i < len(op.Srcs) {
				return true, x.errf(nil, "source %d reads rank %d's memory through channel %d, a port channel across nodes: port channels only put", i, x.rr.peerPhys[r.Chan], r.Chan)
			}
		}
	}
	if !any {
		return false, nil
	}
	if op.Code != ir.OpCopy || len(op.Srcs) != 1 || len(op.Dsts) != 1 || op.Srcs[0].Chan >= 0 || op.Srcs[0].Packet != op.Dsts[0].Packet {
		return true, x.errf(nil, "a %v with %d sources and %d destinations through a port channel across nodes: the proxy runs one copy from a local buffer to one peer buffer of the same layout", op.Code, len(op.Srcs), len(op.Dsts))
	}
	return true, nil
}

// portPut runs a copy from a local ref to a peer's buffer through a
// proxied end: chunk by chunk it locates both ranges, merges contiguous
// chunks, posts one put per range and waits until the proxy is done with
// the last (its source may be overwritten afterwards). A packet source is
// first waited for (every flag of this launch), then moved as raw packets.
func (x *tbRun) portPut(op *optable.Op, s int64) error {
	rr, g := x.rr, x.rr.g
	src, dst := op.Srcs[0], op.Dsts[0]
	end := rr.mem.Ends[dst.Chan]
	pe := end.Port
	peer := rr.peerPhys[dst.Chan]
	if g.Layout.Stride == 0 {
		return nil
	}
	var run struct {
		on         bool
		sreg, dreg uint16
		soff, doff int64
		n          int64
	}
	var last uint64
	posted := false
	post := func() error {
		if !run.on || run.n == 0 {
			run.on = false
			return nil
		}
		for off := int64(0); off < run.n; off += maxPutBytes {
			k := min(run.n-off, maxPutBytes)
			t, err := pe.Conn.Put(pe.Channel, run.sreg, uint64(run.soff+off), run.dreg, uint64(run.doff+off), uint32(k), false)
			if err != nil {
				return x.portErr(err, peer, "put of %d bytes to rank %d", k, peer)
			}
			last, posted = t, true
		}
		run.on = false
		return nil
	}
	for t := int64(0); t < op.Count; t++ {
		if t&255 == 255 && rr.stopped() {
			return x.errf(ErrAborted, "aborted (another threadblock or rank failed)")
		}
		sl := x.locate(src, src.Off+t, s, rr.rank)
		dl := x.locate(dst, dst.Off+t, s, peer)
		n := min(sl.hi-sl.lo, dl.hi-dl.lo)
		if !src.Packet {
			L := g.Layout.Stride
			if sl.user {
				L = min(L, sl.elems)
			}
			if dl.user {
				L = min(L, dl.elems)
			}
			n = L * g.ElemSize
		}
		if n <= 0 {
			continue
		}
		lb, pb := pe.Local[sl.kb], pe.Peer[dl.kb]
		if sl.lo < 0 || sl.lo+n > lb.Size {
			return x.errf(nil, "source %s chunk %d: bytes [%d, %d) outside its %s buffer of %d bytes registered for the proxy", src.Buf.LongName(), src.Off+t, sl.lo, sl.lo+n, sl.kb.LongName(), lb.Size)
		}
		if dl.lo < 0 || dl.lo+n > pb.Size {
			return x.errf(nil, "destination %s chunk %d: bytes [%d, %d) outside rank %d's %s buffer of %d bytes", dst.Buf.LongName(), dst.Off+t, dl.lo, dl.lo+n, peer, dl.kb.LongName(), pb.Size)
		}
		if src.Packet {
			// The packets must be complete here before they leave.
			b, err := rr.bufferBytes(rr.mem.Buffers, ir.Scratch, sl.lo, sl.lo+n, rr.rank)
			if err != nil {
				return x.errf(nil, "source packets chunk %d: %v", src.Off+t, err)
			}
			if err := x.readPackets(b, x.staging(0, n/2)); err != nil {
				return err
			}
		}
		so, do := lb.Off+sl.lo, pb.Off+dl.lo
		if run.on && run.sreg == lb.Region && run.dreg == pb.Region && run.soff+run.n == so && run.doff+run.n == do {
			run.n += n
			continue
		}
		if err := post(); err != nil {
			return err
		}
		run.on, run.sreg, run.dreg, run.soff, run.doff, run.n = true, lb.Region, pb.Region, so, do, n
	}
	if err := post(); err != nil {
		return err
	}
	if posted {
		if err := pe.Conn.Wait(last); err != nil {
			return x.portErr(err, peer, "put to rank %d", peer)
		}
	}
	return nil
}

// portErr wraps a proxy error as the threadblock's error, naming the peer.
func (x *tbRun) portErr(err error, peer int, format string, args ...any) error {
	e := x.errf(err, "%s: %v", fmt.Sprintf(format, args...), err)
	var le *Error
	if errors.As(e, &le) {
		le.Peer = peer
	}
	return e
}
