package msccl

import "math"

// Size limits. An input over one of them fails with TS0011 (diag.TooLarge)
// as soon as the limit is crossed, so that a hostile file costs memory in
// proportion to what was read, never to a number it claims (ngpus="65536"
// allocates nothing until 65536 <gpu> elements have been read).
const (
	// MaxInputBytes bounds the size of an XML file in bytes (256 MiB).
	MaxInputBytes = 256 << 20
	// MaxSteps bounds the <step> elements of all threadblocks together.
	MaxSteps = 1 << 24
	// MaxThreadblocks bounds the <tb> elements of all gpus together.
	MaxThreadblocks = 1 << 20
	// MaxIndex is the largest id, peer, channel, step or dependency index
	// accepted; larger values are TS0003.
	MaxIndex = math.MaxInt32
)

// mscclMaxReduceFusion is MSCCL_MAX_REDUCE_FUSION (msccl_struct.h): the
// executor stops fusing re steps when a threadblock's running count of
// reductions reaches it.
const mscclMaxReduceFusion = 16

// inputLimit is MaxInputBytes; tests lower it.
var inputLimit = MaxInputBytes
