package ir

import (
	"fmt"
	"strings"
)

// This file holds every enum of the IR. Each enum's printed name is the
// keyword used by the textual IR and by Theseus schedule JSON. Numeric values
// are internal; the NCCL numeric values live in ncclabi's own mapping table.
// (The DataType and RedOp orders happen to follow NCCL 2.25, which keeps the
// mapping table trivial, but nothing outside ncclabi may rely on that.)

// Collective names the collective a program computes.
type Collective uint8

const (
	AllReduce     Collective = iota // allreduce
	AllGather                       // allgather
	ReduceScatter                   // reducescatter
	Broadcast                       // broadcast
	Reduce                          // reduce
	AllToAll                        // alltoall
	Gather                          // gather
	Scatter                         // scatter
	SendRecv                        // sendrecv
	Custom                          // custom
	NumCollectives
)

var collectiveNames = [...]string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv", "custom"}

func (c Collective) String() string {
	if int(c) < len(collectiveNames) {
		return collectiveNames[c]
	}
	return fmt.Sprintf("collective(%d)", uint8(c))
}

// ParseCollective accepts the canonical names and the aliases found in
// foreign formats (reduce_scatter, all_reduce, all_gather, all_to_all).
func ParseCollective(s string) (Collective, error) {
	k := strings.ToLower(strings.ReplaceAll(s, "_", ""))
	for i, n := range collectiveNames {
		if n == k {
			return Collective(i), nil
		}
	}
	return 0, fmt.Errorf("unknown collective %q (want one of %s)", s, strings.Join(collectiveNames[:], ", "))
}

// Rooted reports whether the collective has a root rank (NCCL semantics:
// broadcast, reduce, gather and scatter).
func (c Collective) Rooted() bool {
	return c == Broadcast || c == Reduce || c == Gather || c == Scatter
}

// Reduces reports whether the collective combines values with a RedOp.
func (c Collective) Reduces() bool {
	return c == AllReduce || c == ReduceScatter || c == Reduce
}

// DataType is an element type. Sizes are in bytes.
type DataType uint8

const (
	Int8     DataType = iota // int8
	Uint8                    // uint8
	Int32                    // int32
	Uint32                   // uint32
	Int64                    // int64
	Uint64                   // uint64
	Float16                  // float16
	Float32                  // float32
	Float64                  // float64
	Bfloat16                 // bfloat16
	Fp8E4M3                  // fp8e4m3
	Fp8E5M2                  // fp8e5m2
	NumDataTypes
)

var dataTypeNames = [...]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64", "bfloat16", "fp8e4m3", "fp8e5m2"}
var dataTypeSizes = [...]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

// dataTypeAliases maps the other spellings users type (NCCL, PyTorch,
// nccl-tests) to the canonical name.
var dataTypeAliases = map[string]DataType{
	"char": Int8, "int": Int32, "half": Float16, "fp16": Float16, "float": Float32, "fp32": Float32,
	"double": Float64, "fp64": Float64, "bf16": Bfloat16, "e4m3": Fp8E4M3, "e5m2": Fp8E5M2,
	"f8e4m3": Fp8E4M3, "f8e5m2": Fp8E5M2, "float8e4m3": Fp8E4M3, "float8e5m2": Fp8E5M2,
}

func (d DataType) String() string {
	if int(d) < len(dataTypeNames) {
		return dataTypeNames[d]
	}
	return fmt.Sprintf("datatype(%d)", uint8(d))
}

// Size is the element size in bytes (1, 2, 4 or 8); 0 for an invalid type.
func (d DataType) Size() int {
	if int(d) < len(dataTypeSizes) {
		return dataTypeSizes[d]
	}
	return 0
}

// IsFloat reports whether the type is a floating-point type.
func (d DataType) IsFloat() bool {
	switch d {
	case Float16, Float32, Float64, Bfloat16, Fp8E4M3, Fp8E5M2:
		return true
	}
	return false
}

// ParseDataType accepts canonical names and common aliases.
func ParseDataType(s string) (DataType, error) {
	k := strings.ToLower(s)
	for i, n := range dataTypeNames {
		if n == k {
			return DataType(i), nil
		}
	}
	if d, ok := dataTypeAliases[k]; ok {
		return d, nil
	}
	return 0, fmt.Errorf("unknown datatype %q (want one of %s)", s, strings.Join(dataTypeNames[:], ", "))
}

// AllDataTypes lists every data type in enum order.
func AllDataTypes() []DataType {
	out := make([]DataType, NumDataTypes)
	for i := range out {
		out[i] = DataType(i)
	}
	return out
}

// RedOp is a reduction operator. Avg follows NCCL 2.25 semantics: the sum
// divided by nranks (see docs/design/ir.md, "Avg").
type RedOp uint8

const (
	Sum  RedOp = iota // sum
	Prod              // prod
	Max               // max
	Min               // min
	Avg               // avg
	NumRedOps
)

var redOpNames = [...]string{"sum", "prod", "max", "min", "avg"}

func (r RedOp) String() string {
	if int(r) < len(redOpNames) {
		return redOpNames[r]
	}
	return fmt.Sprintf("redop(%d)", uint8(r))
}

// ParseRedOp accepts sum, prod, max, min and avg (any case).
func ParseRedOp(s string) (RedOp, error) {
	k := strings.ToLower(s)
	for i, n := range redOpNames {
		if n == k {
			return RedOp(i), nil
		}
	}
	return 0, fmt.Errorf("unknown redop %q (want one of %s)", s, strings.Join(redOpNames[:], ", "))
}

// AllRedOps lists every reduction operator in enum order.
func AllRedOps() []RedOp {
	return []RedOp{Sum, Prod, Max, Min, Avg}
}

// Protocol is the wire protocol of a program. LL128 in foreign files is mapped
// to Simple by the importers, with a warning.
type Protocol uint8

const (
	Simple Protocol = iota // simple
	LL                     // ll
	NumProtocols
)

var protocolNames = [...]string{"simple", "ll"}

func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

// ParseProtocol accepts simple and ll (any case).
func ParseProtocol(s string) (Protocol, error) {
	k := strings.ToLower(s)
	for i, n := range protocolNames {
		if n == k {
			return Protocol(i), nil
		}
	}
	return 0, fmt.Errorf("unknown protocol %q (want simple or ll)", s)
}

// PacketType is the LL packet format, a runtime choice (THESEUS_LL_PROTOCOL).
// LL16 packets are 16 bytes with 8 data bytes; LL8 packets are 8 bytes with 4
// data bytes. Both double the bytes a payload occupies in scratch.
type PacketType uint8

const (
	LL16 PacketType = iota // LL16
	LL8                    // LL8
)

func (p PacketType) String() string {
	if p == LL8 {
		return "LL8"
	}
	if p == LL16 {
		return "LL16"
	}
	return fmt.Sprintf("packettype(%d)", uint8(p))
}

// ParsePacketType accepts LL16 and LL8 (any case).
func ParsePacketType(s string) (PacketType, error) {
	switch strings.ToUpper(s) {
	case "LL16":
		return LL16, nil
	case "LL8":
		return LL8, nil
	}
	return 0, fmt.Errorf("unknown packet type %q (want LL8 or LL16)", s)
}

// BufKind names one of a rank's three buffers.
type BufKind uint8

const (
	Input   BufKind = iota // i
	Output                 // o
	Scratch                // s
	NumBufKinds
)

var bufKindNames = [...]string{"i", "o", "s"}
var bufKindLong = [...]string{"input", "output", "scratch"}

func (b BufKind) String() string {
	if int(b) < len(bufKindNames) {
		return bufKindNames[b]
	}
	return fmt.Sprintf("buf(%d)", uint8(b))
}

// LongName is "input", "output" or "scratch".
func (b BufKind) LongName() string {
	if int(b) < len(bufKindLong) {
		return bufKindLong[b]
	}
	return b.String()
}

// ParseBufKind accepts i/o/s and input/output/scratch.
func ParseBufKind(s string) (BufKind, error) {
	k := strings.ToLower(s)
	for i := range bufKindNames {
		if k == bufKindNames[i] || k == bufKindLong[i] {
			return BufKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown buffer %q (want i, o or s)", s)
}

// ChannelType is the transport of a primitive channel. Memory channels are
// load/store over peer-mapped memory (CUDA IPC, or shared memory on the host
// backend); port channels are driven by a proxy (cross-node, planned; on one
// node they run like memory channels).
type ChannelType uint8

const (
	MemoryChannel ChannelType = iota // memory
	PortChannel                      // port
	NumChannelTypes
)

func (c ChannelType) String() string {
	switch c {
	case MemoryChannel:
		return "memory"
	case PortChannel:
		return "port"
	}
	return fmt.Sprintf("channeltype(%d)", uint8(c))
}

// ParseChannelType accepts memory (alias sm) and port (alias proxy).
func ParseChannelType(s string) (ChannelType, error) {
	switch strings.ToLower(s) {
	case "memory", "sm":
		return MemoryChannel, nil
	case "port", "proxy":
		return PortChannel, nil
	}
	return 0, fmt.Errorf("unknown channel type %q (want memory or port)", s)
}
