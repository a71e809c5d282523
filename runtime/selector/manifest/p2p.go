package manifest

import (
	"encoding/json"
	"math"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// P2PEntry is a schedule manifest entry for the point-to-point engine
// (docs/selection-context.md §5.7, docs/p2p.md "Parameters"): a generated
// entry, "gen": "p2p", of collective "sendrecv", whose fields are the
// engine's parameters. Absent fields (0, nil) keep the built-in value.
type P2PEntry struct {
	// ChunkBytes, Slots and Channels are the connections' FIFO geometry
	// (both ends of every pair use the same: runtime/launch.P2PGeometry's
	// limits).
	ChunkBytes int64
	Slots      int
	Channels   int
	// Threads per threadblock (CUDA): a multiple of 32 in [32, 1024].
	Threads int
	// EagerBytes (nil: the built-in value) is the largest transfer sent
	// through the FIFO without waiting for the receiver's post.
	EagerBytes *int64
	// Direct (nil: the built-in value) allows zero-copy writes into
	// receive buffers whose allocation the receiver offered.
	Direct *bool
}

// p2pFields are the fields of a "gen": "p2p" entry.
const p2pFields = "gen, collective, nranks, nlocalranks, chunk_bytes, slots, channels, threads, eager_bytes, direct, usable, preference, replaces, valid_after, name, comment"

// isP2P reports whether fs is a "gen": "p2p" entry.
func isP2P(fs []field) bool {
	for _, f := range fs {
		if f.Key == "gen" {
			var v string
			return json.Unmarshal(f.Raw, &v) == nil && v == "p2p"
		}
	}
	return false
}

// p2pEntry decodes a "gen": "p2p" entry (ParseSchedule): collective
// sendrecv (required), nranks and nlocalranks (optional: absent matches
// every communicator), the engine's parameters, and the common fields.
// Message-size windows, arrangements and files do not apply (a group's
// transfers differ per rank; TS0002).
func (c *lineCtx) p2pEntry(fs []field, line int, opt Options) (Schedule, []diag.Diagnostic) {
	s := Schedule{Replaces: -1, ValidAfter: Always, Usable: "true", Preference: "0", Collective: ir.SendRecv, P2P: &P2PEntry{}}
	p := s.P2P
	haveColl := false
	for _, f := range fs {
		switch f.Key {
		case "gen":
		case "collective":
			haveColl = true
			if v, ok := c.str(f); ok && v != "sendrecv" {
				c.errorf(diag.BadValue, f.ValOff, `write "collective": "sendrecv"`, "a p2p entry serves sendrecv, not %q", v)
			}
		case "chunk_bytes":
			v, ok := c.integer(f, 1<<10, 64<<20)
			if ok && v%256 != 0 {
				c.errorf(diag.BadValue, f.ValOff, "", "chunk_bytes %d: want a multiple of 256", v)
			}
			p.ChunkBytes = v
		case "slots":
			v, _ := c.integer(f, 1, 64)
			p.Slots = int(v)
		case "channels":
			v, _ := c.integer(f, 1, 32)
			p.Channels = int(v)
		case "threads":
			v, ok := c.integer(f, 32, 1024)
			if ok && v%32 != 0 {
				c.errorf(diag.BadValue, f.ValOff, "", "threads %d: want a multiple of 32", v)
			}
			p.Threads = int(v)
		case "eager_bytes":
			if v, ok := c.integer(f, 0, math.MaxInt64); ok {
				p.EagerBytes = &v
			}
		case "direct":
			if v, ok := c.boolean(f); ok {
				p.Direct = &v
			}
		default:
			if !c.commonField(&s, f, line, opt) {
				c.errorf(diag.UnknownField, f.KeyOff, "fields of a p2p entry: "+p2pFields, "unknown field %q in a p2p entry", f.Key)
			}
		}
	}
	if !haveColl {
		c.errorf(diag.MissingField, 0, `add "collective": "sendrecv"`, "p2p entry lacks \"collective\"")
	}
	return s, c.ds
}
