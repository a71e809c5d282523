package abi

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// DataType is ncclDataType_t (NCCL 2.25.1 values: Int8 0 … Float8e5m2 11).
type DataType int32

// NumDataTypes is ncclNumTypes.
const NumDataTypes DataType = 12

var dataTypeNames = [...]string{"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
	"ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"}

// ncclToIRType is the mapping table from NCCL's numbering to the IR's
// (ir/enums.go keeps its own numbering; the orders happen to agree).
var ncclToIRType = [...]ir.DataType{ir.Int8, ir.Uint8, ir.Int32, ir.Uint32, ir.Int64, ir.Uint64,
	ir.Float16, ir.Float32, ir.Float64, ir.Bfloat16, ir.Fp8E4M3, ir.Fp8E5M2}

// Valid reports whether d is one of the 12 NCCL 2.25 types.
func (d DataType) Valid() bool { return d >= 0 && d < NumDataTypes }

// IR returns the IR data type of a valid d.
func (d DataType) IR() ir.DataType { return ncclToIRType[d] }

// Size is the element size in bytes (0 for an invalid type).
func (d DataType) Size() int {
	if !d.Valid() {
		return 0
	}
	return d.IR().Size()
}

func (d DataType) String() string {
	if d.Valid() {
		return dataTypeNames[d]
	}
	return fmt.Sprintf("ncclDataType(%d)", int32(d))
}

// RedOp is ncclRedOp_t: Sum 0, Prod 1, Max 2, Min 3, Avg 4; values >= 5
// (NumRedOps) are ops made by ncclRedOpCreatePreMulSum.
type RedOp int32

// NumRedOps is ncclNumOps, also the least id of a user-defined op.
const NumRedOps RedOp = 5

var redOpNames = [...]string{"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"}
var ncclToIROp = [...]ir.RedOp{ir.Sum, ir.Prod, ir.Max, ir.Min, ir.Avg}

// Builtin reports whether r is one of the five built-in ops.
func (r RedOp) Builtin() bool { return r >= 0 && r < NumRedOps }

// IR returns the IR op of a built-in r.
func (r RedOp) IR() ir.RedOp { return ncclToIROp[r] }

func (r RedOp) String() string {
	if r.Builtin() {
		return redOpNames[r]
	}
	return fmt.Sprintf("ncclRedOp(%d)", int32(r))
}

// Coll names the NCCL call a request came from.
type Coll uint8

// The calls that carry data.
const (
	CollAllReduce Coll = iota
	CollAllGather
	CollReduceScatter
	CollBroadcast
	CollReduce
	CollAlltoAll
	CollGather
	CollScatter
	CollSend
	CollRecv
	CollAlltoAllv
	numColls
)

var collNames = [...]string{"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AlltoAll",
	"Gather", "Scatter", "Send", "Recv", "AlltoAllv"}

var collAPIs = [...]string{"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce",
	"ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend", "ncclRecv", "ncclAlltoAllv"}

// api is the NCCL function's name ("ncclAllReduce").
func (c Coll) api() string {
	if c < numColls {
		return collAPIs[c]
	}
	return "nccl" + c.String()
}

func (c Coll) String() string {
	if c < numColls {
		return collNames[c]
	}
	return fmt.Sprintf("coll(%d)", uint8(c))
}

// IR returns the IR collective of a collective call; ok is false for Send,
// Recv and AlltoAllv, which the point-to-point engine serves (no
// schedule).
func (c Coll) IR() (ir.Collective, bool) {
	switch c {
	case CollAllReduce:
		return ir.AllReduce, true
	case CollAllGather:
		return ir.AllGather, true
	case CollReduceScatter:
		return ir.ReduceScatter, true
	case CollBroadcast:
		return ir.Broadcast, true
	case CollReduce:
		return ir.Reduce, true
	case CollAlltoAll:
		return ir.AllToAll, true
	case CollGather:
		return ir.Gather, true
	case CollScatter:
		return ir.Scatter, true
	}
	return 0, false
}

// Reduces reports whether the call takes a reduction op.
func (c Coll) Reduces() bool {
	return c == CollAllReduce || c == CollReduceScatter || c == CollReduce
}

// Rooted reports whether Op.Root is a root rank; P2P whether it is a peer.
func (c Coll) Rooted() bool {
	return c == CollBroadcast || c == CollReduce || c == CollGather || c == CollScatter
}

// P2P reports whether the call is ncclSend or ncclRecv.
func (c Coll) P2P() bool { return c == CollSend || c == CollRecv }

// Op is one data-carrying call with its NCCL arguments.
type Op struct {
	Coll Coll
	// Send and Recv are the buffer addresses (device pointers on cuda, host
	// addresses on the host backend). Send is unused by Recv, Recv by Send.
	Send, Recv uintptr
	// Count is the NCCL count argument in elements: per rank block
	// (AllGather sendcount, ReduceScatter recvcount, AlltoAll/Gather/Scatter
	// per-peer count); unused by AlltoAllv.
	Count    uint64
	DataType DataType
	RedOp    RedOp
	// Root is the root rank of rooted calls, the peer of Send and Recv, and
	// -1 otherwise.
	Root   int
	Stream uintptr
	// Counts is AlltoAllv's nranks x nranks matrix (elements, row = sender),
	// copied from cntMatrixCpu; CountsGPU is the device copy's address.
	Counts    []uint64
	CountsGPU uintptr

	// Replay is filled by Library.Coll when the engine armed its replay
	// record for this call (Replayer): the record's address, which the C
	// side uses for the repeats of the call (ReplayKey); 0 otherwise.
	Replay uintptr

	// Served is filled by the engine or the fallback: what ran the op, for
	// the INFO COLL log line (formatted only when that line is logged).
	Served Served
	// NoNative is why no Theseus schedule serves the op (the engine's
	// ErrNoSchedule error, naming the selection context), kept for the
	// error when there is no fallback NCCL either.
	NoNative string
}

// ReplayKey packs op's arguments as ncclabi/abi.c packs a data call's for
// th_replay_call (runtime/replay): the kind (Coll), send and receive
// buffers, count, datatype, reduction operator (0 for calls without one),
// root or peer (-1 for calls without one), and stream. A call's repeats
// are launched from C only when every word is equal.
func (o *Op) ReplayKey() replay.Key {
	return replay.Key{uint64(o.Coll), uint64(o.Send), uint64(o.Recv), o.Count, uint64(int64(o.DataType)),
		uint64(int64(o.RedOp)), uint64(int64(o.Root)), uint64(o.Stream)}
}

// Served says what ran an op: Text when set ("the fallback NCCL"),
// otherwise launch Launch of Theseus schedule Schedule (file Name) when Name
// is set; the zero value says nothing. Kept as fields so that a call whose
// INFO COLL line is not logged formats nothing.
type Served struct {
	Text     string
	Schedule int
	Name     string
	Launch   uint64
}

func (s Served) String() string {
	switch {
	case s.Text != "":
		return s.Text
	case s.Name != "":
		return fmt.Sprintf("Theseus schedule %d (%s) launch %d", s.Schedule, s.Name, s.Launch)
	}
	return ""
}

// API is the NCCL function's name ("ncclAllReduce"), without allocating
// for the known calls.
func (c Coll) API() string { return c.api() }

// InPlace reports whether op's buffers overlap as NCCL's in-place form of
// its collective (nccl.h comments; ir.md §3).
func (op *Op) InPlace(rank int) bool {
	sz := uint64(op.DataType.Size())
	switch op.Coll {
	case CollAllGather:
		return op.Send == op.Recv+uintptr(uint64(rank)*op.Count*sz)
	case CollReduceScatter:
		return op.Recv == op.Send+uintptr(uint64(rank)*op.Count*sz)
	case CollGather:
		return op.Send == op.Recv+uintptr(uint64(op.Root)*op.Count*sz)
	case CollScatter:
		return op.Recv == op.Send+uintptr(uint64(op.Root)*op.Count*sz)
	case CollSend, CollRecv:
		return false
	}
	return op.Send == op.Recv
}

// mulOK multiplies non-negative factors and reports whether the product
// fits in 63 bits.
func mulOK(fs ...uint64) (uint64, bool) {
	p := uint64(1)
	for _, f := range fs {
		hi, lo := bits.Mul64(p, f)
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		p = lo
	}
	return p, true
}

// Check validates op's arguments for a rank of an nranks communicator
// against NCCL 2.25's argument checks: datatype and op in range
// (InvalidArgument), root or peer in range (InvalidArgument), the largest
// buffer's size in bytes fitting in 63 bits (InvalidArgument "count
// overflow"), and non-NULL buffers where the call reads or writes them with
// count > 0 (InvalidArgument). isUserOp reports whether a RedOp >= 5 was made
// by ncclRedOpCreatePreMulSum on this communicator.
func (op *Op) Check(rank, nranks int, isUserOp func(RedOp) bool) *Error {
	name := op.Coll.String()
	if !op.DataType.Valid() {
		return errorf(InvalidArgument, "nccl%s: invalid datatype %d (valid: 0..%d)", name, int32(op.DataType), NumDataTypes-1)
	}
	if op.Coll.Reduces() && !op.RedOp.Builtin() && (op.RedOp < NumRedOps || isUserOp == nil || !isUserOp(op.RedOp)) {
		return errorf(InvalidArgument, "nccl%s: invalid reduction operation %d (built-in ops are 0..4; larger ids must come from ncclRedOpCreatePreMulSum on this communicator)", name, int32(op.RedOp))
	}
	if (op.Coll.Rooted() || op.Coll.P2P()) && (op.Root < 0 || op.Root >= nranks) {
		what := "root"
		if op.Coll.P2P() {
			what = "peer"
		}
		return errorf(InvalidArgument, "nccl%s: %s %d out of range for %d ranks", name, what, op.Root, nranks)
	}
	sz := uint64(op.DataType.Size())
	if op.Coll == CollAlltoAllv {
		return op.checkAlltoAllv(rank, nranks, sz)
	}
	blocks := uint64(1)
	switch op.Coll {
	case CollAllGather, CollReduceScatter, CollAlltoAll, CollGather, CollScatter:
		blocks = uint64(nranks)
	}
	if _, ok := mulOK(op.Count, sz, blocks); !ok {
		return errorf(InvalidArgument, "nccl%s: count overflow: %d elements x %d bytes x %d blocks does not fit in 63 bits", name, op.Count, sz, blocks)
	}
	if op.Count == 0 {
		return nil
	}
	needSend, needRecv := true, true
	switch op.Coll {
	case CollSend:
		needRecv = false
	case CollRecv:
		needSend = false
	case CollBroadcast, CollScatter:
		needSend = rank == op.Root
	case CollReduce, CollGather:
		needRecv = rank == op.Root
	}
	if needSend && op.Send == 0 {
		return errorf(InvalidArgument, "nccl%s: sendbuff is NULL with count %d", name, op.Count)
	}
	if needRecv && op.Recv == 0 {
		return errorf(InvalidArgument, "nccl%s: recvbuff is NULL with count %d", name, op.Count)
	}
	return nil
}

func (op *Op) checkAlltoAllv(rank, nranks int, sz uint64) *Error {
	if len(op.Counts) != nranks*nranks {
		return errorf(InvalidArgument, "ncclAlltoAllv: cntMatrixCpu must hold %d x %d counts (got %d)", nranks, nranks, len(op.Counts))
	}
	var sent, recvd uint64
	for j := 0; j < nranks; j++ {
		s, r := op.Counts[rank*nranks+j], op.Counts[j*nranks+rank]
		if s > math.MaxInt64-sent || r > math.MaxInt64-recvd {
			return errorf(InvalidArgument, "ncclAlltoAllv: count overflow in row or column %d", rank)
		}
		sent += s
		recvd += r
	}
	if _, ok := mulOK(sent, sz); !ok {
		return errorf(InvalidArgument, "ncclAlltoAllv: count overflow: %d elements sent x %d bytes", sent, sz)
	}
	if _, ok := mulOK(recvd, sz); !ok {
		return errorf(InvalidArgument, "ncclAlltoAllv: count overflow: %d elements received x %d bytes", recvd, sz)
	}
	if sent > 0 && op.Send == 0 {
		return errorf(InvalidArgument, "ncclAlltoAllv: sendbuff is NULL with %d elements to send", sent)
	}
	if recvd > 0 && op.Recv == 0 {
		return errorf(InvalidArgument, "ncclAlltoAllv: recvbuff is NULL with %d elements to receive", recvd)
	}
	return nil
}
