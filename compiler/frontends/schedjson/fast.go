package schedjson

import (
	"bytes"
	"math"
	"unicode/utf8"

	"github.com/theseus-ccl/theseus/ir"
)

// The fast path of Parse.
//
// parseFast reads the plain subset of schedule JSON that Format, the
// generators and the importers write, in one pass over the bytes, with no
// reflection and no per-value allocation: objects and arrays, strings
// without escapes or control characters (valid UTF-8), integers without
// fraction or exponent, true and false, the known keys of each object (in
// any order, each at most once) and every value in its domain. On anything
// else (a syntax error, null, an escape, an unknown, repeated or missing
// field, a value of the wrong type or outside its domain, a size limit) it
// gives up, and parse runs the careful encoding/json path, which reports
// the diagnostics with their codes and positions. Giving up is always safe:
// the fast path decides nothing that the careful path would decide
// differently.
//
// Every document the fast path accepts is one the careful path accepts
// with no diagnostic, and the two programs are identical, positions, nil
// slices and all (TestParseFastAgrees, TestParseFastMutations and
// FuzzParseFast check this against the careful path).
//
// Why not encoding/json for this too: on the 2-core development machine
// json.Unmarshal into typed structs reads a 64-rank ring at 14–18 MB/s and
// json.Valid alone at 80–100 MB/s (docs/benchmarks.md), while the goal
// needs 50 MB/s for the whole parse; this reader runs at 140–290 MB/s.
// encoding/json stays the reference: the careful path is the only one that
// reports errors.

// A slab's arrays start at slabMin elements and double up to slabMax, so a
// small document costs little and a large one a few thousand allocations.
const (
	slabMin = 16
	slabMax = 4096
)

// slab hands out short slices (one op's refs, channels or dependencies)
// carved from large shared arrays, so that a program of millions of ops
// costs a few thousand allocations. Each slice has cap == len, so appending
// to one never writes into its neighbour.
type slab[T any] []T

func (s *slab[T]) take(xs []T) []T {
	n := len(xs)
	if n == 0 {
		return nil
	}
	if cap(*s)-len(*s) < n {
		s.grow(n)
	}
	start := len(*s)
	*s = append(*s, xs...)
	return (*s)[start:len(*s):len(*s)]
}

// grow starts a new array with room for at least n elements.
func (s *slab[T]) grow(n int) {
	*s = make([]T, 0, max(n, min(slabMax, max(slabMin, 2*cap(*s)))))
}

func (s *slab[T]) take1(x T) []T {
	if cap(*s) == len(*s) {
		s.grow(1)
	}
	*s = append(*s, x)
	n := len(*s)
	return (*s)[n-1 : n : n]
}

type fast struct {
	data      []byte
	i         int   // next byte
	line      int32 // 1-based line of data[i]
	lineStart int   // offset of the first byte of that line
	lim       limits

	nops, nchans, ntbs int
	implicit           [][2]int

	refs  slab[ir.Ref]
	deps  slab[ir.Dep]
	chans slab[int]
	// Scratch lists, reused: one op's refs, channels and dependencies, and
	// one threadblock's ops (copied out at their final size).
	tmpRefs  []ir.Ref
	tmpChans []int
	tmpDeps  []ir.Dep
	tmpOps   []ir.Op
}

// parseFast returns the program and true when data is in the plain subset
// and valid; otherwise nil and false (the caller then runs the careful
// path).
func parseFast(filename string, data []byte, lim limits) (*ir.Program, bool) {
	if len(data) > lim.input {
		return nil, false
	}
	f := &fast{data: data, line: 1, lim: lim}
	return f.program(filename)
}

// ---- bytes ----

// ws skips JSON whitespace, counting lines ('\n' ends a line, as lineCol
// counts them).
func (f *fast) ws() {
	b, i := f.data, f.i
	for ; i < len(b); i++ {
		c := b[i]
		if c > ' ' {
			break
		}
		if c == '\n' {
			f.line++
			f.lineStart = i + 1
		} else if c != ' ' && c != '\t' && c != '\r' {
			break
		}
	}
	f.i = i
}

// at reports whether the next byte is c.
func (f *fast) at(c byte) bool { return f.i < len(f.data) && f.data[f.i] == c }

// pos is the position of the next byte.
func (f *fast) pos() ir.Pos {
	return ir.Pos{Line: f.line, Col: int32(f.i - f.lineStart + 1)}
}

// str reads a string without escapes or control characters, in valid
// UTF-8 (exactly the strings encoding/json returns unchanged).
func (f *fast) str() ([]byte, bool) {
	if !f.at('"') {
		return nil, false
	}
	start := f.i + 1
	high := false
	for j := start; j < len(f.data); j++ {
		switch c := f.data[j]; {
		case c == '"':
			s := f.data[start:j]
			if high && !utf8.Valid(s) {
				return nil, false
			}
			f.i = j + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			high = true
		}
	}
	return nil, false
}

// integer reads an integer literal (JSON grammar, no fraction or exponent)
// in domain d.
func (f *fast) integer(d domain) (int64, bool) {
	b, i := f.data, f.i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return 0, false
	}
	var v uint64
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			c := uint64(b[i] - '0')
			if v > (math.MaxInt64-c)/10 {
				return 0, false // out of int64: the careful path reports it
			}
			v = v*10 + c
			i++
		}
	}
	if i < len(b) {
		if c := b[i]; c == '.' || c == 'e' || c == 'E' || (c >= '0' && c <= '9') {
			return 0, false // a fraction, an exponent or a leading zero
		}
	}
	x := int64(v)
	if neg {
		x = -x
	}
	if !d.has(x) {
		return 0, false
	}
	f.i = i
	return x, true
}

func (f *fast) boolean() (bool, bool) {
	rest := f.data[f.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("true")):
		f.i += 4
		return true, true
	case bytes.HasPrefix(rest, []byte("false")):
		f.i += 5
		return false, true
	}
	return false, false
}

// object reads an object whose '{' is the next byte, calling member for
// each key with the value next; member must consume the value.
func (f *fast) object(member func(key []byte) bool) bool {
	if !f.at('{') {
		return false
	}
	f.i++
	f.ws()
	if f.at('}') {
		f.i++
		return true
	}
	for {
		k, ok := f.str()
		if !ok {
			return false
		}
		f.ws()
		if !f.at(':') {
			return false
		}
		f.i++
		f.ws()
		if !member(k) {
			return false
		}
		f.ws()
		switch {
		case f.at(','):
			f.i++
			f.ws()
		case f.at('}'):
			f.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array whose '[' is the next byte, calling elem for each
// element (with its index) with the element next; elem must consume it.
func (f *fast) array(elem func(k int) bool) bool {
	if !f.at('[') {
		return false
	}
	f.i++
	f.ws()
	if f.at(']') {
		f.i++
		return true
	}
	for k := 0; ; k++ {
		if !elem(k) {
			return false
		}
		f.ws()
		switch {
		case f.at(','):
			f.i++
			f.ws()
		case f.at(']'):
			f.i++
			return true
		default:
			return false
		}
	}
}

// field returns the index of key in fields and marks it in seen; -1 for
// an unknown or repeated key.
func field(fields []string, key []byte, seen *uint32) int {
	for i, name := range fields {
		if name == string(key) {
			if *seen&(1<<i) != 0 {
				return -1
			}
			*seen |= 1 << i
			return i
		}
	}
	return -1
}

// ---- enum names ----

// The names Format writes, resolved without allocating or hashing; any
// other spelling goes to the ir.Parse* function, so the result is always
// what the careful path gets.
var (
	fastOpcodes []string // fastOpcodes[c] is opcode c's name
	fastBufs    [256]struct {
		ok bool
		k  ir.BufKind
	} // by the one-letter name
)

func init() {
	for c := ir.Opcode(0); c < ir.NumOpcodes; c++ {
		name := c.String()
		if got, err := ir.ParseOpcode(name); err != nil || got != c {
			name = "" // never matches a name: the fallback decides
		}
		fastOpcodes = append(fastOpcodes, name)
	}
	for k := ir.Input; k < ir.NumBufKinds; k++ {
		if name := k.String(); len(name) == 1 {
			if got, err := ir.ParseBufKind(name); err == nil && got == k {
				fastBufs[name[0]] = struct {
					ok bool
					k  ir.BufKind
				}{true, k}
			}
		}
	}
}

func opcodeOf(s []byte) (ir.Opcode, bool) {
	for c, name := range fastOpcodes {
		if name == string(s) && name != "" {
			return ir.Opcode(c), true
		}
	}
	c, err := ir.ParseOpcode(string(s))
	return c, err == nil
}

func bufKindOf(s []byte) (ir.BufKind, bool) {
	if len(s) == 1 && fastBufs[s[0]].ok {
		return fastBufs[s[0]].k, true
	}
	k, err := ir.ParseBufKind(string(s))
	return k, err == nil
}

// ---- the document ----

func (f *fast) program(filename string) (*ir.Program, bool) {
	f.ws()
	if !f.at('{') {
		return nil, false
	}
	prog := &ir.Program{File: filename, Root: -1, Pos: f.pos()}
	var seen uint32
	ok := f.object(func(k []byte) bool {
		var ok bool
		switch field(programFields, k, &seen) {
		case fVersion:
			_, ok = f.integer(domain{1, 1}) // the token "1": the grammar has no other spelling of 1
		case fName:
			var s []byte
			s, ok = f.str()
			prog.Name = string(s)
		case fCollective:
			var s []byte
			if s, ok = f.str(); ok {
				c, err := ir.ParseCollective(string(s))
				prog.Collective, ok = c, err == nil
			}
		case fNRanks:
			var v int64
			v, ok = f.integer(domNRanks)
			prog.NRanks = int(v)
		case fNLocalRanks:
			var v int64
			v, ok = f.integer(domLocal)
			prog.NLocalRanks = int(v)
		case fRoot:
			var v int64
			v, ok = f.integer(domIndex)
			prog.Root = int(v)
		case fProtocol:
			var s []byte
			if s, ok = f.str(); ok {
				pr, err := ir.ParseProtocol(string(s))
				prog.Protocol, ok = pr, err == nil
			}
		case fChunksPerBlock:
			prog.ChunksPerBlock, ok = f.integer(domPos)
		case fInPlace:
			prog.InPlace, ok = f.boolean()
		case fOutOfPlace:
			prog.OutOfPlace, ok = f.boolean()
		case fMinBytes:
			prog.MinBytes, ok = f.integer(domSize)
		case fMaxBytes:
			prog.MaxBytes, ok = f.integer(domSize)
		case fThreads:
			var v int64
			v, ok = f.integer(domThreads)
			prog.NumThreads = int(v)
		case fSliceBytes:
			prog.SliceBytes, ok = f.integer(domSize)
		case fMeta:
			prog.Meta, ok = f.meta()
		case fRanks:
			ok = f.array(func(r int) bool {
				if r >= f.lim.ranks {
					return false
				}
				rk, ok := f.rank(r)
				prog.Ranks = append(prog.Ranks, rk)
				return ok
			})
		}
		return ok
	})
	if !ok {
		return nil, false
	}
	f.ws()
	if f.i != len(f.data) {
		return nil, false // a second value or garbage after the document
	}
	for _, i := range programRequired {
		if seen&(1<<i) == 0 {
			return nil, false
		}
	}
	if prog.Collective.Rooted() && seen&(1<<fRoot) == 0 {
		return nil, false
	}
	pairChannels(prog, f.implicit)
	return prog, true
}

func (f *fast) meta() (map[string]string, bool) {
	var m map[string]string
	n := 0
	ok := f.object(func(k []byte) bool {
		if n++; n > f.lim.list {
			return false
		}
		v, ok := f.str()
		if !ok {
			return false
		}
		if m == nil {
			m = map[string]string{}
		}
		if _, dup := m[string(k)]; dup {
			return false
		}
		m[string(k)] = string(v)
		return true
	})
	return m, ok
}

func (f *fast) rank(r int) (ir.Rank, bool) {
	var rk ir.Rank
	if !f.at('{') {
		return rk, false
	}
	rk.Pos = f.pos()
	var seen uint32
	ok := f.object(func(k []byte) bool {
		i := field(rankFields, k, &seen)
		switch i {
		case 0, 1: // "rank" or "id", not both
			if seen&3 == 3 {
				return false
			}
			v, ok := f.integer(domIndex)
			return ok && v == int64(r)
		case 2, 3, 4:
			var ok bool
			rk.Chunks[i-2], ok = f.integer(domSize)
			return ok
		case 5:
			return f.array(func(c int) bool {
				if f.nchans++; f.nchans > f.lim.channels {
					return false
				}
				ch, explicit, ok := f.channel(c)
				if !explicit {
					f.implicit = append(f.implicit, [2]int{r, c})
				}
				rk.Channels = append(rk.Channels, ch)
				return ok
			})
		case 6:
			return f.array(func(t int) bool {
				if f.ntbs++; f.ntbs > f.lim.tbs {
					return false
				}
				tb, ok := f.threadblock(t)
				rk.TBs = append(rk.TBs, tb)
				return ok
			})
		}
		return false
	})
	return rk, ok
}

func (f *fast) channel(c int) (ir.Channel, bool, bool) {
	ch := ir.Channel{Peer: -1, PeerChannel: -1}
	if !f.at('{') {
		return ch, false, false
	}
	ch.Pos = f.pos()
	var seen uint32
	ok := f.object(func(k []byte) bool {
		var v int64
		var ok bool
		switch field(channelFields, k, &seen) {
		case 0:
			v, ok = f.integer(domIndex)
			return ok && v == int64(c)
		case 1:
			v, ok = f.integer(domIndex)
			ch.Peer = int(v)
		case 2:
			v, ok = f.integer(domIndex)
			ch.PeerChannel = int(v)
		case 3:
			var s []byte
			if s, ok = f.str(); ok {
				switch string(s) {
				case "memory":
					ch.Type = ir.MemoryChannel
				case "port":
					ch.Type = ir.PortChannel
				default:
					t, err := ir.ParseChannelType(string(s))
					ch.Type, ok = t, err == nil
				}
			}
		case 4:
			ch.Init, ok = f.integer(domSize)
		}
		return ok
	})
	return ch, seen&(1<<2) != 0, ok && seen&(1<<1) != 0
}

func (f *fast) threadblock(t int) (ir.Threadblock, bool) {
	tb := ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1}
	if !f.at('{') {
		return tb, false
	}
	tb.Pos = f.pos()
	var seen uint32
	ok := f.object(func(k []byte) bool {
		var v int64
		var ok bool
		switch field(tbFields, k, &seen) {
		case 0:
			v, ok = f.integer(domIndex)
			return ok && v == int64(t)
		case 1:
			v, ok = f.integer(domIndex)
			tb.SendPeer = int(v)
		case 2:
			v, ok = f.integer(domIndex)
			tb.RecvPeer = int(v)
		case 3:
			v, ok = f.integer(domIndex)
			tb.Chan = int(v)
		case 4:
			f.tmpOps = f.tmpOps[:0]
			ok = f.array(func(int) bool {
				if f.nops++; f.nops > f.lim.ops {
					return false
				}
				op, ok := f.op()
				f.tmpOps = append(f.tmpOps, op)
				return ok
			})
			if ok && len(f.tmpOps) > 0 {
				tb.Ops = append([]ir.Op(nil), f.tmpOps...)
			}
		}
		return ok
	})
	return tb, ok
}

func (f *fast) op() (ir.Op, bool) {
	var op ir.Op
	if !f.at('{') {
		return op, false
	}
	op.Pos = f.pos()
	var seen uint32
	ok := f.object(func(k []byte) bool {
		i := -1
		switch string(k) {
		case "op":
			i = oOp
		case "src":
			i = oSrc
		case "srcs":
			i = oSrcs
		case "dst":
			i = oDst
		case "dsts":
			i = oDsts
		case "count":
			i = oCount
		case "chans":
			i = oChans
		case "barrier":
			i = oBarrier
		case "deps":
			i = oDeps
		case "publish":
			i = oPublish
		}
		if i < 0 || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		var ok bool
		switch i {
		case oOp:
			var s []byte
			if s, ok = f.str(); ok {
				op.Code, ok = opcodeOf(s)
			}
		case oSrc, oDst:
			var r ir.Ref
			if r, ok = f.ref(); ok {
				if i == oSrc {
					op.Srcs = f.refs.take1(r)
				} else {
					op.Dsts = f.refs.take1(r)
				}
			}
		case oSrcs:
			op.Srcs, ok = f.refList()
		case oDsts:
			op.Dsts, ok = f.refList()
		case oCount:
			op.Count, ok = f.integer(domSize)
		case oChans:
			f.tmpChans = f.tmpChans[:0]
			ok = f.array(func(k int) bool {
				if k >= f.lim.list {
					return false
				}
				v, ok := f.integer(domIndex)
				f.tmpChans = append(f.tmpChans, int(v))
				return ok
			})
			op.Chans = f.chans.take(f.tmpChans)
		case oBarrier:
			op.Barrier, op.BarrierTBs, ok = f.barrier()
		case oDeps:
			f.tmpDeps = f.tmpDeps[:0]
			ok = f.array(func(k int) bool {
				if k >= f.lim.list {
					return false
				}
				d, ok := f.dep()
				f.tmpDeps = append(f.tmpDeps, d)
				return ok
			})
			op.Deps = f.deps.take(f.tmpDeps)
		case oPublish:
			op.Publish, ok = f.boolean()
		}
		return ok
	})
	switch {
	case !ok,
		seen&(1<<oSrc) != 0 && seen&(1<<oSrcs) != 0,
		seen&(1<<oDst) != 0 && seen&(1<<oDsts) != 0,
		seen&(1<<oOp) == 0,
		op.Code.Info().Data && seen&(1<<oCount) == 0:
		return op, false
	}
	return op, true
}

func (f *fast) barrier() (id, n int, ok bool) {
	var seen uint32
	ok = f.object(func(k []byte) bool {
		i := field(barrierFields, k, &seen)
		if i < 0 {
			return false
		}
		v, ok := f.integer(domIndex)
		if i == 0 {
			id = int(v)
		} else {
			n = int(v)
		}
		return ok
	})
	return id, n, ok && seen == 3
}

// dep reads [tb, step].
func (f *fast) dep() (ir.Dep, bool) {
	var v [2]int64
	n := 0
	ok := f.array(func(k int) bool {
		if k >= 2 {
			return false
		}
		var ok bool
		v[k], ok = f.integer(domIndex)
		n++
		return ok
	})
	return ir.Dep{TB: int(v[0]), Step: int(v[1])}, ok && n == 2
}

func (f *fast) refList() ([]ir.Ref, bool) {
	f.tmpRefs = f.tmpRefs[:0]
	ok := f.array(func(k int) bool {
		if k >= f.lim.list {
			return false
		}
		r, ok := f.ref()
		f.tmpRefs = append(f.tmpRefs, r)
		return ok
	})
	return f.refs.take(f.tmpRefs), ok
}

func (f *fast) ref() (ir.Ref, bool) {
	if f.at('"') {
		s, ok := f.str()
		if !ok {
			return ir.Ref{}, false
		}
		r, err := ParseRef(string(s))
		return r, err == nil
	}
	r := ir.Ref{Chan: -1}
	var seen uint32
	ok := f.object(func(k []byte) bool {
		var ok bool
		switch field(refFields, k, &seen) {
		case 0:
			var s []byte
			if s, ok = f.str(); ok {
				r.Buf, ok = bufKindOf(s)
			}
		case 1:
			r.Off, ok = f.integer(domSize)
		case 2:
			var v int64
			v, ok = f.integer(domIndex)
			r.Chan = int(v)
		case 3:
			r.Packet, ok = f.boolean()
		}
		return ok
	})
	return r, ok && seen&3 == 3
}
