// Package gen is a library of standard collective algorithms that produce
// correct ir.Programs for any number of ranks: ring, all-pairs one-shot and
// two-shot, binary and double binary trees, recursive halving/doubling,
// hierarchical (intra-node / inter-node), direct, and chain. The semantics
// every program follows are those of docs/design/ir.md; docs/generators.md
// describes each algorithm, its chunking and its cost model.
//
// Most generators write transfer-level programs (send, recv, rcs, rrs, rrc,
// rrcs, copy, reduce, nop: MSCCL style), which the legaliser turns into
// primitives; the all-pairs one-shot allreduce is written at the primitive
// level (LL: packet puts into the peers' scratch and one local reduce;
// Simple: a signal/wait handshake around remote reads).
//
// Use:
//
//	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: 8})
//
// Every program supports both buffer arrangements (in place and out of
// place, NCCL 2.25 semantics, ir.md §3), leaves the message-size window open
// (0/0: policies decide) and splits its chunk space over Options.Channels
// parallel lanes, each with its own threadblocks and channel.
package gen

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
)

// Errors returned by Generate (wrapped, test with errors.Is).
var (
	// ErrUnknownAlgorithm: the algorithm name is not in Algorithms().
	ErrUnknownAlgorithm = errors.New("gen: unknown algorithm")
	// ErrUnsupported: the algorithm does not serve the collective.
	ErrUnsupported = errors.New("gen: algorithm does not support the collective")
	// ErrOptions: an option is out of range or inconsistent (nranks,
	// nlocalranks, channels, root, order, avoid).
	ErrOptions = errors.New("gen: bad options")
	// ErrAvoid: the algorithm cannot keep an avoided rank off its relaying
	// paths (for example a ring, where every rank relays).
	ErrAvoid = errors.New("gen: cannot keep avoided rank off relaying paths")
)

// MaxChannels bounds Options.Channels (MSCCL's MAXCHANNELS).
const MaxChannels = 32

// PipelineSliceBytes is the Program.SliceBytes of the pipelined generators
// (tree, dbtree, chain) with the Simple protocol: each chunk is processed in
// slices of at most this many bytes, so a slice leaves a rank for the next
// hop while the following one is still arriving (ir.md §4).
const PipelineSliceBytes = 128 << 10

// Options parametrise a generator.
type Options struct {
	// Collective is the collective to compute; it must be one of the
	// algorithm's (Supports).
	Collective ir.Collective
	// NRanks is the world size, 1..ir.MaxRanks. Every generator handles every
	// nranks (non-powers of two included); nranks 1 gives a local copy.
	NRanks int
	// NLocalRanks is the number of ranks per node (1 <= NLocalRanks <=
	// NRanks, dividing NRanks; ranks r and r' share a node iff
	// r/NLocalRanks == r'/NLocalRanks). The hierarchical generator
	// requires it. When it is below NRanks (several nodes) every generator
	// records it in Program.NLocalRanks and joins ranks of different nodes
	// with port channels only, which put and never read a peer's memory
	// (docs/transport.md); generators whose programs read peers' memory
	// (pull, Simple oneshot) refuse several nodes (ErrUnsupported; push is
	// pull written with puts into the peers' scratch). 0, or
	// NRanks: one node, any shape (Program.NLocalRanks 0, except hier).
	NLocalRanks int
	// Protocol is ir.Simple or ir.LL. LL programs are never sliced.
	Protocol ir.Protocol
	// Channels is K, the number of parallel lanes (threadblocks and
	// channels) the chunk space is split over; 0 means 1; at most
	// MaxChannels. Each block is cut into K times the algorithm's own chunk
	// count.
	Channels int
	// Root is the root the program is written for (rooted collectives:
	// broadcast, reduce, gather, scatter), 0..NRanks-1; the runtime rotates
	// it for other roots (ir.md §3). It must be 0 for other collectives.
	Root int
	// Order optionally lays the ranks out for the order-aware generators:
	// the ring sequence of ring (Order[i] sends to Order[i+1]), the chain of
	// chain and of ring broadcast/reduce (started at the root), and the tree
	// positions of tree and dbtree (heap order: Order[0] is the root of an
	// allreduce tree). It must be a permutation of 0..NRanks-1; nil means
	// 0, 1, ..., NRanks-1. Other generators ignore it. For rooted
	// collectives ranks are logical ranks: physical when the request's root
	// is Root.
	Order []int
	// Avoid lists ranks that must not relay: a relay receives data from one
	// rank and sends data derived from it on to another (a ring member, an
	// interior tree or chain node). tree, dbtree and chain move avoided
	// ranks to leaf and tail positions; every generator returns ErrAvoid if
	// an avoided rank would still relay. The root of a broadcast or reduce
	// never relays (it only sends, or only receives).
	Avoid []int
	// Name overrides the program name (default
	// "<algo>_<collective>_n<nranks>[_l<nlocalranks>]_k<channels>_<protocol>[_root<r>]").
	Name string
}

// Algorithm documents one generator.
type Algorithm struct {
	Name string
	// Aliases are other accepted spellings of Name.
	Aliases []string
	// Collectives are those the algorithm serves.
	Collectives []ir.Collective
	// Level is the op level the generator writes: ir.LevelTransfer (to be
	// legalised) or ir.LevelPrimitive.
	Level ir.Level
	// UsesOrder and UsesAvoid say whether Options.Order and Options.Avoid
	// change the program (Avoid is always checked).
	UsesOrder bool
	UsesAvoid bool
	// SimpleOnly: the algorithm writes Simple programs only (Protocol LL
	// is ErrOptions).
	SimpleOnly bool
	// Summary is one line; Constraints says what the options must satisfy
	// beyond the common rules.
	Summary     string
	Constraints string

	build func(g *gen) error
}

var algorithms = []Algorithm{
	{Name: "ring", Collectives: []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast, ir.Reduce},
		Level: ir.LevelTransfer, UsesOrder: true,
		Summary:     "NCCL ring: reduce-scatter then allgather around the ring; broadcast/reduce pipelined along the ring from/to the root",
		Constraints: "every rank relays when nranks >= 3 (Avoid fails); broadcast/reduce relay through all but the ring's last rank",
		build:       buildRing},
	{Name: "oneshot", Aliases: []string{"allpairs", "allpairs-oneshot"}, Collectives: []ir.Collective{ir.AllReduce},
		Level:       ir.LevelPrimitive,
		Summary:     "all-pairs one-shot: every rank reduces every rank's input itself (LL: packet puts then one reduce; Simple: handshake and remote reads)",
		Constraints: "moves (nranks-1) x message per rank: small messages only; no relays",
		build:       buildOneShot},
	{Name: "twoshot", Aliases: []string{"allpairs-twoshot"}, Collectives: []ir.Collective{ir.AllReduce},
		Level:       ir.LevelTransfer,
		Summary:     "all-pairs two-shot: direct reduce-scatter, then direct allgather of the reduced parts",
		Constraints: "every rank relays when nranks >= 3",
		build:       buildTwoShot},
	{Name: "tree", Aliases: []string{"bintree", "binary-tree"}, Collectives: []ir.Collective{ir.AllReduce, ir.Broadcast, ir.Reduce},
		Level: ir.LevelTransfer, UsesOrder: true, UsesAvoid: true,
		Summary:     "binary tree in heap order: reduce up, broadcast down (pipelined over slices)",
		Constraints: "avoided ranks become leaves; at most ceil(nranks/2) ranks can be avoided",
		build:       buildTree},
	{Name: "dbtree", Aliases: []string{"double-binary-tree", "doubletree"}, Collectives: []ir.Collective{ir.AllReduce, ir.Broadcast, ir.Reduce},
		Level: ir.LevelTransfer, UsesOrder: true, UsesAvoid: true,
		Summary:     "NCCL-style double binary tree: half the data on each of two complementary trees",
		Constraints: "avoided ranks become leaves of both trees",
		build:       buildDBTree},
	{Name: "rhd", Aliases: []string{"halving-doubling", "recursive", "rabenseifner"}, Collectives: []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter},
		Level:       ir.LevelTransfer,
		Summary:     "recursive halving (reduce-scatter) and doubling (allgather); allreduce is both (Rabenseifner); extra ranks of non-powers of two fold into a partner first",
		Constraints: "every participant relays when nranks >= 4",
		build:       buildRHD},
	{Name: "hier", Aliases: []string{"hierarchical"}, Collectives: []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter},
		Level:       ir.LevelTransfer,
		Summary:     "hierarchical: intra-node ring reduce-scatter, inter-node ring allreduce among same-local-rank peers, intra-node ring allgather",
		Constraints: "needs NLocalRanks dividing NRanks; the program requires that node shape",
		build:       buildHier},
	{Name: "direct", Aliases: []string{"allpairs-direct"}, Collectives: []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter, ir.Broadcast, ir.Reduce, ir.AllGather, ir.ReduceScatter},
		Level:       ir.LevelTransfer,
		Summary:     "one step: every rank exchanges its blocks directly with every peer (or the root with every rank)",
		Constraints: "nranks-1 threadblocks per lane on busy ranks; no relays",
		build:       buildDirect},
	{Name: "pull", Aliases: []string{"direct-pull", "allpairs-pull"}, Collectives: []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter},
		Level: ir.LevelPrimitive, SimpleOnly: true,
		Summary:     "one step at the primitive level: every rank reads what it needs from its peers' buffers, many peers per threadblock",
		Constraints: "Simple only; serves any nranks (direct needs nranks-1 threadblocks per lane); no relays",
		build:       buildPull},
	{Name: "push", Aliases: []string{"direct-push", "allpairs-push"}, Collectives: []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter},
		Level: ir.LevelPrimitive, SimpleOnly: true,
		Summary:     "one step at the primitive level: every rank puts its blocks into scratch slots of the ranks that need them, which copy them out; many peers per threadblock",
		Constraints: "Simple only; serves any nranks and several nodes (puts only, into the peers' scratch); no relays",
		build:       buildPush},
	{Name: "chain", Aliases: []string{"pipeline"}, Collectives: []ir.Collective{ir.Broadcast, ir.Reduce},
		Level: ir.LevelTransfer, UsesOrder: true, UsesAvoid: true,
		Summary:     "pipelined chain from (broadcast) or to (reduce) the root along Order",
		Constraints: "at most one non-root rank can be avoided (it becomes the tail)",
		build:       buildChain},
}

// Algorithms lists every generator, sorted by name. The slices are copies.
func Algorithms() []Algorithm {
	out := make([]Algorithm, len(algorithms))
	for i, a := range algorithms {
		a.Aliases = append([]string(nil), a.Aliases...)
		a.Collectives = append([]ir.Collective(nil), a.Collectives...)
		out[i] = a
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func lookup(name string) (*Algorithm, bool) {
	k := strings.ToLower(strings.TrimSpace(name))
	for i := range algorithms {
		a := &algorithms[i]
		if a.Name == k {
			return a, true
		}
		for _, al := range a.Aliases {
			if al == k {
				return a, true
			}
		}
	}
	return nil, false
}

// Canonical returns the name of algorithm algo (a name or alias), or "" when
// there is none.
func Canonical(algo string) string {
	if a, ok := lookup(algo); ok {
		return a.Name
	}
	return ""
}

// Supports reports whether algorithm algo (a name or alias) serves
// collective coll.
func Supports(algo string, coll ir.Collective) bool {
	a, ok := lookup(algo)
	return ok && a.supports(coll)
}

func (a *Algorithm) supports(c ir.Collective) bool {
	for _, x := range a.Collectives {
		if x == c {
			return true
		}
	}
	return false
}

func algoNames() string {
	var s []string
	for _, a := range Algorithms() {
		s = append(s, a.Name)
	}
	return strings.Join(s, ", ")
}

// Generate builds the program of algorithm algo (a name or alias of
// Algorithms()) for opts. Errors (wrapped): ErrUnknownAlgorithm,
// ErrUnsupported, ErrOptions, ErrAvoid. The program is not verified here;
// run compiler/verify on it (the package tests do, for every generator).
func Generate(algo string, opts Options) (*ir.Program, error) {
	a, ok := lookup(algo)
	if !ok {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownAlgorithm, algo, algoNames())
	}
	if !a.supports(opts.Collective) {
		var cs []string
		for _, c := range a.Collectives {
			cs = append(cs, c.String())
		}
		return nil, fmt.Errorf("%w: %s serves %s, not %v", ErrUnsupported, a.Name, strings.Join(cs, ", "), opts.Collective)
	}
	if err := acrossNodes(a, opts); err != nil {
		return nil, err
	}
	g, err := newGen(a, opts)
	if err != nil {
		return nil, err
	}
	if g.n == 1 {
		g.trivial()
	} else if err := a.build(g); err != nil {
		return nil, err
	}
	if err := g.finish(); err != nil {
		return nil, err
	}
	return g.p, nil
}

// Check reports whether Generate would accept algo and opts as far as that
// can be told without building the program: the algorithm is known and
// serves the collective, and every option is in range for opts.NRanks
// (nlocalranks, channels, root, order, avoid, the op bound MaxOps, the
// protocol of a SimpleOnly algorithm, direct's, twoshot's, pull's and
// push's threadblocks, oneshot's, pull's and push's channel ends per rank). It is
// cheap (no op is built), for matching a generated manifest entry against
// a communicator's shape. What only building shows — ErrAvoid, and the
// other algorithms' MaxThreadblocks and MaxTransferChannels limits —
// Generate reports.
// Errors are Generate's (wrapped).
func Check(algo string, opts Options) error {
	a, err := serving(algo, opts.Collective)
	if err != nil {
		return err
	}
	if a.Name == "hier" && opts.NLocalRanks == 0 {
		return fmt.Errorf("%w: hier needs NLocalRanks (ranks per node) dividing NRanks", ErrOptions)
	}
	if err := acrossNodes(a, opts); err != nil {
		return err
	}
	if a.SimpleOnly && opts.Protocol != ir.Simple {
		return fmt.Errorf("%w: %s writes Simple programs only", ErrOptions, a.Name)
	}
	_, err = checkGen(a, opts, false)
	return err
}

// serving is the algorithm algo names when it serves coll; errors are
// ErrUnknownAlgorithm and ErrUnsupported (wrapped).
func serving(algo string, coll ir.Collective) (*Algorithm, error) {
	a, ok := lookup(algo)
	if !ok {
		return nil, fmt.Errorf("%w %q (want one of %s)", ErrUnknownAlgorithm, algo, algoNames())
	}
	if !a.supports(coll) {
		return nil, fmt.Errorf("%w: %s does not serve %v", ErrUnsupported, a.Name, coll)
	}
	return a, nil
}

// CheckOptions checks what Check checks that does not depend on the world
// size: the algorithm serves opts.Collective, the protocol is known, and
// opts.Avoid lists distinct non-negative ranks. A manifest entry that names
// a generator is checked with it when it is read. Errors are Generate's
// (wrapped).
func CheckOptions(algo string, opts Options) error {
	if _, err := serving(algo, opts.Collective); err != nil {
		return err
	}
	if opts.Protocol >= ir.NumProtocols {
		return fmt.Errorf("%w: unknown protocol %v", ErrOptions, opts.Protocol)
	}
	seen := map[int]bool{}
	for i, r := range opts.Avoid {
		if r < 0 || seen[r] {
			return fmt.Errorf("%w: avoid[%d] = %d: negative or repeated", ErrOptions, i, r)
		}
		seen[r] = true
	}
	return nil
}

// acrossNodes refuses several nodes (0 < NLocalRanks < NRanks) to the
// generators whose programs read peers' memory: across nodes ranks share
// no memory, and port channels only put.
func acrossNodes(a *Algorithm, o Options) error {
	if o.NLocalRanks <= 0 || o.NLocalRanks >= o.NRanks {
		return nil
	}
	if a.Name == "pull" || a.Name == "oneshot" && o.Protocol == ir.Simple {
		return fmt.Errorf("%w: %s (%v) reads peers' buffers, which ranks of different nodes cannot (%d ranks per node of %d); across nodes use a generator that puts (push, oneshot LL, direct, ring, hier)",
			ErrUnsupported, a.Name, o.Protocol, o.NLocalRanks, o.NRanks)
	}
	return nil
}
