package executor

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/transport/proxy"
)

// The point-to-point engine's pairs on different nodes (docs/p2p.md,
// "Across nodes"): connection blocks over the proxy's port channels.

// p2pLinkBlock makes c's half of a connection with q on another node: the
// proxy connections with q, one per lane (made at the first connection,
// both ranks at the same call), c's block registered on every lane as a
// destination of q's puts, a block of this rank as the copy of q's block
// that this rank's writes are put from (c.remote), both shared with q. On
// a backend with a HostMapper (CUDA) each lane also has a device ticket
// counter for the kernel's posts to its FIFO (device.P2PLane.Head), and
// c's block is the mapped host memory p2pBlock allocated, registered as
// host memory; on the staged path with kernel staging
// (THESEUS_PROXY_STAGING=kernel) the copy is mapped host memory as well,
// which the kernel writes and the proxy puts from without a staging copy.
// It returns the block's region id.
func (e *Executor) p2pLinkBlock(ctx context.Context, q int, c *p2pConn) (uint16, error) {
	l := e.p2p.links[q]
	if l == nil {
		ls, err := e.connectLanes(ctx, q, func(lane int) uint8 { return uint8(p2pProxyTag - lane) })
		if err != nil {
			return 0, err
		}
		l = &p2pLink{lanes: ls}
		if e.p2p.links == nil {
			e.p2p.links = map[int]*p2pLink{}
		}
		e.p2p.links[q] = l
		e.logPath()
	}
	size := c.geo.ConnBytes()
	var sm proxy.Mem
	if e.staged() && kernelStaging() {
		// The copy in mapped host memory: the kernel writes it, the proxy
		// puts from it directly (its staging copies cost ~200 us each).
		mm, err := e.mapper().AllocMapped(size)
		if err != nil {
			return 0, fmt.Errorf("the copy of its connection block (%d bytes of pinned host memory): %w", size, err)
		}
		c.remote, c.remoteMapped = mm.Dev, mm
		sm = proxy.Mem{Addr: uintptr(mm.Host), Size: int(size), SourceOnly: true}
	} else {
		cp, err := e.alloc(size)
		if err != nil {
			return 0, fmt.Errorf("the copy of its connection block (%d bytes): %w", size, err)
		}
		c.remote = cp
		sm = e.wireMem(cp, size)
		sm.SourceOnly = true
	}
	bm := e.wireMem(c.local, size)
	bm.SourceOnly = false
	if c.mapped.Host != nil {
		bm = proxy.Mem{Addr: uintptr(c.mapped.Host), Size: int(size)} // host memory, a destination on every path
	}
	blk, err := l.lanes.register(bm)
	if err != nil {
		return 0, err
	}
	c.regs = append(c.regs, blk)
	src, err := l.lanes.register(sm)
	if err != nil {
		return 0, err
	}
	c.regs = append(c.regs, src)
	if err := l.lanes.share(ctx); err != nil {
		return 0, err
	}
	c.port = &device.P2PPort{Src: src}
	for _, ln := range l.lanes {
		c.port.Lanes = append(c.port.Lanes, device.P2PLane{Conn: ln.pc, Head: ln.head})
	}
	return blk, nil
}

// p2pLinkChannels completes c with q's block (its region id peer): per
// channel, on the channel's lane (ch mod the lanes, device.P2PPort.Lane),
// an arrival channel (signals into q's arrival word as receiver) and a
// credit channel (signals into q's credit word as sender).
func (e *Executor) p2pLinkChannels(q int, c *p2pConn, peer uint16) error {
	l, g := e.p2p.links[q], c.geo
	c.port.Dst = peer
	for ch := range g.Channels {
		conn := l.lanes[ch%len(l.lanes)].conn
		a, err := conn.AddChannel(q, peer, uint64(g.LaneState(ch, true)+8*launch.P2PStateArrived))
		if err != nil {
			return err
		}
		cr, err := conn.AddChannel(q, peer, uint64(g.Credit(ch)))
		if err != nil {
			return err
		}
		c.port.Arrive, c.port.Credit = append(c.port.Arrive, a), append(c.port.Credit, cr)
	}
	return nil
}

// p2pUnlink releases the regions of a replaced connection across nodes
// and frees its block copy (no launch uses it any more).
func (e *Executor) p2pUnlink(q int, c *p2pConn) {
	if l := e.p2p.links[q]; l != nil {
		for _, id := range c.regs {
			if err := l.lanes.release(id); err != nil {
				log.Warnf(log.Executor, "rank %d: releasing a point-to-point region of rank %d's connection: %v", e.cfg.Rank, q, err)
			}
		}
	}
	if !e.p2pFreeCopy(c) && c.remote != 0 {
		e.freeAlloc(c.remote)
	}
}

// p2pDrained waits until every chunk this rank sent q over c (a connection
// across nodes) has been credited back: q's credits are signals into c's
// block, the last ones still on their way when both ends' launches have
// ended (a sender does not wait for them), and c's block must not be freed
// or unregistered under them (UCX would write into freed memory, or fail
// its reply to an endpoint closed). Bounded by limit; errors name q.
func (e *Executor) p2pDrained(q int, c *p2pConn, limit time.Duration) error {
	g := c.geo
	l := e.p2p.links[q]
	if limit <= 0 {
		limit = launch.DefaultTimeout
	}
	deadline := time.Now().Add(limit)
	var w [2][8]byte
	for ch := range g.Channels {
		sentAt := c.local + device.Ptr(g.LaneState(ch, false)+8*launch.P2PStateChunks)
		creditAt := c.local + device.Ptr(g.Credit(ch))
		for i := 0; ; i++ {
			var sent, credit uint64
			if h := c.mapped.Host; h != nil { // (CUDA: the block is host memory)
				sent = atomic.LoadUint64((*uint64)(unsafe.Add(h, sentAt-c.local)))
				credit = atomic.LoadUint64((*uint64)(unsafe.Add(h, creditAt-c.local)))
			} else {
				if err := e.dev.Download(w[0][:], sentAt); err != nil {
					return err
				}
				if err := e.dev.Download(w[1][:], creditAt); err != nil {
					return err
				}
				sent, credit = binary.LittleEndian.Uint64(w[0][:]), binary.LittleEndian.Uint64(w[1][:])
			}
			if credit >= sent {
				break
			}
			if l != nil {
				conn := l.lanes[ch%len(l.lanes)].conn
				if err := conn.Err(); err != nil {
					return fmt.Errorf("rank %d's credits for point-to-point channel %d (%d of %d chunks): %w", q, ch, credit, sent, err)
				}
				conn.Help()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("rank %d has not consumed %d of the %d chunks this rank sent it on point-to-point channel %d within %v (sends without their receives?)", q, sent-credit, sent, ch, limit)
			}
			if i > 64 {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	return nil
}

// p2pDrainLinks waits, at Close (no launch running), for the credits of
// every connection across nodes (p2pDrained), each bounded by a second:
// a peer gone or a send never received is logged and not waited for.
func (e *Executor) p2pDrainLinks() {
	for q, c := range e.p2p.conns {
		if c == nil || c.port == nil {
			continue
		}
		limit := time.Second
		if t := e.cfg.Timeout; t > 0 {
			limit = min(t, limit)
		}
		if err := e.p2pDrained(q, c, limit); err != nil {
			log.Warnf(log.Executor, "rank %d: closing the point-to-point connection with rank %d: %v", e.cfg.Rank, q, err)
		}
	}
}

// p2pBlock allocates c's own block (size bytes) for a connection with q:
// device memory, except with a peer on another node on a backend with a
// HostMapper (CUDA), where it is pinned, device-mapped host memory
// (p2pConn.mapped).
func (e *Executor) p2pBlock(q int, c *p2pConn, size int64) (device.Ptr, error) {
	if m := e.mapper(); m != nil && e.crossNode(q) {
		mm, err := m.AllocMapped(size)
		if err != nil {
			return 0, fmt.Errorf("pinned host memory for a connection across nodes: %w", err)
		}
		c.mapped, c.local = mm, mm.Dev
		return c.local, nil
	}
	p, err := e.alloc(size)
	c.local = p
	return p, err
}

// p2pFreeBlock frees c's own block (p2pBlock).
func (e *Executor) p2pFreeBlock(c *p2pConn) {
	if !e.p2pFreeMapped(c) {
		e.freeAlloc(c.local)
	}
}

// p2pFreeCopy frees c's copy of the peer's block when it is mapped host
// memory (remoteMapped) and reports whether it was.
func (e *Executor) p2pFreeCopy(c *p2pConn) bool {
	if c.remoteMapped.Size == 0 {
		return false
	}
	if err := e.mapper().FreeMapped(c.remoteMapped); err != nil {
		log.Warnf(log.Executor, "rank %d: freeing the copy of a point-to-point connection block: %v", e.cfg.Rank, err)
	}
	c.remoteMapped, c.remote = device.MappedMem{}, 0
	return true
}

// p2pFreeMapped frees c's block when it is mapped host memory and reports
// whether it was (a device block goes with the executor's allocations),
// and the copy of the peer's block when that is mapped (p2pFreeCopy).
func (e *Executor) p2pFreeMapped(c *p2pConn) bool {
	e.p2pFreeCopy(c)
	if c.mapped.Host == nil {
		return false
	}
	if err := e.mapper().FreeMapped(c.mapped); err != nil {
		log.Warnf(log.Executor, "rank %d: freeing a point-to-point connection block: %v", e.cfg.Rank, err)
	}
	c.mapped = device.MappedMem{}
	return true
}
