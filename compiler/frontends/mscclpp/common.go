package mscclpp

import (
	"math"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// This file holds the readers whose logic both dialects share; the keys
// that differ are parameters, and what only one dialect has stays in v07.go
// or v08.go.

// chunkCounts sets rank r's position and reads its input, output and
// scratch chunk counts from gpu g under the dialect's key names.
func (p *parser) chunkCounts(g *jnode, r int, inKey, outKey, scratchKey string) bool {
	s := subj{r, -1, -1}
	rank := &p.ranks[r]
	rank.Pos = p.pos(g)
	var ok bool
	for k, key := range [ir.NumBufKinds]string{inKey, outKey, scratchKey} {
		if rank.Chunks[k], ok = p.reqInt(g, key, 0, math.MaxInt64, s); !ok {
			return false
		}
	}
	return true
}

// chanSpec names the keys of a gpu's channel declarations in one dialect.
type chanSpec struct {
	typeKey  string   // the channel type: type (v0.7), channel_type (v0.8+)
	peersKey string   // the peer list: connectedTo, connected_to
	keys     []string // every key a declaration may have
	nvls     string   // what the NVLS rejection says
}

// gpuChannels reads gpu g's channel declarations and declares one channel
// per peer listed. key reads the dialect's channel key (after the type,
// before the peer list). Channels of type none are skipped with a one-time
// warning; an NVLS type is rejected. It reports false when it stopped at an
// error.
func (p *parser) gpuChannels(g *jnode, r int, spec chanSpec, key func(c *jnode, ct ctype) (chanKey, bool)) bool {
	s := subj{r, -1, -1}
	chans, ok := p.arr(g, "channels", true, s)
	if !ok {
		return false
	}
	for _, c := range chans {
		if !p.isObject(c, "a channel", s) {
			return false
		}
		ct, tv, ok := p.chanType(c, spec.typeKey, spec.nvls, s)
		if !ok {
			return false
		}
		p.checkKeys(c, "a channel", spec.keys, s)
		if ct == ctNone {
			if p.first("chan-none") {
				p.warnAt(diag.ImportNote, p.pos(tv), s, "", "a channel of type none is never connected by MSCCL++; ignored")
			}
			continue
		}
		k, ok1 := key(c, ct)
		peers, ok2 := p.arr(c, spec.peersKey, true, s)
		if !ok1 || !ok2 {
			return false
		}
		for _, pn := range peers {
			q, ok := p.peer(pn, r, spec.peersKey, s)
			if !ok {
				return false
			}
			if !p.declare(r, chanDecl{key: k, peer: q, pos: p.pos(pn)}) {
				return false
			}
		}
	}
	return true
}

// chanType reads obj[key] (required) as a channel type and returns it with
// its node. An NVLS type is reported as unsupported (nvls says where) and
// fails.
func (p *parser) chanType(obj *jnode, key, nvls string, s subj) (ctype, *jnode, bool) {
	tv := p.member(obj, key, true, s)
	if tv == nil {
		return 0, nil, false
	}
	ct, ok := p.ctypeVal(tv, key, s)
	if !ok {
		return 0, nil, false
	}
	if ct == ctNVLS {
		p.unsupportedNVLS(obj, s, nvls)
		return 0, nil, false
	}
	return ct, tv, true
}

// threadblocks reads gpu g's threadblocks into rank r: ids, channel lists
// (required in v0.7, optional in v0.8+), v0.8+ remote_buffer_refs, and the
// ops through the dialect's op mapper. When the program is one pipeline
// (v0.8+, pipelineCheck) a threadblock's single pipeline op is replaced by
// its inner ops, each of which must move num_chunks chunks.
func (p *parser) threadblocks(g *jnode, r int) {
	s := subj{r, -1, -1}
	tbs, ok := p.arr(g, "threadblocks", true, s)
	if !ok {
		return
	}
	v07 := p.dialect == V07
	tbKeys, tbChannel, op := tbKeys08, p.tbChannel08, p.op08
	if v07 {
		tbKeys, tbChannel, op = tbKeys07, p.tbChannel07, p.op07
	}
	rank := &p.ranks[r]
	rank.TBs = make([]ir.Threadblock, len(tbs))
	for i, tn := range tbs {
		s := subj{r, i, -1}
		if !p.isObject(tn, "a threadblock", s) {
			return
		}
		p.checkKeys(tn, "a threadblock", tbKeys, s)
		if !p.tbID(tn, r, i) {
			return
		}
		tb := &rank.TBs[i]
		tb.SendPeer, tb.RecvPeer, tb.Chan, tb.Pos = -1, -1, -1, p.pos(tn)
		var tc tbChans
		chans, ok := p.arr(tn, "channels", v07, s)
		if !ok {
			return
		}
		for _, c := range chans {
			if !tbChannel(c, r, i, &tc) {
				return
			}
		}
		if !v07 {
			refs, ok := p.arr(tn, "remote_buffer_refs", false, s)
			if !ok {
				return
			}
			for _, rb := range refs {
				if !p.remoteRefs08(rb, r, i, &tc) {
					return
				}
			}
		}
		ops, ok := p.arr(tn, "ops", true, s)
		if !ok {
			return
		}
		if p.pipeChunks > 0 && len(ops) == 1 {
			pl := ops[0]
			p.checkKeys(pl, "a pipeline op", []string{"name", "iter_context", "ops"}, subj{r, i, 0})
			if ops, ok = p.arr(pl, "ops", true, subj{r, i, 0}); !ok {
				return
			}
		}
		for j, o := range ops {
			out, ok := op(o, r, i, j, &tc)
			if !ok {
				return
			}
			if !p.countOps(len(out), o, subj{r, i, j}) {
				return
			}
			if p.pipeChunks > 0 {
				for _, op := range out {
					if op.Code.Info().Data && op.Count != p.pipeChunks {
						p.errorAt(diag.Unsupported, p.pos(o), subj{r, i, j}, "make every op in the pipeline move num_chunks chunks",
							"unsupported: pipeline inner op moves %d chunks but iter_context.num_chunks is %d: MSCCL++ iterates over num_chunks chunks of every op",
							op.Count, p.pipeChunks)
						return
					}
				}
			}
			tb.Ops = append(tb.Ops, out...)
		}
	}
}

// barrier maps a barrier op: barrier_id and the dialect's threadblock
// count key (nthread_blocks in v0.7, num_threadblocks in v0.8+).
func (p *parser) barrier(o *jnode, countKey string, pos ir.Pos, s subj) ([]ir.Op, bool) {
	id, ok1 := p.reqInt(o, "barrier_id", 0, MaxIndex, s)
	n, ok2 := p.reqInt(o, countKey, 1, MaxIndex, s)
	if !ok1 || !ok2 {
		return nil, false
	}
	return []ir.Op{{Code: ir.OpBarrier, Barrier: int(id), BarrierTBs: int(n), Pos: pos}}, true
}

// tbChans is what a threadblock's channel list resolves to.
type tbChans struct {
	lists  [2][]int          // per type: tb-local index -> rank flat index
	byKey  map[chanKey][]int // v0.7: key -> rank flat indices, in tb order (made on first use)
	remote [2][]int          // v0.8+: per access type: tb-local buffer id -> rank remote_buffers index
	// firstMem maps a peer to the threadblock's first memory channel to it
	// (v0.8+, built on first use).
	firstMem map[int]int
}

// peer reads a peer rank: in [0, nranks) and not r itself.
func (p *parser) peer(n *jnode, r int, what string, s subj) (int, bool) {
	q, ok := p.intVal(n, what, 0, int64(p.n-1), s)
	if !ok {
		return 0, false
	}
	if int(q) == r {
		p.errorAt(diag.BadChannel, p.pos(n), s, "connect a channel to another rank", "rank %d connects a channel to itself", r)
		return 0, false
	}
	return int(q), true
}

// tbID checks that a threadblock's id is its position (MSCCL++ indexes
// its per-threadblock tables by id but launches them in list order).
func (p *parser) tbID(tn *jnode, r, i int) bool {
	id, ok := p.reqInt(tn, "id", 0, MaxIndex, subj{r, i, -1})
	if !ok {
		return false
	}
	if id != int64(i) {
		p.errorAt(diag.DuplicateID, p.pos(tn.get("id")), subj{r, i, -1}, "list threadblocks in id order, ids 0, 1, 2, ...",
			"threadblock at position %d of gpu %d has id %d", i, r, id)
		return false
	}
	return true
}

// countOps enforces MaxOps.
func (p *parser) countOps(k int, o *jnode, s subj) bool {
	p.nops += k
	if p.nops > MaxOps {
		if !p.stop {
			p.errorAt(diag.TooLarge, p.pos(o), s, "", "more than %d ops", MaxOps)
		}
		p.stop = true
		return false
	}
	return true
}

// reduceOp builds a reduce, or a copy when there is a single source
// (MSCCL++ then just copies).
func reduceOp(srcs, dsts []ir.Ref, count int64, pos ir.Pos) ir.Op {
	code := ir.OpReduce
	if len(srcs) == 1 {
		code = ir.OpCopy
	}
	return ir.Op{Code: code, Srcs: srcs, Dsts: dsts, Count: count, Pos: pos}
}

// scratchOnly warns when packet sources name a buffer other than scratch:
// MSCCL++ reads them from scratch regardless.
func (p *parser) scratchOnly(refs []ir.Ref, name string, pos ir.Pos, s subj) {
	for _, r := range refs {
		if r.Buf != ir.Scratch && p.first("pkt-scratch") {
			p.warnAt(diag.ImportNote, pos, s, "name the scratch buffer s",
				"%s reads its packet sources from scratch, but the plan names buffer %s; imported as scratch", name, r.Buf)
			return
		}
	}
}

func ctName(c ctype) string {
	switch c {
	case ctMemory:
		return "memory"
	case ctPort:
		return "port"
	case ctNVLS:
		return "nvls"
	}
	return "none"
}
