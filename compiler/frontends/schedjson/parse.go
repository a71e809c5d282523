package schedjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Parse decodes Theseus schedule JSON v1 (docs/schedule-format.md) into an
// ir.Program. filename is used only in diagnostics and Program.File.
//
// It returns the program and no errors, or nil and the diagnostics, sorted
// by position, each with file:line:col (1-based; the column counts bytes),
// a stable code and a one-line hint:
//
//	TS0001 syntax error or truncated input
//	TS0002 unknown field
//	TS0003 value of the wrong type, outside its domain, or a field given twice
//	TS0004 missing required field
//	TS0005 unknown op
//	TS0006 version other than 1 (reported alone: the rest may be another format)
//	TS0010 an explicit rank/id that differs from the element's position
//	TS0011 over a size limit (MaxInputBytes, ir.MaxRanks, MaxOps, ...)
//	TS0012 unknown collective
//
// Parse sets Program.File and the ir.Pos of the program, every rank,
// channel, threadblock and op (each the position of its opening brace). A
// channel without peer_channel gets the default pairing (DefaultPeerChannels).
// Parse never panics; it checks the format, not the schedule (see the
// package documentation). Plain documents take a fast path (140–290 MB/s on
// the 2-core development machine); the rest, and every document with an
// error, the careful encoding/json path (5–10 MB/s; doc.go).
func Parse(filename string, data []byte) (*ir.Program, []diag.Diagnostic) {
	return parse(filename, data, defaultLimits)
}

// limits are the size limits of one parse (tests lower them).
type limits struct {
	input, ranks, ops, channels, tbs, list int
}

var defaultLimits = limits{MaxInputBytes, ir.MaxRanks, MaxOps, MaxChannels, MaxThreadblocks, MaxListLen}

// parse reads the schedule with encoding/json: a validating pre-pass, then
// a Decoder.Token walk that reports every problem at its position.
func parse(filename string, data []byte, lim limits) (*ir.Program, []diag.Diagnostic) {
	p := &parser{file: filename, data: data, cur: [3]int{-1, -1, -1}, lim: lim}
	prog := p.parse()
	if p.badVersion != nil {
		return nil, []diag.Diagnostic{*p.badVersion}
	}
	p.diags.Sort()
	if p.diags.HasErrors() {
		return nil, p.diags.Items
	}
	return prog, p.diags.Items
}

// parser walks the token stream of a pre-validated document.
type parser struct {
	file  string
	data  []byte
	dec   *json.Decoder
	diags diag.List
	lines []int // byte offset of the start of each line, built on first use
	fatal bool  // stop walking: syntax error or a size limit
	cur   [3]int
	lim   limits

	badVersion *diag.Diagnostic

	nops, nchans, ntbs int
	implicit           [][2]int // (rank, channel) of channels without peer_channel
}

// ---- positions and diagnostics ----

var programFields = []string{"version", "name", "collective", "nranks", "nlocalranks", "root", "protocol",
	"chunks_per_block", "inplace", "outofplace", "min_bytes", "max_bytes", "threads_per_block",
	"slice_bytes", "meta", "ranks"}

const (
	fVersion = iota
	fName
	fCollective
	fNRanks
	fNLocalRanks
	fRoot
	fProtocol
	fChunksPerBlock
	fInPlace
	fOutOfPlace
	fMinBytes
	fMaxBytes
	fThreads
	fSliceBytes
	fMeta
	fRanks
)

// required lists the fields of programFields that must be present.
var programRequired = []int{fVersion, fName, fCollective, fNRanks, fProtocol, fChunksPerBlock, fInPlace, fOutOfPlace, fRanks}

func (p *parser) parse() *ir.Program {
	if len(p.data) > p.lim.input {
		p.errAt(diag.TooLarge, 0, "split the schedule or use fewer ranks", "input is %d bytes, over the %d-byte limit", len(p.data), p.lim.input)
		return nil
	}
	if !p.syntaxCheck() {
		return nil
	}
	p.dec = json.NewDecoder(bytes.NewReader(p.data))
	p.dec.UseNumber()

	prog := &ir.Program{File: p.file, Root: -1}
	collOK := false
	rootSet := false
	start, seen, ok := p.object("the schedule", programFields, func(i int, off int) {
		switch i {
		case fVersion:
			p.version()
		case fName:
			prog.Name, _, _ = p.str("name")
		case fCollective:
			s, off, ok := p.str("collective")
			if ok {
				c, err := ir.ParseCollective(s)
				if err != nil {
					p.errAt(diag.UnknownCollective, off, "", "%v", err)
				} else {
					prog.Collective, collOK = c, true
				}
			}
		case fNRanks:
			t, off, ok := p.next()
			if !ok {
				return
			}
			n, isNum := t.(json.Number)
			v, err := strconv.ParseInt(string(n), 10, 64)
			switch {
			case !isNum:
				p.wrongType("nranks", "an integer", t, off)
			case errors.Is(err, strconv.ErrRange) || (err == nil && v > ir.MaxRanks):
				p.errAt(diag.TooLarge, off, "", "nranks = %s is over the limit of %d ranks", n, ir.MaxRanks)
			case err != nil:
				p.errAt(diag.BadValue, off, "write a whole number without fraction or exponent", "nranks must be an integer, not %s", n)
			case !domNRanks.has(v):
				p.errAt(diag.BadValue, off, "", "nranks = %d is out of range %v", v, domNRanks)
			default:
				prog.NRanks = int(v)
			}
		case fNLocalRanks:
			v, _, _ := p.integer("nlocalranks", domLocal)
			prog.NLocalRanks = int(v)
		case fRoot:
			rootSet = true
			if v, _, ok := p.integer("root", domIndex); ok {
				prog.Root = int(v)
			}
		case fProtocol:
			s, off, ok := p.str("protocol")
			if ok {
				pr, err := ir.ParseProtocol(s)
				if err != nil {
					p.errAt(diag.BadValue, off, `use "simple" or "ll"`, "%v", err)
				}
				prog.Protocol = pr
			}
		case fChunksPerBlock:
			prog.ChunksPerBlock, _, _ = p.integer("chunks_per_block", domPos)
		case fInPlace:
			prog.InPlace, _, _ = p.boolean("inplace")
		case fOutOfPlace:
			prog.OutOfPlace, _, _ = p.boolean("outofplace")
		case fMinBytes:
			prog.MinBytes, _, _ = p.integer("min_bytes", domSize)
		case fMaxBytes:
			prog.MaxBytes, _, _ = p.integer("max_bytes", domSize)
		case fThreads:
			v, _, _ := p.integer("threads_per_block", domThreads)
			prog.NumThreads = int(v)
		case fSliceBytes:
			prog.SliceBytes, _, _ = p.integer("slice_bytes", domSize)
		case fMeta:
			prog.Meta = p.meta()
		case fRanks:
			p.array("ranks", func(r int, off int) {
				if r >= p.lim.ranks {
					p.tooMany(off, p.lim.ranks, "ranks")
					return
				}
				p.cur = [3]int{r, -1, -1}
				prog.Ranks = append(prog.Ranks, p.rank(r))
				p.cur = [3]int{-1, -1, -1}
			})
		}
	})
	if !ok || p.fatal {
		return nil
	}
	prog.Pos = p.irPos(start)
	for _, f := range programRequired {
		if seen&(1<<f) == 0 {
			hint := fmt.Sprintf("add %q (docs/schedule-format.md)", programFields[f])
			if f == fVersion {
				hint = `add "version": 1`
			}
			p.errAt(diag.MissingField, start, hint, "the schedule has no %q field", programFields[f])
		}
	}
	if collOK && prog.Collective.Rooted() && !rootSet {
		p.errAt(diag.MissingField, start, `add "root": 0 (the root the program is written for)`,
			"a %v schedule needs a \"root\" field", prog.Collective)
	}
	pairChannels(prog, p.implicit)
	return prog
}

// syntaxCheck validates the whole document with encoding/json's scanner,
// whose error offsets are exact, before the token walk.
func (p *parser) syntaxCheck() bool {
	if bytes.HasPrefix(p.data, []byte("\xef\xbb\xbf")) {
		p.errAt(diag.Syntax, 0, "save the file as UTF-8 without a byte-order mark",
			"the file starts with a UTF-8 byte-order mark, which JSON does not allow")
		return false
	}
	err := json.Unmarshal(p.data, new(struct{}))
	var se *json.SyntaxError
	if err == nil || !errors.As(err, &se) {
		return true // well-formed (type mismatches are reported by the walk)
	}
	off := int(se.Offset)
	if strings.HasPrefix(se.Error(), "unexpected end") {
		p.errAt(diag.Syntax, len(p.data), "the file is cut off or a bracket is unbalanced; complete the JSON value",
			"unexpected end of input")
	} else {
		if off > 0 {
			off-- // Offset counts the bad byte itself
		}
		p.errAt(diag.Syntax, off, "", "malformed JSON: %v", se)
	}
	return false
}

func (p *parser) version() {
	t, off, ok := p.next()
	if !ok {
		return
	}
	n, isNum := t.(json.Number)
	if isNum && string(n) == "1" {
		return
	}
	hint := fmt.Sprintf("set \"version\": %d; this theseusc reads schedule JSON v%d", Version, Version)
	var d diag.Diagnostic
	if isNum {
		d = p.mk(diag.BadVersion, off, hint, "unsupported schedule format version %s", n)
	} else {
		d = p.mk(diag.BadVersion, off, hint, "version must be the number %d, not %s", Version, kind(t))
		p.skipAfter(t)
	}
	p.badVersion = &d
}

func (p *parser) meta() map[string]string {
	var m map[string]string
	start, ok := p.open("meta", '{')
	if !ok {
		return nil
	}
	_ = start
	n := 0
	for !p.fatal && p.dec.More() {
		t, off, ok := p.next()
		if !ok {
			break
		}
		if !p.limit(&n, p.lim.list, off, "meta entries") {
			return nil
		}
		key, _ := t.(string)
		v, _, ok := p.str("a meta value")
		if !ok {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		if _, dup := m[key]; dup {
			p.errAt(diag.BadValue, off, "remove one of the two", "meta key %q appears twice", key)
			continue
		}
		m[key] = v
	}
	p.next() // '}'
	return m
}

var rankFields = []string{"rank", "id", "input_chunks", "output_chunks", "scratch_chunks", "channels", "threadblocks"}

func (p *parser) rank(r int) ir.Rank {
	rk := ir.Rank{}
	idOff := -1
	start, _, _ := p.object("a rank", rankFields, func(i int, off int) {
		switch i {
		case 0, 1:
			if idOff >= 0 {
				p.errAt(diag.BadValue, off, `keep "rank" and remove "id"`, "a rank has both \"rank\" and \"id\"")
				p.skip()
				return
			}
			idOff = off
			p.checkID("rank", rankFields[i], r)
		case 2, 3, 4:
			rk.Chunks[i-2], _, _ = p.integer(rankFields[i], domSize)
		case 5:
			p.array("channels", func(c int, off int) {
				if !p.limit(&p.nchans, p.lim.channels, off, "channels in all ranks") {
					return
				}
				ch, explicit := p.channel(c)
				if !explicit {
					p.implicit = append(p.implicit, [2]int{r, c})
				}
				rk.Channels = append(rk.Channels, ch)
			})
		case 6:
			p.array("threadblocks", func(t int, off int) {
				if !p.limit(&p.ntbs, p.lim.tbs, off, "threadblocks in all ranks") {
					return
				}
				p.cur[1] = t
				rk.TBs = append(rk.TBs, p.threadblock(t))
				p.cur[1], p.cur[2] = -1, -1
			})
		}
	})
	rk.Pos = p.irPos(start)
	return rk
}

// checkID reads an explicit id and checks it equals the position.
func (p *parser) checkID(what, field string, pos int) {
	v, off, ok := p.integer(field, domIndex)
	if ok && v != int64(pos) {
		p.errAt(diag.DuplicateID, off, fmt.Sprintf("number %ss 0, 1, 2, ... in order, or leave %q out", what, field),
			"%s %q is %d but this is %s %d of the list", what, field, v, what, pos)
	}
}

var channelFields = []string{"id", "peer", "peer_channel", "type", "init"}

func (p *parser) channel(c int) (ir.Channel, bool) {
	ch := ir.Channel{Peer: -1, PeerChannel: -1}
	start, seen, ok := p.object("a channel", channelFields, func(i int, off int) {
		switch i {
		case 0:
			p.checkID("channel", "id", c)
		case 1:
			v, _, _ := p.integer("peer", domIndex)
			ch.Peer = int(v)
		case 2:
			v, _, _ := p.integer("peer_channel", domIndex)
			ch.PeerChannel = int(v)
		case 3:
			s, off, ok := p.str("type")
			if ok {
				t, err := ir.ParseChannelType(s)
				if err != nil {
					p.errAt(diag.BadValue, off, `use "memory" or "port"`, "%v", err)
				}
				ch.Type = t
			}
		case 4:
			ch.Init, _, _ = p.integer("init", domSize)
		}
	})
	ch.Pos = p.irPos(start)
	if ok && seen&(1<<1) == 0 {
		p.errAt(diag.MissingField, start, `add "peer": the rank at the other end`, "a channel has no \"peer\" field")
	}
	return ch, seen&(1<<2) != 0
}

var tbFields = []string{"id", "send_peer", "recv_peer", "chan", "ops"}

func (p *parser) threadblock(t int) ir.Threadblock {
	tb := ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1}
	start, _, _ := p.object("a threadblock", tbFields, func(i int, off int) {
		switch i {
		case 0:
			p.checkID("threadblock", "id", t)
		case 1, 2, 3:
			v, _, _ := p.integer(tbFields[i], domIndex)
			switch i {
			case 1:
				tb.SendPeer = int(v)
			case 2:
				tb.RecvPeer = int(v)
			case 3:
				tb.Chan = int(v)
			}
		case 4:
			p.array("ops", func(s int, off int) {
				if !p.limit(&p.nops, p.lim.ops, off, "ops in all threadblocks") {
					return
				}
				p.cur[2] = s
				tb.Ops = append(tb.Ops, p.op())
				p.cur[2] = -1
			})
		}
	})
	tb.Pos = p.irPos(start)
	return tb
}

var opFields = []string{"op", "src", "srcs", "dst", "dsts", "count", "chans", "barrier", "deps", "publish"}

const (
	oOp = iota
	oSrc
	oSrcs
	oDst
	oDsts
	oCount
	oChans
	oBarrier
	oDeps
	oPublish
)

func (p *parser) op() ir.Op {
	op := ir.Op{}
	codeOK := false
	var srcsOff, dstsOff int
	start, seen, ok := p.object("an op", opFields, func(i int, off int) {
		switch i {
		case oOp:
			s, off, ok := p.str("op")
			if !ok {
				return
			}
			c, err := ir.ParseOpcode(s)
			if err != nil {
				p.errAt(diag.UnknownOp, off, opHint(s), "unknown op %q", s)
				return
			}
			op.Code, codeOK = c, true
		case oSrc, oDst:
			r, ok := p.ref(opFields[i])
			if ok {
				if i == oSrc {
					op.Srcs = []ir.Ref{r}
				} else {
					op.Dsts = []ir.Ref{r}
				}
			}
		case oSrcs:
			srcsOff = off
			op.Srcs = p.refs("srcs")
		case oDsts:
			dstsOff = off
			op.Dsts = p.refs("dsts")
		case oCount:
			op.Count, _, _ = p.integer("count", domSize)
		case oChans:
			p.intList("chans", func(v int64) { op.Chans = append(op.Chans, int(v)) })
		case oBarrier:
			op.Barrier, op.BarrierTBs = p.barrier()
		case oDeps:
			p.array("deps", func(k int, off int) {
				if k >= p.lim.list {
					p.tooMany(off, p.lim.list, "deps entries")
					return
				}
				if d, ok := p.dep(); ok {
					op.Deps = append(op.Deps, d)
				}
			})
		case oPublish:
			op.Publish, _, _ = p.boolean("publish")
		}
	})
	op.Pos = p.irPos(start)
	if !ok {
		return op
	}
	if seen&(1<<oSrc) != 0 && seen&(1<<oSrcs) != 0 {
		p.errAt(diag.BadValue, srcsOff, `use "src" for one ref or "srcs" for a list`, "an op has both \"src\" and \"srcs\"")
	}
	if seen&(1<<oDst) != 0 && seen&(1<<oDsts) != 0 {
		p.errAt(diag.BadValue, dstsOff, `use "dst" for one ref or "dsts" for a list`, "an op has both \"dst\" and \"dsts\"")
	}
	if seen&(1<<oOp) == 0 {
		p.errAt(diag.MissingField, start, `add "op": one of `+opNames(), "an op has no \"op\" field")
	} else if codeOK && op.Code.Info().Data && seen&(1<<oCount) == 0 {
		p.errAt(diag.MissingField, start, `add "count": the number of chunks it moves`, "a %v op has no \"count\" field", op.Code)
	}
	return op
}

func opNames() string {
	var names []string
	for c := ir.Opcode(0); c < ir.NumOpcodes; c++ {
		names = append(names, c.String())
	}
	return strings.Join(names, ", ")
}

// foreignOps names the MSCCL and MSCCL++ op names users carry over, with
// their Theseus spelling.
var foreignOps = map[string]string{
	"put":   "MSCCL++ put is copy with a remote dst",
	"get":   "MSCCL++ get is copy with a remote src",
	"pws":   "MSCCL++ put-with-signal is copy with a remote dst, then signal",
	"pwsf":  "MSCCL++ put-with-signal-and-flush is copy with a remote dst, then signal and flush",
	"rs":    "MSCCL++ reduce-send is reduce with a remote dst",
	"re":    "MSCCL re is reduce with srcs [dst, src]",
	"cpy":   "MSCCL cpy is copy",
	"s":     "MSCCL s is send",
	"r":     "MSCCL r is recv",
	"ppkt":  "MSCCL++ packet ops are copy or reduce with packet refs",
	"rppkt": "MSCCL++ packet ops are copy or reduce with packet refs",
	"rspkt": "MSCCL++ packet ops are copy or reduce with packet refs",
	"cpkt":  "MSCCL++ packet ops are copy or reduce with packet refs",
	"tpkt":  "MSCCL++ packet ops are copy or reduce with packet refs",
	"rpkt":  "MSCCL++ packet ops are copy or reduce with packet refs",
	"upkt":  "MSCCL++ packet ops are copy or reduce with packet refs",
}

func opHint(s string) string {
	if h, ok := foreignOps[strings.ToLower(s)]; ok {
		return h + "; theseusc import converts whole MSCCL/MSCCL++ files"
	}
	var names []string
	for c := ir.Opcode(0); c < ir.NumOpcodes; c++ {
		names = append(names, c.String())
	}
	if h := unknownHint(s, names); strings.HasPrefix(h, "did you mean") {
		return h
	}
	return "use one of " + opNames()
}

// intList reads an array of indices.
func (p *parser) intList(what string, add func(int64)) {
	p.array(what, func(k int, off int) {
		if k >= p.lim.list {
			p.tooMany(off, p.lim.list, what+" entries")
			return
		}
		if v, _, ok := p.integer(what, domIndex); ok {
			add(v)
		}
	})
}

var barrierFields = []string{"id", "threadblocks"}

func (p *parser) barrier() (id, n int) {
	start, seen, ok := p.object("barrier", barrierFields, func(i int, off int) {
		v, _, _ := p.integer(barrierFields[i], domIndex)
		if i == 0 {
			id = int(v)
		} else {
			n = int(v)
		}
	})
	if ok && seen != 3 {
		p.errAt(diag.MissingField, start, `write "barrier": {"id": ID, "threadblocks": N}`,
			"a barrier needs both \"id\" and \"threadblocks\"")
	}
	return id, n
}

// dep reads [tb, step].
func (p *parser) dep() (ir.Dep, bool) {
	var v [2]int64
	n := 0
	good := true
	start, ok := p.array("a dependency", func(k int, off int) {
		if k >= 2 {
			p.skip()
			n++
			return
		}
		x, _, ok := p.integer("dependency", domIndex)
		good = good && ok
		v[k] = x
		n++
	})
	if !ok {
		return ir.Dep{}, false
	}
	if n != 2 {
		p.errAt(diag.BadValue, start, "write a dependency as [threadblock, step]", "a dependency has %d entries, want 2", n)
		return ir.Dep{}, false
	}
	return ir.Dep{TB: int(v[0]), Step: int(v[1])}, good
}

// pairChannels fills PeerChannel of the channels that gave none (implicit
// lists them as (rank, channel)).
func pairChannels(prog *ir.Program, implicit [][2]int) {
	if len(implicit) == 0 {
		return
	}
	def := DefaultPeerChannels(prog)
	for _, rc := range implicit {
		prog.Ranks[rc[0]].Channels[rc[1]].PeerChannel = def[rc[0]][rc[1]]
	}
}

// DefaultPeerChannels returns, for every channel end c of every rank r, the
// end it pairs with when the file gives no peer_channel: the k-th channel
// from rank A to rank B of a type pairs with the k-th channel from B to A of
// that type (k counted in declaration order, from 0). Where B has no such
// channel, or B is not a rank of the program, the result is -1 (the
// verifier reports TS0103). The result ignores explicit PeerChannel values.
// Cost: linear in the number of channels.
func DefaultPeerChannels(p *ir.Program) [][]int {
	type key struct {
		peer int
		typ  ir.ChannelType
	}
	// byPeer[r][(q,t)] lists r's channels to q of type t, in order.
	byPeer := make([]map[key][]int, len(p.Ranks))
	out := make([][]int, len(p.Ranks))
	for r := range p.Ranks {
		out[r] = make([]int, len(p.Ranks[r].Channels))
		for c, ch := range p.Ranks[r].Channels {
			if byPeer[r] == nil {
				byPeer[r] = map[key][]int{}
			}
			k := key{ch.Peer, ch.Type}
			byPeer[r][k] = append(byPeer[r][k], c)
		}
	}
	for r := range p.Ranks {
		seen := map[key]int{}
		for c, ch := range p.Ranks[r].Channels {
			k := key{ch.Peer, ch.Type}
			ord := seen[k]
			seen[k]++
			out[r][c] = -1
			if ch.Peer < 0 || ch.Peer >= len(p.Ranks) {
				continue
			}
			if back := byPeer[ch.Peer][key{r, ch.Type}]; ord < len(back) {
				out[r][c] = back[ord]
			}
		}
	}
	return out
}
