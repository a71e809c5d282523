package ir

import "fmt"

// Opcode is an operation of a threadblock's op list. There are two levels,
// lowered progressively (docs/design/ir.md):
//
//   - transfer ops (two-sided): send, recv, rcs, rrs, rrc, rrcs. Their peer is
//     implied by the threadblock (SendPeer, RecvPeer, Chan) and they pair
//     first-in-first-out per (sender, receiver, channel). This is what MSCCL
//     XML expresses.
//   - primitive ops (one-sided): signal, wait, flush, barrier, and the data
//     ops copy and reduce whose refs may name a peer's buffer through a
//     channel and may use the LL packet layout. This is what MSCCL++ plans
//     express; put, get, read-reduce-copy(-send), reduce-send and every packet
//     op are copy or reduce with remote and/or packet refs.
//
// copy, reduce and nop are legal at both levels. The legalize pass turns
// transfer ops into primitives; executors only ever run primitives.
type Opcode uint8

const (
	OpNop Opcode = iota // nop
	// Data ops, both levels. Srcs are read element-wise, combined with the
	// request's RedOp left to right (reduce), and the result is written to
	// every Dst.
	OpCopy   // copy
	OpReduce // reduce
	// Transfer ops.
	OpSend               // send
	OpRecv               // recv
	OpRecvCopySend       // rcs
	OpRecvReduceSend     // rrs
	OpRecvReduceCopy     // rrc
	OpRecvReduceCopySend // rrcs
	// Synchronisation primitives.
	OpSignal  // signal
	OpWait    // wait
	OpFlush   // flush
	OpBarrier // barrier
	NumOpcodes
)

// Level says at which IR level an opcode is legal.
type Level uint8

const (
	LevelBoth      Level = iota // both
	LevelTransfer               // transfer
	LevelPrimitive              // primitive
)

func (l Level) String() string {
	switch l {
	case LevelBoth:
		return "both"
	case LevelTransfer:
		return "transfer"
	case LevelPrimitive:
		return "primitive"
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

// OpInfo describes an opcode once, for the verifier, the legaliser, the
// printers and codegen/optable, so that they cannot disagree.
type OpInfo struct {
	Name  string // mnemonic in the textual IR and schedule JSON
	Level Level
	// MinSrcs/MaxSrcs and MinDsts/MaxDsts bound len(Op.Srcs) and len(Op.Dsts).
	// For transfer ops they count local refs only; the received data is
	// implicit. -1 means no upper bound.
	MinSrcs, MaxSrcs int
	MinDsts, MaxDsts int
	Recvs            bool // transfer op that receives from the threadblock's RecvPeer
	Sends            bool // transfer op that sends to the threadblock's SendPeer
	Data             bool // moves or combines data, so Count must be >= 1
	Chans            bool // uses Op.Chans (signal, wait, flush)
}

var opInfo = [NumOpcodes]OpInfo{
	OpNop:                {Name: "nop", Level: LevelBoth},
	OpCopy:               {Name: "copy", Level: LevelBoth, MinSrcs: 1, MaxSrcs: 1, MinDsts: 1, MaxDsts: -1, Data: true},
	OpReduce:             {Name: "reduce", Level: LevelBoth, MinSrcs: 2, MaxSrcs: -1, MinDsts: 1, MaxDsts: -1, Data: true},
	OpSend:               {Name: "send", Level: LevelTransfer, MinSrcs: 1, MaxSrcs: 1, Sends: true, Data: true},
	OpRecv:               {Name: "recv", Level: LevelTransfer, MinDsts: 1, MaxDsts: 1, Recvs: true, Data: true},
	OpRecvCopySend:       {Name: "rcs", Level: LevelTransfer, MinDsts: 1, MaxDsts: 1, Recvs: true, Sends: true, Data: true},
	OpRecvReduceSend:     {Name: "rrs", Level: LevelTransfer, MinSrcs: 1, MaxSrcs: 1, Recvs: true, Sends: true, Data: true},
	OpRecvReduceCopy:     {Name: "rrc", Level: LevelTransfer, MinSrcs: 1, MaxSrcs: 1, MinDsts: 1, MaxDsts: 1, Recvs: true, Data: true},
	OpRecvReduceCopySend: {Name: "rrcs", Level: LevelTransfer, MinSrcs: 1, MaxSrcs: 1, MinDsts: 1, MaxDsts: 1, Recvs: true, Sends: true, Data: true},
	OpSignal:             {Name: "signal", Level: LevelPrimitive, Chans: true},
	OpWait:               {Name: "wait", Level: LevelPrimitive, Chans: true},
	OpFlush:              {Name: "flush", Level: LevelPrimitive, Chans: true},
	OpBarrier:            {Name: "barrier", Level: LevelPrimitive},
}

// Info returns the opcode's row of the op-info table. An out-of-range
// opcode returns a zero OpInfo whose Name is empty.
func (o Opcode) Info() OpInfo {
	if o < NumOpcodes {
		return opInfo[o]
	}
	return OpInfo{}
}

func (o Opcode) String() string {
	if o < NumOpcodes {
		return opInfo[o].Name
	}
	return fmt.Sprintf("opcode(%d)", uint8(o))
}

// Valid reports whether o is a defined opcode.
func (o Opcode) Valid() bool { return o < NumOpcodes }

// IsTransfer reports whether o is a two-sided transfer op.
func (o Opcode) IsTransfer() bool { return o < NumOpcodes && opInfo[o].Level == LevelTransfer }

// ParseOpcode maps a mnemonic to its opcode.
func ParseOpcode(s string) (Opcode, error) {
	for i := range opInfo {
		if opInfo[i].Name == s {
			return Opcode(i), nil
		}
	}
	return 0, fmt.Errorf("unknown op %q", s)
}
