package ir

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// This file prints the textual IR (docs/ir-text.md; parsed by ir/irtext).
// The printer is canonical: one program prints as one text, and parsing that
// text gives back the same program (positions and File aside). Each print
// function below carries the grammar production it writes.
//
// Every field of a Program is printed, including fields that a valid
// program leaves at their defaults or that only a broken program sets (a
// count on a signal, chans on a copy), so that the verifier's broken inputs
// round-trip too. Defaults are omitted: root (0 for rooted collectives, -1
// otherwise), nlocalranks, minbytes, maxbytes, threads, slicebytes, buffer
// sizes, channel init and threadblock peers that are 0 or -1 as documented.

// Print writes p in the textual IR to w. It writes the whole program even
// when p holds values the text form cannot express (an undefined opcode,
// collective, protocol, buffer or channel type: printed as their String(),
// e.g. "opcode(200)", which the parser rejects), and then returns an error
// naming the first of them. Otherwise it returns only w's write error.
func Print(w io.Writer, p *Program) error {
	pr := printer{w: bufio.NewWriter(w)}
	pr.program(p)
	if err := pr.w.Flush(); err != nil {
		return err
	}
	return pr.bad
}

// String returns p in the textual IR (Print), including any values the text
// form cannot express.
func (p *Program) String() string {
	var b strings.Builder
	_ = Print(&b, p)
	return b.String()
}

type printer struct {
	w   *bufio.Writer
	bad error // first unprintable value
	num [24]byte
}

func (pr *printer) str(s string) { pr.w.WriteString(s) }

func (pr *printer) int(v int64) { pr.w.Write(strconv.AppendInt(pr.num[:0], v, 10)) }

// kv writes " key=value".
func (pr *printer) kv(key string, v int64) {
	pr.w.WriteByte(' ')
	pr.str(key)
	pr.w.WriteByte('=')
	pr.int(v)
}

func (pr *printer) invalid(format string, args ...any) {
	if pr.bad == nil {
		pr.bad = fmt.Errorf("ir.Print: "+format, args...)
	}
}

// DefaultRoot is the root the textual IR assumes when a program gives none:
// 0 for rooted collectives (broadcast, reduce, gather, scatter; ir.md
// "Roots") and -1 for the others.
func DefaultRoot(c Collective) int {
	if c.Rooted() {
		return 0
	}
	return -1
}

// program writes
//
//	Program = Header Meta* Rank* .
//	Header  = "program" String Collective HeaderAttr* .
//	HeaderAttr = "nranks" "=" Int | "chunks" "=" Int | "protocol" "=" Protocol
//	           | "root" "=" Int | "nlocalranks" "=" Int | "minbytes" "=" Int
//	           | "maxbytes" "=" Int | "threads" "=" Int | "slicebytes" "=" Int
//	           | "inplace" | "outofplace" .
func (pr *printer) program(p *Program) {
	pr.str("program ")
	pr.str(strconv.Quote(p.Name))
	pr.w.WriteByte(' ')
	if p.Collective >= NumCollectives {
		pr.invalid("undefined collective %d", uint8(p.Collective))
	}
	pr.str(p.Collective.String())
	pr.kv("nranks", int64(p.NRanks))
	pr.kv("chunks", p.ChunksPerBlock)
	pr.str(" protocol=")
	if p.Protocol >= NumProtocols {
		pr.invalid("undefined protocol %d", uint8(p.Protocol))
	}
	pr.str(p.Protocol.String())
	if p.Root != DefaultRoot(p.Collective) {
		pr.kv("root", int64(p.Root))
	}
	if p.NLocalRanks != 0 {
		pr.kv("nlocalranks", int64(p.NLocalRanks))
	}
	if p.MinBytes != 0 {
		pr.kv("minbytes", p.MinBytes)
	}
	if p.MaxBytes != 0 {
		pr.kv("maxbytes", p.MaxBytes)
	}
	if p.NumThreads != 0 {
		pr.kv("threads", int64(p.NumThreads))
	}
	if p.SliceBytes != 0 {
		pr.kv("slicebytes", p.SliceBytes)
	}
	if p.InPlace {
		pr.str(" inplace")
	}
	if p.OutOfPlace {
		pr.str(" outofplace")
	}
	pr.w.WriteByte('\n')
	pr.meta(p.Meta)
	for r := range p.Ranks {
		pr.rank(r, &p.Ranks[r])
	}
}

// meta writes, in key order,
//
//	Meta = "meta" String "=" String .
func (pr *printer) meta(m map[string]string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		pr.str("meta ")
		pr.str(strconv.Quote(k))
		pr.str(" = ")
		pr.str(strconv.Quote(m[k]))
		pr.w.WriteByte('\n')
	}
}

// rank writes
//
//	Rank     = "rank" Int RankAttr* "{" (Channel | TB)* "}" .
//	RankAttr = ("input" | "output" | "scratch") "=" Int .
func (pr *printer) rank(id int, r *Rank) {
	pr.str("\nrank ")
	pr.int(int64(id))
	for k := BufKind(0); k < NumBufKinds; k++ {
		if r.Chunks[k] != 0 {
			pr.kv(k.LongName(), r.Chunks[k])
		}
	}
	if len(r.Channels) == 0 && len(r.TBs) == 0 {
		pr.str(" {}\n")
		return
	}
	pr.str(" {\n")
	for c := range r.Channels {
		pr.channel(c, &r.Channels[c])
	}
	for t := range r.TBs {
		pr.tb(t, &r.TBs[t])
	}
	pr.str("}\n")
}

// channel writes
//
//	Channel     = "channel" Int ChannelAttr* .
//	ChannelAttr = "peer" "=" Int "." Int | "memory" | "port" | "init" "=" Int .
func (pr *printer) channel(id int, c *Channel) {
	pr.str("  channel ")
	pr.int(int64(id))
	pr.str(" peer=")
	pr.int(int64(c.Peer))
	pr.w.WriteByte('.')
	pr.int(int64(c.PeerChannel))
	pr.w.WriteByte(' ')
	if c.Type >= NumChannelTypes {
		pr.invalid("undefined channel type %d", uint8(c.Type))
	}
	pr.str(c.Type.String())
	if c.Init != 0 {
		pr.kv("init", c.Init)
	}
	pr.w.WriteByte('\n')
}

// tb writes
//
//	TB     = "tb" Int TBAttr* "{" Op* "}" .
//	TBAttr = ("send" | "recv" | "chan") "=" Int .
func (pr *printer) tb(id int, t *Threadblock) {
	pr.str("  tb ")
	pr.int(int64(id))
	if t.SendPeer != -1 {
		pr.kv("send", int64(t.SendPeer))
	}
	if t.RecvPeer != -1 {
		pr.kv("recv", int64(t.RecvPeer))
	}
	if t.Chan != -1 {
		pr.kv("chan", int64(t.Chan))
	}
	if len(t.Ops) == 0 {
		pr.str(" {}\n")
		return
	}
	pr.str(" {\n")
	for i := range t.Ops {
		pr.str("    ")
		op := &t.Ops[i]
		if !op.Code.Valid() {
			pr.invalid("undefined opcode %d", uint8(op.Code))
			pr.generic(op)
		} else {
			opPrinters[op.Code](pr, op)
		}
		pr.w.WriteByte('\n')
	}
	pr.str("  }\n")
}

// opPrinters holds one print function per opcode. The productions in their
// comments are the canonical forms; every op is parsed by the one generic
// production
//
//	Op       = Ident Operands? ("->" Ref ("," Ref)*)? OpAttr* .
//	Operands = Operand ("," Operand)* .
//	Operand  = Ref | "@" Int .
//
// so a printer that meets a field its canonical form lacks (chans on a
// copy, a dst on a send) prints it in the generic form as well.
var opPrinters = [NumOpcodes]func(*printer, *Op){
	OpNop:                (*printer).printNop,
	OpCopy:               (*printer).printCopy,
	OpReduce:             (*printer).printReduce,
	OpSend:               (*printer).printSend,
	OpRecv:               (*printer).printRecv,
	OpRecvCopySend:       (*printer).printRCS,
	OpRecvReduceSend:     (*printer).printRRS,
	OpRecvReduceCopy:     (*printer).printRRC,
	OpRecvReduceCopySend: (*printer).printRRCS,
	OpSignal:             (*printer).printSignal,
	OpWait:               (*printer).printWait,
	OpFlush:              (*printer).printFlush,
	OpBarrier:            (*printer).printBarrier,
}

// printNop writes
//
//	Nop = "nop" OpAttr* .
func (pr *printer) printNop(op *Op) { pr.generic(op) }

// printCopy writes
//
//	Copy = "copy" Ref "->" Ref ("," Ref)* OpAttr* .
func (pr *printer) printCopy(op *Op) { pr.generic(op) }

// printReduce writes
//
//	Reduce = "reduce" Ref "," Ref ("," Ref)* "->" Ref ("," Ref)* OpAttr* .
func (pr *printer) printReduce(op *Op) { pr.generic(op) }

// printSend writes
//
//	Send = "send" Ref OpAttr* .
func (pr *printer) printSend(op *Op) { pr.generic(op) }

// printRecv writes
//
//	Recv = "recv" "->" Ref OpAttr* .
func (pr *printer) printRecv(op *Op) { pr.generic(op) }

// printRCS writes
//
//	RCS = "rcs" "->" Ref OpAttr* .
func (pr *printer) printRCS(op *Op) { pr.generic(op) }

// printRRS writes
//
//	RRS = "rrs" Ref OpAttr* .
func (pr *printer) printRRS(op *Op) { pr.generic(op) }

// printRRC writes
//
//	RRC = "rrc" Ref "->" Ref OpAttr* .
func (pr *printer) printRRC(op *Op) { pr.generic(op) }

// printRRCS writes
//
//	RRCS = "rrcs" Ref "->" Ref OpAttr* .
func (pr *printer) printRRCS(op *Op) { pr.generic(op) }

// printSignal writes
//
//	Signal = "signal" Chan ("," Chan)* OpAttr* .
//	Chan   = "@" Int .
func (pr *printer) printSignal(op *Op) { pr.generic(op) }

// printWait writes
//
//	Wait = "wait" Chan ("," Chan)* OpAttr* .
func (pr *printer) printWait(op *Op) { pr.generic(op) }

// printFlush writes
//
//	Flush = "flush" Chan ("," Chan)* OpAttr* .
func (pr *printer) printFlush(op *Op) { pr.generic(op) }

// printBarrier writes
//
//	Barrier = "barrier" "id" "=" Int "tbs" "=" Int OpAttr* .
func (pr *printer) printBarrier(op *Op) {
	pr.str("barrier")
	pr.operands(op)
	pr.kv("id", int64(op.Barrier))
	pr.kv("tbs", int64(op.BarrierTBs))
	pr.tail(op, false)
}

// generic writes the generic production:
//
//	Op = Ident Operands? ("->" Ref ("," Ref)*)? OpAttr* .
func (pr *printer) generic(op *Op) {
	pr.str(op.Code.String())
	pr.operands(op)
	pr.tail(op, true)
}

// operands writes srcs, then chans, then "->" and dsts:
//
//	Operands? ("->" Ref ("," Ref)*)?
func (pr *printer) operands(op *Op) {
	sep := " "
	for i := range op.Srcs {
		pr.str(sep)
		pr.ref(&op.Srcs[i], op.Count)
		sep = ", "
	}
	for _, c := range op.Chans {
		pr.str(sep)
		pr.w.WriteByte('@')
		pr.int(int64(c))
		sep = ", "
	}
	if len(op.Dsts) > 0 {
		pr.str(" ->")
		sep = " "
		for i := range op.Dsts {
			pr.str(sep)
			pr.ref(&op.Dsts[i], op.Count)
			sep = ", "
		}
	}
}

// ref writes
//
//	Ref   = ("@" Int ":")? Buf "[" Int ("+" Int)? "]" ("/" "pkt")? .
//	Buf   = "i" | "o" | "s" .
//
// The count is omitted when it is 1.
func (pr *printer) ref(r *Ref, count int64) {
	if r.Chan != -1 {
		pr.w.WriteByte('@')
		pr.int(int64(r.Chan))
		pr.w.WriteByte(':')
	}
	if r.Buf >= NumBufKinds {
		pr.invalid("undefined buffer %d", uint8(r.Buf))
	}
	pr.str(r.Buf.String())
	pr.w.WriteByte('[')
	pr.int(r.Off)
	if count != 1 {
		pr.w.WriteByte('+')
		pr.int(count)
	}
	pr.w.WriteByte(']')
	if r.Packet {
		pr.str("/pkt")
	}
}

// tail writes the op attributes that are set:
//
//	OpAttr = "count" "=" Int | "id" "=" Int | "tbs" "=" Int
//	       | "deps" "=" Dep ("," Dep)* | "publish" .
//	Dep    = "(" Int "," Int ")" .
//
// count is written only when the op has no refs to carry it; id and tbs
// only for non-barrier ops (barrier writes them itself) that set them.
func (pr *printer) tail(op *Op, barrierFields bool) {
	if len(op.Srcs) == 0 && len(op.Dsts) == 0 && op.Count != 0 {
		pr.kv("count", op.Count)
	}
	if barrierFields {
		if op.Barrier != 0 {
			pr.kv("id", int64(op.Barrier))
		}
		if op.BarrierTBs != 0 {
			pr.kv("tbs", int64(op.BarrierTBs))
		}
	}
	if len(op.Deps) > 0 {
		pr.str(" deps=")
		for i, d := range op.Deps {
			if i > 0 {
				pr.w.WriteByte(',')
			}
			pr.w.WriteByte('(')
			pr.int(int64(d.TB))
			pr.w.WriteByte(',')
			pr.int(int64(d.Step))
			pr.w.WriteByte(')')
		}
	}
	if op.Publish {
		pr.str(" publish")
	}
}
