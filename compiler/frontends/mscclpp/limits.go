package mscclpp

import "github.com/theseus-ccl/theseus/ir"

import "math"

// Size limits. An input over one of them fails with TS0011 (diag.TooLarge),
// so that a hostile file costs memory in proportion to its size, never to a
// number it claims.
const (
	// MaxInputBytes bounds the size of a plan file in bytes (256 MiB).
	MaxInputBytes = 256 << 20
	// MaxDepth bounds the nesting of JSON arrays and objects.
	MaxDepth = 64
	// MaxOps bounds the ops of all threadblocks together (pipeline inner
	// ops included).
	MaxOps = 1 << 24
	// MaxChannels bounds the channel ends of all ranks together (declared,
	// filled and added).
	MaxChannels = 1 << 20
	// MaxIndex is the largest id, peer, channel, chunk index or count
	// accepted for index-like fields; larger values are TS0003.
	MaxIndex = math.MaxInt32
)

// Unsliced is the Program.SliceBytes of an imported plan without a
// pipeline op. The MSCCL++ executor runs every op once per launch on whole
// chunks and never replays a plan over slices, and a plan need not be safe
// to replay (scratch reused without a handshake between replays), so the
// importer asks for one slice: ir.SlicesFor gives ceil(chunk bytes / 2^62)
// = 1 for every chunk the IR allows (a block is at most 2^62 bytes).
const Unsliced = ir.Unsliced

// inputLimit is MaxInputBytes; tests lower it.
var inputLimit = MaxInputBytes
