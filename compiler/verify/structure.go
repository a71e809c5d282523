package verify

import (
	"fmt"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// BufferChunks returns the chunks of buffer k on rank r when p runs with
// request root Program.Root, and whether the buffer exists there: input and
// output follow the collective (ir.Blocks × ChunksPerBlock, NCCL 2.25
// semantics; a declared 0 means "as defined"), custom collectives and
// scratch use the declared size. It does not validate p (see Verify); for
// out-of-range arguments it returns (0, false).
func BufferChunks(p *ir.Program, r int, k ir.BufKind) (int64, bool) {
	if p == nil || r < 0 || r >= len(p.Ranks) || k >= ir.NumBufKinds || p.ChunksPerBlock < 1 {
		return 0, false
	}
	decl := p.Ranks[r].Chunks[k]
	if k == ir.Scratch {
		return decl, true
	}
	b := ir.Blocks(p.Collective, k, p.NRanks, r, p.Root)
	switch {
	case b < 0:
		return decl, true
	case b == 0:
		return 0, false
	}
	return b * p.ChunksPerBlock, true
}

// structure runs the structural checks. It returns false when the program
// is too malformed for the per-rank checks to run at all.
func (c *checker) structure() bool {
	p := c.p
	n := p.NRanks
	if n < 1 || n > ir.MaxRanks {
		c.errf(diag.BadRank, -1, -1, -1, "nranks %d is outside 1..%d", n, ir.MaxRanks)
		return false
	}
	if len(p.Ranks) != n {
		c.errf(diag.BadRank, -1, -1, -1, "the program is for %d ranks but declares %d", n, len(p.Ranks))
		return false
	}
	if p.Collective >= ir.NumCollectives {
		c.errf(diag.UnknownCollective, -1, -1, -1, "unknown collective %v", p.Collective)
		return false
	}
	if p.ChunksPerBlock < 1 {
		c.errf(diag.BadGeometry, -1, -1, -1, "chunks per block is %d; it must be at least 1", p.ChunksPerBlock)
		return false
	}
	if p.ChunksPerBlock > MaxBufferChunks {
		c.errf(diag.Limits, -1, -1, -1, "chunks per block is %d; the verifier handles at most %d", p.ChunksPerBlock, MaxBufferChunks)
		return false
	}
	c.n, c.C, c.root, c.ll = n, p.ChunksPerBlock, p.Root, p.Protocol == ir.LL
	if p.Protocol >= ir.NumProtocols {
		c.errf(diag.BadValue, -1, -1, -1, "unknown protocol %v", p.Protocol)
	}
	if !p.InPlace && !p.OutOfPlace {
		c.errf(diag.NoArrangement, -1, -1, -1, "the program supports neither in-place nor out-of-place buffers")
	}
	if p.MinBytes < 0 || p.MaxBytes < 0 || (p.MaxBytes > 0 && p.MinBytes > p.MaxBytes) {
		c.errf(diag.BadWindow, -1, -1, -1, "message-size window [%d, %d] bytes is empty or negative (max 0 means unlimited)", p.MinBytes, p.MaxBytes)
	}
	if p.Collective.Rooted() {
		if p.Root < 0 || p.Root >= n {
			c.errf(diag.BadRoot, -1, -1, -1, "%v needs a root in 0..%d, got %d", p.Collective, n-1, p.Root)
			return false
		}
	} else if p.Root != -1 {
		c.report(diag.BadRoot, diag.Warning, -1, -1, -1, "%v has no root, but the program sets root %d (ignored)", p.Collective, p.Root)
		c.root = -1
	}
	if p.NumThreads < 0 || p.NumThreads > MaxThreads {
		c.errf(diag.Limits, -1, -1, -1, "%d threads per threadblock; the limit is %d (0 = the executor's default)", p.NumThreads, MaxThreads)
	}
	if p.SliceBytes < 0 {
		c.errf(diag.BadValue, -1, -1, -1, "slice bytes %d is negative (0 = the runtime's default)", p.SliceBytes)
	}
	if p.NLocalRanks < 0 || p.NLocalRanks > n || (p.NLocalRanks > 0 && n%p.NLocalRanks != 0) {
		c.errf(diag.BadValue, -1, -1, -1, "%d ranks per node does not divide nranks %d (0 = any)", p.NLocalRanks, n)
	}

	c.size = make([][ir.NumBufKinds]int64, n)
	c.exists = make([][ir.NumBufKinds]bool, n)
	var total int64
	sizesOK := true
	for r := range p.Ranks {
		ok := c.rankBuffers(r)
		sizesOK = sizesOK && ok
		for k := range ir.NumBufKinds {
			total += c.size[r][k]
		}
	}
	if !sizesOK {
		return false
	}
	for r := range p.Ranks {
		c.hasScratch = c.hasScratch || c.size[r][ir.Scratch] > 0
	}
	if total > MaxTotalChunks {
		c.errf(diag.Limits, -1, -1, -1, "the buffers of all ranks hold %d chunks; the verifier handles at most %d", total, MaxTotalChunks)
		return false
	}
	chOK := c.channels()
	var nops int
	for r := range p.Ranks {
		for t := range p.Ranks[r].TBs {
			nops += len(p.Ranks[r].TBs[t].Ops)
		}
	}
	if nops > MaxOps {
		c.errf(diag.Limits, -1, -1, -1, "the program has %d ops; the verifier handles at most %d", nops, MaxOps)
		return false
	}
	c.opk = make([]uint8, 0, nops)
	c.endBase = make([]int32, c.n+1)
	for r := range p.Ranks {
		c.endBase[r+1] = c.endBase[r] + int32(len(p.Ranks[r].Channels))
	}
	c.endWaitN = make([]int32, c.endBase[c.n])
	c.endSigN = make([]int32, c.endBase[c.n])
	var work int64
	for r := range p.Ranks {
		rk := &p.Ranks[r]
		if len(rk.TBs) > MaxThreadblocks {
			c.errf(diag.Limits, r, -1, -1, "rank %d has %d threadblocks; the limit is %d", r, len(rk.TBs), MaxThreadblocks)
			return false
		}
		for t := range rk.TBs {
			work += c.threadblock(r, t, chOK)
		}
	}
	if work > MaxWork {
		c.errf(diag.Limits, -1, -1, -1, "the ops touch %d chunks per iteration; the verifier handles at most %d", work, int64(MaxWork))
	}
	return true
}

// rankBuffers checks the declared buffer sizes of rank r against the
// collective and records them.
func (c *checker) rankBuffers(r int) bool {
	p := c.p
	ok := true
	for _, k := range []ir.BufKind{ir.Input, ir.Output, ir.Scratch} {
		decl := p.Ranks[r].Chunks[k]
		if decl < 0 {
			c.errf(diag.BadGeometry, r, -1, -1, "rank %d declares %d %s chunks", r, decl, k.LongName())
			ok = false
			continue
		}
		got, exists := decl, true
		if k != ir.Scratch {
			b := ir.Blocks(p.Collective, k, c.n, r, c.root)
			switch {
			case b == 0:
				exists, got = false, 0
				if decl != 0 {
					c.errf(diag.BadGeometry, r, -1, -1, "rank %d has no %s buffer in %v (root %d) but declares %d chunks",
						r, k.LongName(), p.Collective, c.root, decl)
				}
			case b > 0:
				got = b * c.C
				if decl != 0 && decl != got {
					c.errf(diag.BadGeometry, r, -1, -1, "rank %d declares %d %s chunks; %v gives %d (%d block(s) of %d chunks)",
						r, decl, k.LongName(), p.Collective, got, b, c.C)
				}
			}
		}
		if got > MaxBufferChunks {
			c.errf(diag.Limits, r, -1, -1, "rank %d's %s has %d chunks; the verifier handles at most %d", r, k.LongName(), got, MaxBufferChunks)
			ok = false
			continue
		}
		c.size[r][k], c.exists[r][k] = got, exists
	}
	return ok
}

// channels checks every channel end and its pairing. It returns, per rank,
// which channel ends are usable by refs and ops.
func (c *checker) channels() [][]bool {
	p := c.p
	ok := make([][]bool, c.n)
	for r := range p.Ranks {
		chs := p.Ranks[r].Channels
		ok[r] = make([]bool, len(chs))
		if len(chs) > MaxChannels {
			c.reportAt(diag.Limits, diag.Error, c.pos(r, -1, -1), r, -1, -1, "",
				"rank %d has %d channel ends; the limit is %d", r, len(chs), MaxChannels)
			continue
		}
		for ch := range chs {
			e := &chs[ch]
			at := c.chanPos(r, ch)
			switch {
			case e.Peer < 0 || e.Peer >= c.n:
				c.reportAt(diag.BadChannel, diag.Error, at, r, -1, -1, "", "rank %d channel %d: peer %d is not a rank (0..%d)", r, ch, e.Peer, c.n-1)
			case e.Peer == r:
				c.reportAt(diag.BadChannel, diag.Error, at, r, -1, -1, "connect channels to another rank",
					"rank %d channel %d connects the rank to itself", r, ch)
			case e.Type >= ir.NumChannelTypes:
				c.reportAt(diag.BadChannel, diag.Error, at, r, -1, -1, "", "rank %d channel %d: unknown channel type %v", r, ch, e.Type)
			case e.Init < 0:
				c.reportAt(diag.BadChannel, diag.Error, at, r, -1, -1, "give the semaphore an initial value >= 0",
					"rank %d channel %d: semaphore init %d is negative", r, ch, e.Init)
			case e.Type == ir.MemoryChannel && c.crossNode(r, e.Peer) && e.Peer < c.n:
				if r < e.Peer {
					nl := p.NLocalRanks
					c.reportAt(diag.CrossNode, diag.Error, at, r, -1, -1, "",
						"rank %d channel %d is a memory channel to rank %d, but with %d ranks per node rank %d is on node %d and rank %d on node %d: ranks of different nodes share no memory",
						r, ch, e.Peer, nl, r, r/nl, e.Peer, e.Peer/nl)
				}
			case e.PeerChannel < 0 || e.PeerChannel >= len(p.Ranks[e.Peer].Channels):
				c.reportAt(diag.ChannelPairing, diag.Error, at, r, -1, -1, "",
					"rank %d channel %d names channel %d of rank %d, which has %d channels", r, ch, e.PeerChannel, e.Peer, len(p.Ranks[e.Peer].Channels))
			default:
				o := &p.Ranks[e.Peer].Channels[e.PeerChannel]
				switch {
				case o.Peer != r || o.PeerChannel != ch:
					c.reportAt(diag.ChannelPairing, diag.Error, at, r, -1, -1, "",
						"rank %d channel %d names rank %d channel %d, which names rank %d channel %d instead",
						r, ch, e.Peer, e.PeerChannel, o.Peer, o.PeerChannel)
				case o.Type != e.Type:
					if r < e.Peer {
						c.reportAt(diag.ChannelPairing, diag.Error, at, r, -1, -1, "give both ends the same type",
							"rank %d channel %d is a %v channel but its other end, rank %d channel %d, is %v", r, ch, e.Type, e.Peer, e.PeerChannel, o.Type)
					}
				default:
					ok[r][ch] = true
				}
			}
		}
	}
	// An end is usable only when its partner is too (a bad partner was
	// reported on its own rank).
	for r := range ok {
		for ch, good := range ok[r] {
			if good {
				e := &p.Ranks[r].Channels[ch]
				if !ok[e.Peer][e.PeerChannel] {
					ok[r][ch] = false
				}
			}
		}
	}
	return ok
}

// threadblock checks threadblock t of rank r and its ops. It returns the
// chunk accesses of its ops (for MaxWork).
func (c *checker) threadblock(r, t int, chOK [][]bool) int64 {
	p := c.p
	rk := &p.Ranks[r]
	tb := &rk.TBs[t]
	peerOK := func(name string, q int) bool {
		switch {
		case q == -1:
			return false
		case q < -1 || q >= c.n:
			c.errf(diag.BadPeer, r, t, -1, "rank %d tb %d: %s peer %d is not a rank (-1..%d)", r, t, name, q, c.n-1)
		case q == r:
			c.errf(diag.BadPeer, r, t, -1, "rank %d tb %d: %s peer is the rank itself", r, t, name)
		default:
			return true
		}
		return false
	}
	sendOK := peerOK("send", tb.SendPeer)
	recvOK := peerOK("recv", tb.RecvPeer)
	chanOK := tb.Chan >= 0 && tb.Chan < MaxTransferChannels
	if tb.Chan < -1 || tb.Chan >= MaxTransferChannels {
		c.errf(diag.BadChannel, r, t, -1, "rank %d tb %d: transfer channel %d is outside -1..%d", r, t, tb.Chan, MaxTransferChannels-1)
	}
	var work int64
	var dirs uint8
	var nsend, nrecv int32
	for s := range tb.Ops {
		op := &tb.Ops[s]
		c.opk = append(c.opk, opKind(op))
		if !op.Code.Valid() {
			c.errf(diag.UnknownOp, r, t, s, "unknown opcode %d", uint8(op.Code))
			continue
		}
		info := op.Code.Info()
		if info.Sends {
			dirs |= 1
			nsend++
			c.nord++
		}
		if info.Recvs {
			dirs |= 2
			nrecv++
			c.nord++
		}
		switch {
		case c.opts.Level == ir.LevelPrimitive && info.Level == ir.LevelTransfer:
			c.reportAt(diag.WrongLevel, diag.Error, c.pos(r, t, s), r, t, s, "",
				"%s is a transfer op; the program must be at the primitive level here", op.Code)
		case c.opts.Level == ir.LevelTransfer && info.Level == ir.LevelPrimitive:
			c.reportAt(diag.WrongLevel, diag.Error, c.pos(r, t, s), r, t, s, "use transfer ops only (send, recv, rcs, rrs, rrc, rrcs, copy, reduce, nop)",
				"%s is a primitive op; the program must be at the transfer level here", op.Code)
		}
		if !countIn(len(op.Srcs), info.MinSrcs, info.MaxSrcs) || !countIn(len(op.Dsts), info.MinDsts, info.MaxDsts) {
			c.errf(diag.BadCount, r, t, s, "%s takes %s srcs and %s dsts, got %d and %d",
				op.Code, rangeStr(info.MinSrcs, info.MaxSrcs), rangeStr(info.MinDsts, info.MaxDsts), len(op.Srcs), len(op.Dsts))
			continue
		}
		if info.Data && op.Count < 1 {
			c.errf(diag.BadCount, r, t, s, "%s moves %d chunks; data ops move at least 1", op.Code, op.Count)
			continue
		}
		if info.Sends && (!sendOK || !chanOK) {
			c.errf(diag.BadPeer, r, t, s, "%s needs a send peer and a transfer channel, but rank %d tb %d has send peer %d and channel %d", op.Code, r, t, tb.SendPeer, tb.Chan)
		}
		if info.Recvs && (!recvOK || !chanOK) {
			c.errf(diag.BadPeer, r, t, s, "%s needs a recv peer and a transfer channel, but rank %d tb %d has recv peer %d and channel %d", op.Code, r, t, tb.RecvPeer, tb.Chan)
		}
		c.opChans(r, t, s, op, info, chOK[r])
		if op.Code == ir.OpBarrier {
			c.nord += 2
		}
		if op.Code == ir.OpBarrier && (op.Barrier < 0 || op.BarrierTBs < 1 || op.BarrierTBs > len(rk.TBs)) {
			c.errf(diag.BadBarrier, r, t, s, "barrier %d among %d threadblocks: the id must be >= 0 and the count in 1..%d", op.Barrier, op.BarrierTBs, len(rk.TBs))
		}
		refsOK := true
		for i, ref := range op.Srcs {
			refsOK = c.checkRef(r, t, s, op, ref, "src", i, chOK[r]) && refsOK
		}
		for i, ref := range op.Dsts {
			refsOK = c.checkRef(r, t, s, op, ref, "dst", i, chOK[r]) && refsOK
		}
		if info.Data && refsOK {
			c.portOp(r, t, s, op)
		}
		if info.Data && refsOK {
			c.ncrefs += 1 + len(op.Srcs) + len(op.Dsts)
			work += op.Count * int64(len(op.Srcs)+len(op.Dsts)+1)
			if n := len(op.Srcs); n > 1 || info.Recvs && n > 0 {
				c.combines += op.Count * int64(n)
			}
		}
		for _, d := range op.Deps {
			switch {
			case d.TB < 0 || d.TB >= len(rk.TBs):
				c.errf(diag.BadDep, r, t, s, "depends on tb %d, but rank %d has threadblocks 0..%d", d.TB, r, len(rk.TBs)-1)
			case d.TB == t:
				c.reportAt(diag.BadDep, diag.Error, c.pos(r, t, s), r, t, s, "program order already orders a threadblock's own steps; drop the dependency",
					"depends on its own threadblock (step %d)", d.Step)
			case d.Step < 0 || d.Step >= len(rk.TBs[d.TB].Ops):
				c.errf(diag.BadDep, r, t, s, "depends on tb %d step %d, but that threadblock has steps 0..%d", d.TB, d.Step, len(rk.TBs[d.TB].Ops)-1)
			case !rk.TBs[d.TB].Ops[d.Step].Publish:
				c.reportAt(diag.DepNotPublished, diag.Error, c.pos(r, t, s), r, t, s,
					fmt.Sprintf("set publish (hasdep) on rank %d tb %d step %d", r, d.TB, d.Step),
					"depends on tb %d step %d, which does not publish its completion: the wait would pass only at a later publishing step, or never", d.TB, d.Step)
			}
		}
	}
	c.tbDirs = append(c.tbDirs, dirs)
	c.tbSendN = append(c.tbSendN, nsend)
	c.tbRecvN = append(c.tbRecvN, nrecv)
	return work
}

// cref is one entry of the compact ref table (c.crefs): a data op's refs,
// after a header, with the rank whose buffer each addresses resolved. The
// replay reads these instead of the large ir.Op and its ref slices.
type cref struct {
	off int32 // chunk offset (header: the op's count)
	q   int32 // rank whose buffer the ref addresses (header: number of srcs)
	buf uint8 // ir.BufKind
	_   [3]byte
	aux int32 // header: number of dsts
}

// compactRefs appends the header and refs of data op op of rank r to
// c.crefs (sized by structure, which counted them).
func (c *checker) compactRefs(r int32, op *ir.Op) {
	chs := c.p.Ranks[r].Channels
	c.crefs = append(c.crefs, cref{off: int32(op.Count), q: int32(len(op.Srcs)), aux: int32(len(op.Dsts))})
	for _, refs := range [2][]ir.Ref{op.Srcs, op.Dsts} {
		for _, ref := range refs {
			q := int(r)
			if ref.Chan >= 0 {
				q = chs[ref.Chan].Peer
			}
			c.crefs = append(c.crefs, cref{off: int32(ref.Off), q: int32(q), buf: uint8(ref.Buf)})
		}
	}
}

// Compact op kinds (c.opk, one byte per op in global order): the opcode and
// whether the op has dependencies or reads an LL packet. The simulation and
// the replay look at these instead of the large ir.Op.
const (
	kCode   = 0x0f
	kDeps   = 0x10
	kPacket = 0x20
)

func opKind(op *ir.Op) uint8 {
	if !op.Code.Valid() {
		return 0
	}
	k := uint8(op.Code)
	if len(op.Deps) > 0 {
		k |= kDeps
	}
	for _, r := range op.Srcs {
		if r.Packet {
			k |= kPacket
		}
	}
	return k
}

// opChans checks the channel list of a signal, wait or flush (and that no
// other op has one).
func (c *checker) opChans(r, t, s int, op *ir.Op, info ir.OpInfo, chOK []bool) {
	if !info.Chans {
		if len(op.Chans) > 0 {
			c.errf(diag.BadCount, r, t, s, "%s takes no channels, got %d", op.Code, len(op.Chans))
		}
		return
	}
	if len(op.Chans) == 0 {
		c.errf(diag.BadCount, r, t, s, "%s names no channel", op.Code)
		return
	}
	for i, ch := range op.Chans {
		switch {
		case ch < 0 || ch >= len(chOK):
			c.errf(diag.BadChannel, r, t, s, "%s on channel %d, but rank %d has channels 0..%d", op.Code, ch, r, len(chOK)-1)
		case !chOK[ch]:
			// the channel itself was reported
		default:
			for _, prev := range op.Chans[:i] {
				if prev == ch {
					c.errf(diag.BadChannel, r, t, s, "%s lists channel %d twice", op.Code, ch)
					break
				}
			}
			switch op.Code {
			case ir.OpWait:
				c.endWaitN[c.endBase[r]+int32(ch)]++
				c.nord += 2
			case ir.OpSignal:
				c.endSigN[c.endBase[r]+int32(ch)]++
			}
		}
	}
}

// checkRef checks one ref of an op: buffer, channel, packet use and the
// full range [Off, Off+Count) in the buffer of the rank it addresses.
func (c *checker) checkRef(r, t, s int, op *ir.Op, ref ir.Ref, role string, i int, chOK []bool) bool {
	if ref.Buf >= ir.NumBufKinds {
		c.errf(diag.BadRef, r, t, s, "%s %d names unknown buffer %d", role, i, uint8(ref.Buf))
		return false
	}
	q := r
	if ref.Chan != -1 {
		switch {
		case op.Code.IsTransfer():
			c.reportAt(diag.BadRef, diag.Error, c.pos(r, t, s), r, t, s, "address the local buffer; the transfer's peer is the threadblock's",
				"%s %d of %s is remote (channel %d); transfer ops use local buffers", role, i, op.Code, ref.Chan)
			return false
		case c.opts.Level == ir.LevelTransfer:
			c.reportAt(diag.WrongLevel, diag.Error, c.pos(r, t, s), r, t, s, "use send/recv to reach a peer at the transfer level",
				"%s %d is a remote ref (channel %d); the program must be at the transfer level here", role, i, ref.Chan)
			return false
		case ref.Chan < 0 || ref.Chan >= len(chOK):
			c.errf(diag.BadChannel, r, t, s, "%s %d goes through channel %d, but rank %d has channels 0..%d", role, i, ref.Chan, r, len(chOK)-1)
			return false
		case !chOK[ref.Chan]:
			return false
		}
		q = c.p.Ranks[r].Channels[ref.Chan].Peer
		if ref.Buf != ir.Scratch {
			c.remoteUser = true
		}
	}
	if ref.Packet {
		switch {
		case ref.Buf != ir.Scratch:
			c.reportAt(diag.BadRef, diag.Error, c.pos(r, t, s), r, t, s, "use packets in scratch only",
				"%s %d is a packet ref to %s; packets live in scratch", role, i, ref.Buf.LongName())
			return false
		case c.p.Protocol != ir.LL:
			c.reportAt(diag.BadRef, diag.Error, c.pos(r, t, s), r, t, s, "set protocol ll, or use plain refs",
				"%s %d is a packet ref in a %v program; packets need the LL protocol (a Simple program is replayed per slice and would write each slot more than once per launch)",
				role, i, c.p.Protocol)
			return false
		case c.opts.Level == ir.LevelTransfer:
			c.reportAt(diag.WrongLevel, diag.Error, c.pos(r, t, s), r, t, s, "", "%s %d is a packet ref; the program must be at the transfer level here", role, i)
			return false
		}
		c.hasPacket = true
	}
	if !c.exists[q][ref.Buf] {
		c.errf(diag.MissingBuffer, r, t, s, "%s %d: rank %d has no %s buffer in %v with root %d",
			role, i, q, ref.Buf.LongName(), c.p.Collective, c.root)
		return false
	}
	size := c.size[q][ref.Buf]
	if ref.Off < 0 || ref.Off > size || op.Count > size-ref.Off {
		owner := fmt.Sprintf("rank %d's", r)
		if ref.Chan >= 0 {
			owner = fmt.Sprintf("rank %d's (the peer of channel %d)", q, ref.Chan)
		}
		c.errf(diag.ChunkRange, r, t, s, "%s %d %s[%d:%d] is outside %s %s buffer (%d chunks)",
			role, i, ref.Buf, ref.Off, satAdd(ref.Off, op.Count), owner, ref.Buf.LongName(), size)
		return false
	}
	return true
}

func countIn(n, lo, hi int) bool { return n >= lo && (hi < 0 || n <= hi) }

func rangeStr(lo, hi int) string {
	switch {
	case hi < 0:
		return fmt.Sprintf("%d or more", lo)
	case lo == hi:
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d..%d", lo, hi)
}

// satAdd adds without wrapping past the int64 range (for messages).
func satAdd(a, b int64) int64 {
	if s := a + b; (b >= 0) == (s >= a) {
		return s
	}
	if b >= 0 {
		return 1<<63 - 1
	}
	return -1 << 63
}

// crossNode reports whether ranks a and b lie on different nodes under the
// program's node shape (NLocalRanks > 0: ranks r and r' share a node iff
// r/NLocalRanks == r'/NLocalRanks; 0: any shape, no node known).
func (c *checker) crossNode(a, b int) bool {
	nl := c.p.NLocalRanks
	return nl > 0 && a/nl != b/nl
}

// portOp checks a data op of a program for several nodes that reaches a
// peer through a port channel: the proxy puts one local ref as it is, so the op must be a
// copy of one local src to that one remote dst, both plain or both packets
// (MSCCL++'s port-channel put; a packet put moves packets as they are),
// and no src may be remote (port channels do not read).
func (c *checker) portOp(r, t, s int, op *ir.Op) {
	chs := c.p.Ranks[r].Channels
	// On several nodes every port channel may cross (a rooted collective's
	// root rotation moves ranks between nodes).
	nl := c.p.NLocalRanks
	if nl <= 0 || nl >= c.n {
		return
	}
	far := func(ref ir.Ref) bool {
		return ref.Chan >= 0 && ref.Chan < len(chs) && chs[ref.Chan].Type == ir.PortChannel
	}
	for i, ref := range op.Srcs {
		if far(ref) {
			c.errf(diag.PortOp, r, t, s, "src %d reads rank %d's memory through port channel %d, across nodes: port channels only put", i, chs[ref.Chan].Peer, ref.Chan)
			return
		}
	}
	for i, ref := range op.Dsts {
		if !far(ref) {
			continue
		}
		if op.Code != ir.OpCopy || len(op.Srcs) != 1 || len(op.Dsts) != 1 || op.Srcs[0].Chan >= 0 || op.Srcs[0].Packet != ref.Packet {
			c.errf(diag.PortOp, r, t, s, "dst %d is rank %d's memory through port channel %d, across nodes, in a %v of %d srcs and %d dsts: the proxy puts one local ref of the same layout (a copy of one src to one dst)",
				i, chs[ref.Chan].Peer, ref.Chan, op.Code, len(op.Srcs), len(op.Dsts))
		}
		return
	}
}
