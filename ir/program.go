// Package ir is the typed intermediate representation of Theseus schedules:
// a Program names its collective and holds, per rank, buffer sizes in chunks,
// channels and threadblocks, and each threadblock holds an ordered op list.
//
// The IR has two op levels (see Opcode) and one textual form (Print, Parse).
// Its semantics — chunk geometry, in-place aliasing, slices, semaphores,
// dependencies, packets — are specified in docs/design/ir.md; Layout
// implements the chunk geometry that every executor and the verifier share.
//
// ir imports nothing of the project's own packages.
package ir

// Pos is a 1-based source position (line, column) in the file the program
// came from. The zero Pos means "unknown".
type Pos struct {
	Line int32
	Col  int32
}

// IsValid reports whether the position is known.
func (p Pos) IsValid() bool { return p.Line > 0 }

// Program is one schedule for one collective on NRanks ranks.
type Program struct {
	Name       string
	Collective Collective
	NRanks     int // world size the program is written for; 1..MaxRanks
	// NLocalRanks is the ranks-per-node the program requires; 0 means any.
	NLocalRanks int
	// Root is the root the program is written for, for rooted collectives
	// (broadcast, reduce, gather, scatter); -1 otherwise. A request with root
	// r runs the program with logical rank (p - r + Root) mod NRanks on
	// physical rank p, rotating per-rank blocks the same way (ir.md, "Roots").
	Root     int
	Protocol Protocol
	// ChunksPerBlock is how many chunks one count-element block is cut into
	// (MSCCL's nchunksperloop divided by the blocks of the larger buffer).
	ChunksPerBlock int64
	// InPlace and OutOfPlace say which buffer arrangements the program
	// supports (NCCL in-place semantics, ir.md "In place").
	InPlace    bool
	OutOfPlace bool
	// MinBytes and MaxBytes bound the message size (bytes of the larger of
	// the input and output buffers) for which the program may be selected.
	// MaxBytes 0 means unlimited.
	MinBytes int64
	MaxBytes int64
	// NumThreads is the threads per threadblock the program asks for
	// (0: the executor's default).
	NumThreads int
	// SliceBytes caps the bytes of one chunk processed per pipeline slice
	// (Simple protocol only; 0: the runtime's default; Unsliced: never
	// sliced). ir.md "Slices".
	SliceBytes int64
	Ranks      []Rank

	File string // source file name, for diagnostics
	Pos  Pos
	// Meta carries free-form provenance (source format, importer notes). It
	// is printed and kept by round trips but has no semantics.
	Meta map[string]string
}

// Unsliced as Program.SliceBytes marks a program that must never be
// replayed over slices (e.g. an imported MSCCL++ plan, whose runtime never
// replays it: its scratch reuse is only safe within one launch).
const Unsliced = 1 << 62

// MaxRanks bounds NRanks (and so every rank and peer index).
const MaxRanks = 1 << 16

// Rank is one rank's part of a program.
type Rank struct {
	// Chunks holds the declared sizes, in chunks, of the input, output and
	// scratch buffers. Input and output sizes follow from the collective
	// (Layout); a declared size there is checked against it, and 0 means
	// "as the collective defines". Scratch is sized only by this field.
	Chunks   [NumBufKinds]int64
	Channels []Channel
	TBs      []Threadblock
	Pos      Pos
}

// Channel is one end of a primitive channel between this rank and Peer. The
// other end is Ranks[Peer].Channels[PeerChannel]. Each end owns one inbound
// semaphore: a signal on this end increments the other end's inbound
// semaphore; a wait on this end waits on this end's inbound semaphore.
type Channel struct {
	Peer        int
	PeerChannel int
	Type        ChannelType
	// Init is the initial value of this end's inbound semaphore, e.g. the
	// credits of a FIFO with Init slots. Waits balance against Init plus the
	// peer's signals.
	Init int64
	Pos  Pos
}

// Threadblock runs its ops in order. At the transfer level it also names
// its peers and channel: sends go to SendPeer and receives come from
// RecvPeer on channel Chan (-1 for none).
type Threadblock struct {
	SendPeer int
	RecvPeer int
	Chan     int
	Ops      []Op
	Pos      Pos
}

// Ref addresses Count consecutive chunks of a buffer, starting at chunk Off
// (64-bit). With Chan = -1 the buffer is this rank's; otherwise it is the
// buffer of the peer at the other end of channel Chan of this rank. Packet
// refs use the LL packet layout (scratch only).
type Ref struct {
	Buf    BufKind
	Off    int64
	Chan   int
	Packet bool
}

// Local reports whether the ref names this rank's own buffer.
func (r Ref) Local() bool { return r.Chan < 0 }

// Dep makes an op wait until threadblock TB of the same rank has completed
// its op at index Step (in the same slice). The target op must publish.
type Dep struct {
	TB   int
	Step int
}

// Op is one operation. Which fields matter is given by Code.Info().
type Op struct {
	Code  Opcode
	Srcs  []Ref
	Dsts  []Ref
	Count int64 // chunks, for data ops; >= 1
	// Chans are this rank's channel indices that signal, wait and flush act on.
	Chans []int
	// Barrier is the barrier id and BarrierTBs the number of threadblocks of
	// this rank that take part, for OpBarrier.
	Barrier    int
	BarrierTBs int
	Deps       []Dep
	// Publish makes the op announce its completion to other threadblocks of
	// this rank (MSCCL's hasdep).
	Publish bool
	Pos     Pos
}

// Level reports the highest op level the program uses: LevelTransfer if any
// threadblock holds a transfer op, else LevelPrimitive.
func (p *Program) Level() Level {
	for r := range p.Ranks {
		for t := range p.Ranks[r].TBs {
			for _, op := range p.Ranks[r].TBs[t].Ops {
				if op.Code.IsTransfer() {
					return LevelTransfer
				}
			}
		}
	}
	return LevelPrimitive
}

// NumOps counts the ops of all ranks.
func (p *Program) NumOps() int {
	n := 0
	for r := range p.Ranks {
		for t := range p.Ranks[r].TBs {
			n += len(p.Ranks[r].TBs[t].Ops)
		}
	}
	return n
}

// Clone returns a deep copy of p.
func (p *Program) Clone() *Program {
	q := *p
	if p.Meta != nil {
		q.Meta = make(map[string]string, len(p.Meta))
		for k, v := range p.Meta {
			q.Meta[k] = v
		}
	}
	q.Ranks = make([]Rank, len(p.Ranks))
	for r := range p.Ranks {
		src := &p.Ranks[r]
		dst := &q.Ranks[r]
		*dst = *src
		dst.Channels = append([]Channel(nil), src.Channels...)
		dst.TBs = make([]Threadblock, len(src.TBs))
		for t := range src.TBs {
			dst.TBs[t] = src.TBs[t]
			ops := make([]Op, len(src.TBs[t].Ops))
			for i, op := range src.TBs[t].Ops {
				ops[i] = op.Clone()
			}
			dst.TBs[t].Ops = ops
		}
	}
	return &q
}

// Clone returns a deep copy of op.
func (op Op) Clone() Op {
	c := op
	c.Srcs = append([]Ref(nil), op.Srcs...)
	c.Dsts = append([]Ref(nil), op.Dsts...)
	c.Chans = append([]int(nil), op.Chans...)
	c.Deps = append([]Dep(nil), op.Deps...)
	if len(op.Srcs) == 0 {
		c.Srcs = nil
	}
	if len(op.Dsts) == 0 {
		c.Dsts = nil
	}
	if len(op.Chans) == 0 {
		c.Chans = nil
	}
	if len(op.Deps) == 0 {
		c.Deps = nil
	}
	return c
}
