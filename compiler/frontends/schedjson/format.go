package schedjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
)

// Format writes p as canonical Theseus schedule JSON v1:
//
//   - keys in the order of docs/schedule-format.md, two-space indentation,
//     one channel per line and one op per line, a final newline;
//   - required fields always (version, name, collective, nranks, protocol,
//     chunks_per_block, inplace, outofplace, ranks; root for rooted
//     collectives; count for data ops; buf and off of a ref), every other
//     field only when it differs from its default (peer_channel only when it
//     differs from the default pairing of DefaultPeerChannels);
//   - explicit positions: "rank" on ranks, "id" on channels and
//     threadblocks; refs as objects; a single src or dst as "src"/"dst",
//     two or more as "srcs"/"dsts"; meta keys sorted.
//
// Parse(Format(p)) equals p except for positions, Program.File, and nil
// versus empty slices and maps; Format(Parse(Format(p))) equals Format(p).
// Format ignores Pos and File.
//
// Errors: p is nil, or holds something the format cannot represent (an
// undefined enum value, or a number outside the domain Parse accepts, such
// as a negative offset or more than ir.MaxRanks ranks); the error names the
// rank, threadblock and step.
func Format(p *ir.Program) ([]byte, error) { return FormatMax(p, 0) }

// ErrTooLarge is wrapped by FormatMax's error for a program whose JSON is
// over its limit.
var ErrTooLarge = errors.New("schedjson: JSON over the limit")

// FormatMax is Format that gives up, with an error wrapping ErrTooLarge,
// as soon as the JSON is known to be longer than max bytes (0: no limit),
// so that refusing a program too large to write costs memory in
// proportion to max, not to the program's JSON (a 2048-rank ring
// allreduce's is 608 MB). The error says how far it got.
func FormatMax(p *ir.Program, max int) ([]byte, error) {
	if p == nil {
		return nil, errors.New("schedjson: nil program")
	}
	if err := check(p); err != nil {
		return nil, err
	}
	w := &writer{max: max}
	if err := w.program(p); err != nil {
		return nil, err
	}
	return w.b.Bytes(), nil
}

type writer struct {
	b   bytes.Buffer
	max int // FormatMax's limit, 0 for none
}

// member is one "key": value pair, the value already encoded.
type member struct{ k, v string }

// quote encodes s as a JSON string, without HTML escaping.
func quote(s string) string {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
	}
	if plain {
		return `"` + s + `"`
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

func num[T ~int | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }

func boolean(v bool) string { return strconv.FormatBool(v) }

// inline encodes an object on one line.
func inline(ms []member) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quote(m.k))
		b.WriteString(": ")
		b.WriteString(m.v)
	}
	b.WriteByte('}')
	return b.String()
}

// block encodes an object over several lines, its members indented one
// level deeper than indent.
func block(indent string, ms []member) string {
	if len(ms) == 0 {
		return "{}"
	}
	var b strings.Builder
	b.WriteString("{\n")
	for i, m := range ms {
		b.WriteString(indent + "  ")
		b.WriteString(quote(m.k))
		b.WriteString(": ")
		b.WriteString(m.v)
		if i < len(ms)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(indent + "}")
	return b.String()
}

// list encodes an array with one element per line.
func list(indent string, elems []string) string {
	if len(elems) == 0 {
		return "[]"
	}
	var b strings.Builder
	b.WriteString("[\n")
	for i, e := range elems {
		b.WriteString(indent + "  ")
		b.WriteString(e)
		if i < len(elems)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString(indent + "]")
	return b.String()
}

// flat encodes an array on one line.
func flat(elems []string) string { return "[" + strings.Join(elems, ", ") + "]" }

func (w *writer) program(p *ir.Program) error {
	ms := []member{
		{"version", num(Version)},
		{"name", quote(p.Name)},
		{"collective", quote(p.Collective.String())},
		{"nranks", num(p.NRanks)},
	}
	if p.NLocalRanks != 0 {
		ms = append(ms, member{"nlocalranks", num(p.NLocalRanks)})
	}
	if p.Collective.Rooted() || p.Root != -1 {
		ms = append(ms, member{"root", num(p.Root)})
	}
	ms = append(ms,
		member{"protocol", quote(p.Protocol.String())},
		member{"chunks_per_block", num(p.ChunksPerBlock)},
		member{"inplace", boolean(p.InPlace)},
		member{"outofplace", boolean(p.OutOfPlace)},
	)
	for _, f := range []struct {
		k string
		v int64
	}{{"min_bytes", p.MinBytes}, {"max_bytes", p.MaxBytes}, {"threads_per_block", int64(p.NumThreads)}, {"slice_bytes", p.SliceBytes}} {
		if f.v != 0 {
			ms = append(ms, member{f.k, num(f.v)})
		}
	}
	if len(p.Meta) > 0 {
		keys := make([]string, 0, len(p.Meta))
		for k := range p.Meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var mm []member
		for _, k := range keys {
			mm = append(mm, member{k, quote(p.Meta[k])})
		}
		ms = append(ms, member{"meta", block("  ", mm)})
	}
	def := DefaultPeerChannels(p)
	ranks := make([]string, len(p.Ranks))
	size := 0
	for r := range p.Ranks {
		ranks[r] = rank(p, r, def[r])
		if size += len(ranks[r]); w.max > 0 && size > w.max {
			return fmt.Errorf("%w: the first %d of %d ranks alone are %d bytes", ErrTooLarge, r+1, len(p.Ranks), size)
		}
	}
	ms = append(ms, member{"ranks", list("  ", ranks)})
	w.b.WriteString(block("", ms))
	w.b.WriteByte('\n')
	if w.max > 0 && w.b.Len() > w.max {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, w.b.Len())
	}
	return nil
}

func rank(p *ir.Program, r int, def []int) string {
	const ind = "    "
	rk := &p.Ranks[r]
	ms := []member{{"rank", num(r)}}
	for k, name := range []string{"input_chunks", "output_chunks", "scratch_chunks"} {
		if rk.Chunks[k] != 0 {
			ms = append(ms, member{name, num(rk.Chunks[k])})
		}
	}
	if len(rk.Channels) > 0 {
		chs := make([]string, len(rk.Channels))
		for c, ch := range rk.Channels {
			cm := []member{{"id", num(c)}, {"peer", num(ch.Peer)}}
			if ch.PeerChannel != def[c] {
				cm = append(cm, member{"peer_channel", num(ch.PeerChannel)})
			}
			if ch.Type != ir.MemoryChannel {
				cm = append(cm, member{"type", quote(ch.Type.String())})
			}
			if ch.Init != 0 {
				cm = append(cm, member{"init", num(ch.Init)})
			}
			chs[c] = inline(cm)
		}
		ms = append(ms, member{"channels", list(ind+"  ", chs)})
	}
	if len(rk.TBs) > 0 {
		tbs := make([]string, len(rk.TBs))
		for t := range rk.TBs {
			tbs[t] = threadblock(&rk.TBs[t], t, ind+"    ")
		}
		ms = append(ms, member{"threadblocks", list(ind+"  ", tbs)})
	}
	return block(ind, ms)
}

func threadblock(tb *ir.Threadblock, t int, ind string) string {
	ms := []member{{"id", num(t)}}
	if tb.SendPeer != -1 {
		ms = append(ms, member{"send_peer", num(tb.SendPeer)})
	}
	if tb.RecvPeer != -1 {
		ms = append(ms, member{"recv_peer", num(tb.RecvPeer)})
	}
	if tb.Chan != -1 {
		ms = append(ms, member{"chan", num(tb.Chan)})
	}
	if len(tb.Ops) > 0 {
		ops := make([]string, len(tb.Ops))
		for i := range tb.Ops {
			ops[i] = op(&tb.Ops[i])
		}
		ms = append(ms, member{"ops", list(ind+"  ", ops)})
	}
	return block(ind, ms)
}

func refString(r ir.Ref) string {
	ms := []member{{"buf", quote(r.Buf.String())}, {"off", num(r.Off)}}
	if r.Chan != -1 {
		ms = append(ms, member{"chan", num(r.Chan)})
	}
	if r.Packet {
		ms = append(ms, member{"packet", "true"})
	}
	return inline(ms)
}

func refMembers(one, many string, rs []ir.Ref) []member {
	switch len(rs) {
	case 0:
		return nil
	case 1:
		return []member{{one, refString(rs[0])}}
	}
	es := make([]string, len(rs))
	for i, r := range rs {
		es[i] = refString(r)
	}
	return []member{{many, flat(es)}}
}

func op(o *ir.Op) string {
	ms := []member{{"op", quote(o.Code.String())}}
	ms = append(ms, refMembers("src", "srcs", o.Srcs)...)
	ms = append(ms, refMembers("dst", "dsts", o.Dsts)...)
	if o.Code.Info().Data || o.Count != 0 {
		ms = append(ms, member{"count", num(o.Count)})
	}
	if len(o.Chans) > 0 {
		es := make([]string, len(o.Chans))
		for i, c := range o.Chans {
			es[i] = num(c)
		}
		ms = append(ms, member{"chans", flat(es)})
	}
	if o.Code == ir.OpBarrier || o.Barrier != 0 || o.BarrierTBs != 0 {
		ms = append(ms, member{"barrier", inline([]member{{"id", num(o.Barrier)}, {"threadblocks", num(o.BarrierTBs)}})})
	}
	if len(o.Deps) > 0 {
		es := make([]string, len(o.Deps))
		for i, d := range o.Deps {
			es[i] = flat([]string{num(d.TB), num(d.Step)})
		}
		ms = append(ms, member{"deps", flat(es)})
	}
	if o.Publish {
		ms = append(ms, member{"publish", "true"})
	}
	return inline(ms)
}

// check rejects what Parse would not read back.
func check(p *ir.Program) error {
	bad := func(where, format string, args ...any) error {
		return fmt.Errorf("schedjson: %s%s", where, fmt.Sprintf(format, args...))
	}
	in := func(where, field string, v int64, d domain) error {
		if d.has(v) {
			return nil
		}
		return bad(where, "%s = %d is outside the format's range %v", field, v, d)
	}
	if p.Collective >= ir.NumCollectives {
		return bad("", "undefined collective %d", uint8(p.Collective))
	}
	if p.Protocol >= ir.NumProtocols {
		return bad("", "undefined protocol %d", uint8(p.Protocol))
	}
	if len(p.Ranks) > ir.MaxRanks {
		return bad("", "%d ranks, over the limit of %d", len(p.Ranks), ir.MaxRanks)
	}
	for _, f := range []struct {
		name string
		v    int64
		d    domain
	}{
		{"nranks", int64(p.NRanks), domNRanks},
		{"nlocalranks", int64(p.NLocalRanks), domLocal},
		{"root", int64(p.Root), domIndex},
		{"chunks_per_block", p.ChunksPerBlock, domPos},
		{"min_bytes", p.MinBytes, domSize},
		{"max_bytes", p.MaxBytes, domSize},
		{"threads_per_block", int64(p.NumThreads), domThreads},
		{"slice_bytes", p.SliceBytes, domSize},
	} {
		if err := in("", f.name, f.v, f.d); err != nil {
			return err
		}
	}
	if len(p.Meta) > MaxListLen {
		return bad("", "%d meta entries, over the limit of %d", len(p.Meta), MaxListLen)
	}
	var nch, ntb, nops int
	for r := range p.Ranks {
		rk := &p.Ranks[r]
		where := fmt.Sprintf("rank %d: ", r)
		for k := range rk.Chunks {
			if err := in(where, ir.BufKind(k).LongName()+"_chunks", rk.Chunks[k], domSize); err != nil {
				return err
			}
		}
		nch += len(rk.Channels)
		ntb += len(rk.TBs)
		if nch > MaxChannels || ntb > MaxThreadblocks {
			return bad(where, "over the limit of %d channels or %d threadblocks", MaxChannels, MaxThreadblocks)
		}
		for c, ch := range rk.Channels {
			w := fmt.Sprintf("rank %d channel %d: ", r, c)
			if ch.Type >= ir.NumChannelTypes {
				return bad(w, "undefined channel type %d", uint8(ch.Type))
			}
			for _, e := range []error{
				in(w, "peer", int64(ch.Peer), domIndex),
				in(w, "peer_channel", int64(ch.PeerChannel), domIndex),
				in(w, "init", ch.Init, domSize),
			} {
				if e != nil {
					return e
				}
			}
		}
		for t := range rk.TBs {
			tb := &rk.TBs[t]
			w := fmt.Sprintf("rank %d tb %d: ", r, t)
			for _, e := range []error{
				in(w, "send_peer", int64(tb.SendPeer), domIndex),
				in(w, "recv_peer", int64(tb.RecvPeer), domIndex),
				in(w, "chan", int64(tb.Chan), domIndex),
			} {
				if e != nil {
					return e
				}
			}
			nops += len(tb.Ops)
			if nops > MaxOps {
				return bad(w, "over the limit of %d ops", MaxOps)
			}
			for i := range tb.Ops {
				if err := checkOp(&tb.Ops[i], fmt.Sprintf("rank %d tb %d step %d: ", r, t, i), in, bad); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func checkOp(o *ir.Op, w string, in func(string, string, int64, domain) error, bad func(string, string, ...any) error) error {
	if !o.Code.Valid() {
		return bad(w, "undefined opcode %d", uint8(o.Code))
	}
	if len(o.Srcs) > MaxListLen || len(o.Dsts) > MaxListLen || len(o.Chans) > MaxListLen || len(o.Deps) > MaxListLen {
		return bad(w, "a list over the limit of %d entries", MaxListLen)
	}
	if err := in(w, "count", o.Count, domSize); err != nil {
		return err
	}
	for _, rs := range [][]ir.Ref{o.Srcs, o.Dsts} {
		for _, r := range rs {
			if r.Buf >= ir.NumBufKinds {
				return bad(w, "undefined buffer %d", uint8(r.Buf))
			}
			if err := in(w, "off", r.Off, domSize); err != nil {
				return err
			}
			if err := in(w, "chan", int64(r.Chan), domIndex); err != nil {
				return err
			}
		}
	}
	for _, c := range o.Chans {
		if err := in(w, "chans entry", int64(c), domIndex); err != nil {
			return err
		}
	}
	for _, d := range o.Deps {
		if err := in(w, "dependency threadblock", int64(d.TB), domIndex); err != nil {
			return err
		}
		if err := in(w, "dependency step", int64(d.Step), domIndex); err != nil {
			return err
		}
	}
	if err := in(w, "barrier id", int64(o.Barrier), domIndex); err != nil {
		return err
	}
	return in(w, "barrier threadblocks", int64(o.BarrierTBs), domIndex)
}
