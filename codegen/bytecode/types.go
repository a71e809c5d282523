// Package bytecode is the compact, verifiable form of Theseus policy
// expressions (docs/policy-language.md): what compiler/frontends/policy
// emits, what bundles carry, and what the selector's VM
// (runtime/selector/vm) runs.
//
// A Program is a set of parallel slices — opcodes, one int32 operand per
// instruction and one source span per instruction — plus typed constant
// pools (ints, floats, vectors; never []any) and an import table naming the
// attributes the expression reads. Opcodes are declared in one file
// (opcodes.go) with their stack effects, which Verify reads; Disassemble
// prints the listing used by golden tests and `theseusc dump`. The scalar
// semantics shared by the compiler's constant folder and the VM (integer
// wrap-around, division by zero, float-to-int conversion, vector reductions)
// live in semantics.go so the two cannot disagree.
package bytecode

import "fmt"

// Type is the static type of a policy value.
type Type uint8

const (
	Invalid Type = iota // invalid
	Int                 // int: 64-bit two's complement
	Float               // float: IEEE-754 binary64
	Bool                // bool
	Vector              // vector: up to THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH float64 elements
	NumTypes
)

var typeNames = [...]string{"invalid", "int", "float", "bool", "vector"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Numeric reports whether t is int or float.
func (t Type) Numeric() bool { return t == Int || t == Float }

// Scalar reports whether t is int, float or bool.
func (t Type) Scalar() bool { return t == Int || t == Float || t == Bool }

// ParseType accepts the manifest spellings int, float, bool and vector.
func ParseType(s string) (Type, error) {
	for i := Int; i < NumTypes; i++ {
		if typeNames[i] == s {
			return i, nil
		}
	}
	return Invalid, fmt.Errorf("unknown type %q (want int, float, bool or vector)", s)
}

// Origin says where an attribute's value comes from (seed README, "Theseus
// Core APIs"): endogenous attributes are fields of the collective request;
// exogenous ones are published in the selection context.
type Origin uint8

const (
	Exo  Origin = iota // exo
	Endo               // endo
)

func (o Origin) String() string {
	switch o {
	case Exo:
		return "exo"
	case Endo:
		return "endo"
	}
	return fmt.Sprintf("origin(%d)", uint8(o))
}

// ParseOrigin accepts endo and exo.
func ParseOrigin(s string) (Origin, error) {
	switch s {
	case "exo":
		return Exo, nil
	case "endo":
		return Endo, nil
	}
	return 0, fmt.Errorf("unknown origin %q (want endo or exo)", s)
}

// ReqField is one of the twelve endogenous attribute paths of the seed
// README ("Endogenous attribute paths"), in the seed's order. Its value is
// the index into the request vector the VM reads (REQ operand). Every value
// is an int; enum-valued fields carry the ir enum's integer value
// (ir.Collective, ir.DataType, ir.RedOp, ir.PacketType).
type ReqField uint8

const (
	ReqColl         ReqField = iota // request.coll: ir.Collective (allreduce 0 ... sendrecv 8)
	ReqSendBuf                      // request.sendbuf: send buffer address (rank-local)
	ReqRecvBuf                      // request.recvbuf: receive buffer address (rank-local)
	ReqCount                        // request.count: the NCCL count argument, in elements
	ReqDataType                     // request.datatype: ir.DataType (int8 0 ... fp8e5m2 11)
	ReqDataTypeSize                 // request.datatypesize: element size in bytes
	ReqRedOp                        // request.redop: ir.RedOp (sum 0 ... avg 4)
	ReqPacketType                   // request.packettype: ir.PacketType (LL16 0, LL8 1)
	ReqRoot                         // request.root: root rank, -1 for non-rooted collectives
	ReqNLocalRanks                  // request.nlocalranks: ranks per node
	ReqNRanks                       // request.nranks: world size
	ReqMessageSize                  // request.messagesize: bytes of the larger buffer (ir.MessageBytes)
	NumReqFields
)

var reqPaths = [...]string{
	"request.coll", "request.sendbuf", "request.recvbuf", "request.count", "request.datatype",
	"request.datatypesize", "request.redop", "request.packettype", "request.root",
	"request.nlocalranks", "request.nranks", "request.messagesize",
}

// Path is the manifest spelling, e.g. "request.messagesize".
func (f ReqField) Path() string {
	if int(f) < len(reqPaths) {
		return reqPaths[f]
	}
	return fmt.Sprintf("request.field(%d)", uint8(f))
}

func (f ReqField) String() string { return f.Path() }

// RankLocal reports whether the field's value differs between ranks by
// nature (buffer addresses). Policies reading one cost an agreement step
// per request (ARCHITECTURE.md §5).
func (f ReqField) RankLocal() bool { return f == ReqSendBuf || f == ReqRecvBuf }

// ParseReqField accepts exactly the twelve paths of the seed README; any
// other path is an error.
func ParseReqField(path string) (ReqField, error) {
	for i, p := range reqPaths {
		if p == path {
			return ReqField(i), nil
		}
	}
	return 0, fmt.Errorf("unsupported endogenous path %q (want one of request.coll, request.sendbuf, request.recvbuf, request.count, request.datatype, request.datatypesize, request.redop, request.packettype, request.root, request.nlocalranks, request.nranks, request.messagesize)", path)
}
