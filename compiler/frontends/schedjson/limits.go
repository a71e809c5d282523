package schedjson

import (
	"fmt"
	"math"

	"github.com/theseus-ccl/theseus/ir"
)

// Version is the format version that Parse reads and Format writes.
const Version = 1

// Size limits. An input over one of them fails with TS0011 (diag.TooLarge)
// as soon as the limit is crossed, so that an absurd file costs memory in
// proportion to what was read, never to a number it claims.
const (
	// MaxInputBytes bounds the size of a schedule file in bytes (256 MiB).
	MaxInputBytes = 256 << 20
	// MaxOps bounds the ops of all threadblocks of all ranks together.
	MaxOps = 1 << 24
	// MaxChannels bounds the channel ends of all ranks together.
	MaxChannels = 1 << 20
	// MaxThreadblocks bounds the threadblocks of all ranks together.
	MaxThreadblocks = 1 << 20
	// MaxListLen bounds one op's srcs, dsts, chans and deps lists, and the
	// entries of meta.
	MaxListLen = 1 << 16
)

// Value domains of the format. Parse rejects a value outside its domain
// with TS0003 (nranks over ir.MaxRanks with TS0011); Format refuses to
// write a program holding one, so that everything Format writes parses.
// Whether a value in its domain makes sense for the program (a peer below
// nranks, an offset inside its buffer) is the verifier's question.
const (
	// MaxIndex is the largest rank, channel, threadblock, step or barrier
	// index the format holds. Index fields range over [-1, MaxIndex]; -1
	// means "none" where the IR gives it that meaning.
	MaxIndex = math.MaxInt32
	minIndex = -1
)

// domain is an inclusive integer range.
type domain struct{ lo, hi int64 }

var (
	domIndex   = domain{minIndex, MaxIndex}
	domSize    = domain{0, math.MaxInt64} // chunks, offsets, counts, bytes, semaphore init
	domPos     = domain{1, math.MaxInt64} // chunks_per_block
	domNRanks  = domain{1, ir.MaxRanks}
	domLocal   = domain{0, ir.MaxRanks} // nlocalranks
	domThreads = domain{0, MaxIndex}
)

func (d domain) has(v int64) bool { return v >= d.lo && v <= d.hi }

func (d domain) String() string { return fmt.Sprintf("[%d, %d]", d.lo, d.hi) }
