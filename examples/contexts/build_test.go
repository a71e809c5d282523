package contexts

// The default context's generator: the table of generated schedule entries
// and their policies (plan), written as schedule_manifest.jsonl (build),
// and the relay analysis the slow_rank policies are checked against
// (relays). Every entry names a compiler/gen algorithm instead of a file
// (docs/selection-context.md §5.5), so the context serves every nranks and
// node shape its generators serve, 1 to 1024 ranks and most up to 2046 (docs §5.6), and the
// runtime builds only the calling rank's tables. The LL/Simple crossover of
// allreduce, allgather, reducescatter and alltoall is not a static window:
// it reads the exogenous attribute ll_max_bytes (llPref).
// `go test ./examples/contexts -update` writes the result to default/;
// TestUpToDate fails when the committed files differ from what this file
// produces.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
)

// Message-size regimes (bytes, ir.MessageBytes), after docs/generators.md
// "Size guidance": LL all-pairs / direct up to llMaxDefault (the default of
// ll_max_bytes, which moves this crossover at run time); broadcast's and
// reduce's direct schedules up to smallMax, trees up to midMax (static
// windows: both sides are Simple); rings, chains and hierarchical schedules
// above.
const (
	llMaxDefault = 256 << 10 // the sweeps on one H200, 2 and 4 ranks (docs/crossovers.md)
	smallMax     = 32 << 10  // the same sweep (broadcast direct fastest to 32 KiB)
	midMax       = 1 << 20
)

// llCap is the static upper bound of every LL schedule's window (bytes,
// ir.MessageBytes), whatever ll_max_bytes says. LL programs are never
// sliced (docs/design/ir.md §4): their scratch grows with the message, four
// times the bytes a rank receives (packets carry half payload, and
// launches alternate between two scratch halves, ir.md §5.4), so a 4 MiB
// one-shot allreduce at 8 ranks already takes 7 x 4 MiB x 4 = 112 MiB of
// scratch per rank. Above llCap only the Simple schedules match, so an
// ll_max_bytes beyond it leaves larger messages on Simple.
const llCap = 4 << 20

// llMaxAttr is the exogenous attribute that holds the LL/Simple crossover
// (bytes, ir.MessageBytes): LL schedules are preferred up to it.
const llMaxAttr = "ll_max_bytes"

// An LL schedule is usable from 2 ranks on: one rank copies its input, and
// one schedule per collective is enough for that (a switch between two
// copies would be no hot swap).
//
// llPref is the preference of an LL schedule that a Simple one takes over
// above ll_max_bytes: small (prefSmall, or prefWide for the wide LL
// entries, which outscore the one-channel ones where they are usable) up
// to ll_max_bytes, above every Simple preference (at most prefHier);
// llOff beyond it, below every Simple preference (at least prefBase -
// demote). The Simple schedules have no lower size bound, so the
// crossover moves both ways; with the default ll_max_bytes selection is
// that of the static windows max_bytes llMaxDefault / min_bytes
// llMaxDefault+1 it replaces (TestStaticCrossoverEquivalence).
func llPref(small int) string {
	return fmt.Sprintf("msgsize <= %s ? %d : %d", llMaxAttr, small, llOff)
}

// Preferences. A schedule whose traffic relays through the slow rank loses
// demote; a schedule that routes around it scores avoidPref, above every
// demoted schedule and below every undemoted one of its regime.
const (
	prefSmall = 30 // LL all-pairs / direct, small messages
	prefWide  = 31 // the same over a channel per chunk (llEntries)
	prefHier  = 25 // hierarchical, when the node shape matches
	prefBase  = 20 // ring, tree, chain
	avoidPref = 15 // the variant that keeps the slow rank off relaying paths
	prefFlat  = 10 // relay-free direct schedules for large messages
	demote    = 15
	llOff     = 0 // an LL schedule above ll_max_bytes: a last resort
)

// rootedSmall: rooted collectives use the Simple protocol even for small
// messages. In an LL direct (or tree) broadcast, scatter, gather or reduce
// some ranks only write packets and never wait for a peer (the root of a
// broadcast, the non-roots of a gather), so unless the runtime fences
// launches they can run two launches ahead and overwrite an LL scratch half
// (halves alternate by launch parity, ir.md §5.4) that a peer has not read
// yet. Simple transfers carry credits, which bound how far a sender runs
// ahead. Collectives in which every rank both writes and waits for packets
// (one-shot allreduce, direct allgather, reducescatter, alltoall) cannot get
// two launches apart and keep LL.
const rootedSmall = ir.Simple

// wideChannels is the channel expression of the bandwidth schedules: 64/n
// channels (32, 16, 8 at 2, 4, 8 ranks), at least 1, at most 32 — one
// threadblock moves about 14 GB/s over NVLink, and on two H200s a
// 32-channel ring reached 290 GB/s allreduce busbw at 8 GiB (16 channels:
// 185; bench/results/2026-11-29-h200x2); a 1024-rank ring keeps one. The
// runtime halves it further where the generator needs (its threadblock
// and channel limits). The rooted collectives' small-message Simple
// schedules and the one-channel LL ones keep one channel; the wide LL
// ones have llWideChannels.
const wideChannels = "clamp(64 / nranks, 1, 32)"

// llWideChannels is the channel expression of the wide LL schedules:
// 32/n channels (16, 8, 4 at 2, 4, 8 ranks), at least 1, at most 16. Each
// channel's threadblock moves one chunk of the block (with one thread per
// 8-byte payload: cuda tableThreads), so a 32 KiB 2-rank LL allreduce on
// one H200 took 15.2 µs replayed over 16 channels against 35.8 µs over
// one; up to 2 KiB one channel is faster (12.7 against 15.1 µs), at 4 KiB
// the wide one (15.8 against 18.3 µs: bench/results/2026-12-02-h200-
// fourteenth, calls A to C).
const llWideChannels = "clamp(32 / nranks, 1, 16)"

// llNarrowMax is the largest message (bytes, ir.MessageBytes) for which
// the one-channel LL schedules are preferred on one node; the wide ones
// (llWideChannels, only on one node: not measured across nodes; and
// below 32 ranks: llWideUsable) take
// larger messages up to llCap with a preference one above. Both are LL,
// so this crossover is a static window and ll_max_bytes still moves the
// LL/Simple one.
const llNarrowMax = 2 << 10

// llWideUsable is where the wide LL schedules serve: one node, and fewer
// than 32 ranks (from 32 on llWideChannels is 1, the one-channel program
// under another name: a second materialisation for nothing).
const llWideUsable = "nranks > 1 && nranks < 32 && nlocalranks == nranks"

// Policy fragments. slowIn: a slow rank is named and is in the
// communicator; logicalSlow: its logical rank in a program written for
// root 0 serving a request with root `root` (ir.md §3: physical p runs
// logical (p - root) mod n).
const (
	slowIn      = "slow_rank >= 0 && slow_rank < nranks"
	logicalSlow = "((slow_rank - root + nranks) % nranks)"
)

// avoidRanks is how many avoid variants the fail-slow policies have: for
// allreduce a double binary tree keeping rank r a leaf of both trees, r <
// avoidRanks; for broadcast and reduce a tree and a chain keeping logical
// rank a (root-relative) at a leaf or the tail, 1 <= a < avoidRanks. A
// variant is one line per rank (the manifest states its program), so the
// count is bounded: a slow rank beyond them demotes the schedules that
// relay through it, and the best of those is chosen
// (docs/known-issues.md).
const avoidRanks = 16

// collectives are the collectives the context serves, in manifest order.
var collectives = []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.AllToAll,
	ir.Broadcast, ir.Reduce, ir.Gather, ir.Scatter}

// entry is one generated schedule of the default context: its line in
// schedule_manifest.jsonl.
type entry struct {
	Name     string // also its label (manifest.Schedule.Label)
	Coll     ir.Collective
	Algo     string
	Protocol ir.Protocol
	Channels string // "" (1) or an expression over nranks
	Avoid    []int
	MinBytes int64
	MaxBytes int64 // 0: unlimited
	Usable   string
	Pref     string
	Replaces string // name of an earlier entry, or ""
	Comment  string
	// Relays says which ranks relay in the program at nranks n (logical
	// ranks for rooted collectives), as the preferences assume:
	// TestPoliciesMatchRelays checks it against relays(program).
	Relays func(n int) []int
}

// scheduleLine is the JSON form of a schedule manifest line
// (docs/selection-context.md §5), in the order the fields are written.
type scheduleLine struct {
	Gen        string `json:"gen"`
	Protocol   string `json:"protocol,omitempty"`
	Channels   string `json:"channels,omitempty"`
	Avoid      []int  `json:"avoid,omitempty"`
	Collective string `json:"collective"`
	MinBytes   int64  `json:"min_bytes,omitempty"`
	MaxBytes   int64  `json:"max_bytes,omitempty"`
	Usable     string `json:"usable,omitempty"`
	Preference string `json:"preference"`
	Replaces   *int   `json:"replaces,omitempty"`
	Name       string `json:"name"`
	Comment    string `json:"comment,omitempty"`
}

// attributeLines is attribute_manifest.jsonl. ll_max_bytes comes last so
// that a context materialised before it existed differs only by lines
// appended to this file.
const attributeLines = `{"name":"slow_rank","type":"int","origin":"exo","default":-1,"description":"rank reported slow (fail-slow), -1 if none: schedules that relay through it are demoted, and one that keeps it off relaying paths is promoted"}
{"name":"root","type":"int","origin":"endo","path":"request.root","description":"root rank of rooted collectives, -1 otherwise"}
{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize","description":"message size in bytes (ir.MessageBytes)"}
{"name":"nranks","type":"int","origin":"endo","path":"request.nranks"}
{"name":"nlocalranks","type":"int","origin":"endo","path":"request.nlocalranks"}
{"name":"ll_max_bytes","type":"int","origin":"exo","default":262144,"description":"largest message size in bytes (request.messagesize) for which the LL schedules of allreduce, allgather, reducescatter and alltoall are preferred over the Simple ones (LL serves at most 4194304 B)"}
`

// everyRank relays every rank from 3 ranks on (rings, hierarchical).
func everyRank(n int) []int {
	if n < 3 {
		return nil
	}
	out := make([]int, n)
	for r := range out {
		out[r] = r
	}
	return out
}

func nobody(int) []int { return nil }

// treeRelays are the interior ranks of a binary tree in heap order rooted
// at 0 (logical ranks): those with a child, 2p+1 < n, other than the root.
func treeRelays(n int) []int {
	var out []int
	for p := 1; 2*p+1 < n; p++ {
		out = append(out, p)
	}
	return out
}

// chainRelays are a chain's interior ranks: 1..n-2.
func chainRelays(n int) []int {
	var out []int
	for p := 1; p < n-1; p++ {
		out = append(out, p)
	}
	return out
}

// plan returns every entry of the default context, in manifest order.
func plan() ([]*entry, error) {
	var out []*entry
	byName := map[string]*entry{}
	for _, c := range collectives {
		for _, e := range planColl(c) {
			if byName[e.Name] != nil {
				return nil, fmt.Errorf("duplicate entry %s", e.Name)
			}
			if e.Replaces != "" && byName[e.Replaces] == nil {
				return nil, fmt.Errorf("%s replaces unknown %s", e.Name, e.Replaces)
			}
			byName[e.Name] = e
			out = append(out, e)
		}
	}
	return out, nil
}

// llEntries are the two LL entries of a collective's small messages,
// algorithm algo: one channel (named name), and llWideChannels on one node
// for messages above llNarrowMax (name_wide, preferred one above it), both
// up to llCap and preferred up to ll_max_bytes (llPref, llWidePref). what
// describes the schedule in the comments.
func llEntries(name, algo, what string) []*entry {
	return []*entry{
		{Name: name, Algo: algo, Protocol: ir.LL, MaxBytes: llCap, Usable: "nranks > 1", Pref: llPref(prefSmall), Relays: nobody,
			Comment: fmt.Sprintf("messages up to ll_max_bytes (on one node up to %d B): %s, one channel", llNarrowMax, what)},
		{Name: name + "_wide", Algo: algo, Protocol: ir.LL, Channels: llWideChannels, MinBytes: llNarrowMax + 1, MaxBytes: llCap,
			Usable: llWideUsable, Pref: llPref(prefWide), Relays: nobody,
			Comment: fmt.Sprintf("messages above %d B up to ll_max_bytes on one node: %s, a channel per chunk", llNarrowMax, what)},
	}
}

// planColl lists the entries of collective c.
func planColl(c ir.Collective) []*entry {
	name := func(algo string, suffix ...string) string {
		s := fmt.Sprintf("%s_%s", c, algo)
		for _, x := range suffix {
			s += "_" + x
		}
		return s
	}
	// demoted is base, less demote when the slow rank relays (cond).
	demoted := func(base int, cond string) string {
		return fmt.Sprintf("%d - (%s ? %d : 0)", base, cond, demote)
	}
	relaying := "nranks > 2 && " + slowIn // rings and hierarchical: every rank relays from 3 ranks on
	var es []*entry
	switch c {
	case ir.AllReduce, ir.AllGather, ir.ReduceScatter:
		small := "direct"
		if c == ir.AllReduce {
			small = "oneshot"
		}
		es = append(es, llEntries(name(small, "ll"), small, "LL all-pairs, one hop, relays through nobody")...)
		ring := &entry{Name: name("ring"), Algo: "ring", Channels: wideChannels, Pref: demoted(prefBase, relaying),
			Relays: everyRank, Comment: "messages above ll_max_bytes: ring (bandwidth-optimal on one node)"}
		es = append(es, ring, &entry{Name: name("hier"), Algo: "hier", Channels: wideChannels,
			Usable: "nlocalranks < nranks", Pref: demoted(prefHier, relaying), Relays: everyRank,
			Comment: "messages above ll_max_bytes on several nodes: intra-node rings, inter-node rings per rail"})
		if c == ir.AllReduce {
			for r := range avoidRanks {
				es = append(es, &entry{Name: name("dbtree", fmt.Sprintf("avoid%d", r)), Algo: "dbtree", Channels: wideChannels,
					Avoid: []int{r}, Usable: fmt.Sprintf("slow_rank == %d && nranks > 2", r), Pref: fmt.Sprint(avoidPref),
					Replaces: ring.Name, Relays: nil,
					Comment: fmt.Sprintf("rank %d slow: double binary tree with rank %d a leaf of both trees", r, r)})
			}
		} else {
			es = append(es, &entry{Name: name("direct"), Algo: "direct", Channels: wideChannels, Usable: "nranks > 2",
				Pref: fmt.Sprintf("%s ? %d : %d", slowIn, avoidPref, prefFlat), Replaces: ring.Name, Relays: nobody,
				Comment: "messages above ll_max_bytes with a slow rank: direct exchange, relays through nobody"})
		}
	case ir.AllToAll:
		es = append(es, llEntries(name("direct", "ll"), "direct", "direct, LL (up to 128 ranks)")...)
		es = append(es,
			&entry{Name: name("direct"), Algo: "direct", Channels: wideChannels, Pref: fmt.Sprint(prefBase), Relays: nobody,
				Comment: "messages above ll_max_bytes: direct, one step, relays through nobody (up to 128 ranks)"},
			&entry{Name: name("pull"), Algo: "pull", Pref: fmt.Sprint(prefFlat), Relays: nobody,
				Comment: "any size beyond 128 ranks on one node (direct takes a threadblock per peer): every rank reads its blocks from its peers"},
			&entry{Name: name("push"), Algo: "push", Usable: "nlocalranks < nranks", Pref: fmt.Sprint(prefFlat), Relays: nobody,
				Comment: "any size beyond 128 ranks on several nodes (pull reads peers' memory): every rank puts its blocks into its peers' scratch"})
	case ir.Gather, ir.Scatter:
		// Simple even for small messages: see rootedSmall.
		es = append(es,
			&entry{Name: name("direct"), Algo: "direct", Protocol: rootedSmall, Pref: fmt.Sprint(prefBase), Relays: nobody,
				Comment: "direct: the root talks to every rank, one step, relays through nobody (up to 128 ranks)"},
			&entry{Name: name("pull"), Algo: "pull", Pref: fmt.Sprint(prefFlat), Relays: nobody,
				Comment: "beyond 128 ranks on one node: the root reads (gather) or the ranks read (scatter) the blocks directly"},
			&entry{Name: name("push"), Algo: "push", Usable: "nlocalranks < nranks", Pref: fmt.Sprint(prefFlat), Relays: nobody,
				Comment: "beyond 128 ranks on several nodes: the ranks put (gather) or the root puts (scatter) the blocks into scratch, whence they are copied out"})
	case ir.Broadcast, ir.Reduce:
		treeCond := fmt.Sprintf("%s && %s >= 1 && 2 * %s + 1 < nranks", slowIn, logicalSlow, logicalSlow)
		chainCond := fmt.Sprintf("%s && %s >= 1 && %s <= nranks - 2", slowIn, logicalSlow, logicalSlow)
		es = append(es, &entry{Name: name("direct"), Algo: "direct", Protocol: rootedSmall, MaxBytes: smallMax,
			Pref: fmt.Sprint(prefSmall), Relays: nobody,
			Comment: "small messages: the root talks to every rank directly (Simple: see rootedSmall; up to 128 ranks)"})
		// The tree has no lower bound: the direct schedule outscores it for
		// small messages, and beyond 128 ranks (where direct does not
		// serve) the tree takes them.
		tree := &entry{Name: name("tree"), Algo: "tree", Channels: wideChannels, MaxBytes: midMax,
			Pref: demoted(prefBase, treeCond), Relays: treeRelays, Comment: "medium messages: pipelined binary tree"}
		chain := &entry{Name: name("chain"), Algo: "chain", Channels: wideChannels, MinBytes: midMax + 1,
			Pref: demoted(prefBase, chainCond), Relays: chainRelays, Comment: "large messages: pipelined chain"}
		es = append(es, tree, chain)
		for _, base := range []*entry{tree, chain} {
			for a := 1; a < avoidRanks; a++ {
				relays := fmt.Sprintf("2 * %d + 1 < nranks", a) // a is interior in the tree
				if base == chain {
					relays = fmt.Sprintf("%d <= nranks - 2", a)
				}
				es = append(es, &entry{Name: base.Name + fmt.Sprintf("_avoid%d", a), Algo: base.Algo, Channels: wideChannels,
					Avoid: []int{a}, MinBytes: base.MinBytes, MaxBytes: base.MaxBytes,
					Usable: fmt.Sprintf("%s && %s == %d && %s", slowIn, logicalSlow, a, relays),
					Pref:   fmt.Sprint(avoidPref), Replaces: base.Name,
					Comment: fmt.Sprintf("slow rank at logical position %d (root-relative): %s with it at a leaf", a, base.Algo)})
			}
		}
	}
	for _, e := range es {
		e.Coll = c
	}
	return es
}

// manifestLines writes es as schedule_manifest.jsonl.
func manifestLines(es []*entry) ([]byte, error) {
	id := map[string]int{}
	var man bytes.Buffer
	for i, e := range es {
		id[e.Name] = i
		l := scheduleLine{Gen: e.Algo, Channels: e.Channels, Avoid: e.Avoid, Collective: e.Coll.String(),
			MinBytes: e.MinBytes, MaxBytes: e.MaxBytes, Usable: e.Usable, Preference: e.Pref, Name: e.Name, Comment: e.Comment}
		if e.Protocol != ir.Simple {
			l.Protocol = e.Protocol.String()
		}
		if e.Replaces != "" {
			r := id[e.Replaces]
			l.Replaces = &r
		}
		enc := json.NewEncoder(&man)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(l); err != nil {
			return nil, err
		}
	}
	return man.Bytes(), nil
}

// build produces every file of the default context: name → contents.
func build() (map[string][]byte, []*entry, error) {
	es, err := plan()
	if err != nil {
		return nil, nil, err
	}
	man, err := manifestLines(es)
	if err != nil {
		return nil, nil, err
	}
	return map[string][]byte{
		"attribute_manifest.jsonl": []byte(attributeLines),
		"schedule_manifest.jsonl":  man,
		SlowRankLog:                nil,
		LLMaxBytesLog:              nil,
	}, es, nil
}

// opts is e's generator options at nranks n, nlocalranks l, as the
// runtime gives them (runtime/selector genLocal): l on several nodes (0 <
// l < n), where every generator joins the nodes with port channels or
// refuses, and for hier; else 0 (a program for any node shape).
func (e *entry) opts(n, l int) gen.Options {
	o := gen.Options{Collective: e.Coll, NRanks: n, Protocol: e.Protocol, Avoid: e.Avoid, Name: e.Name}
	if l > 0 && l < n || e.Algo == "hier" {
		o.NLocalRanks = l
	}
	return o
}

// relays returns the ranks of a transfer-level program that relay: that
// receive data from one rank and send data derived from it on to another —
// the definition of gen.Options.Avoid. A rank relays when it has an rcs, rrs
// or rrcs whose threadblock sends to another peer than it receives from, or
// a send of chunks that a receive from another peer wrote (directly or
// through copies and reductions). The analysis covers the out-of-place
// arrangement and ignores the order of ops, so it may over-approximate; it
// finds no relays in primitive-level programs, whose only generator
// (oneshot) has none. TestRelaysMatchGen checks it against gen's own notion.
func relays(p *ir.Program) []int {
	var out []int
	for r := range p.Ranks {
		if rankRelays(&p.Ranks[r]) {
			out = append(out, r)
		}
	}
	return out
}

// span is a range of chunks of one buffer that may hold data received from
// peer from.
type span struct {
	buf    ir.BufKind
	lo, hi int64
	from   int
}

func rankRelays(rk *ir.Rank) bool {
	var tainted []span
	// sources returns the peers whose data may be in ref's n chunks.
	sources := func(ref ir.Ref, n int64) []int {
		var ps []int
		for _, s := range tainted {
			if s.buf == ref.Buf && ref.Off < s.hi && s.lo < ref.Off+n && !slices.Contains(ps, s.from) {
				ps = append(ps, s.from)
			}
		}
		return ps
	}
	taint := func(ref ir.Ref, n int64, from int) bool {
		for _, s := range tainted {
			if s.buf == ref.Buf && s.from == from && s.lo <= ref.Off && ref.Off+n <= s.hi {
				return false
			}
		}
		tainted = append(tainted, span{ref.Buf, ref.Off, ref.Off + n, from})
		return true
	}
	for changed := true; changed; {
		changed = false
		for _, tb := range rk.TBs {
			for _, op := range tb.Ops {
				var from []int
				if op.Code.Info().Recvs {
					from = append(from, tb.RecvPeer)
				}
				if op.Code == ir.OpCopy || op.Code == ir.OpReduce {
					for _, s := range op.Srcs {
						if s.Local() {
							from = append(from, sources(s, op.Count)...)
						}
					}
				}
				for _, d := range op.Dsts {
					for _, f := range from {
						if d.Local() && taint(d, op.Count, f) {
							changed = true
						}
					}
				}
			}
		}
	}
	for _, tb := range rk.TBs {
		for _, op := range tb.Ops {
			info := op.Code.Info()
			if !info.Sends {
				continue
			}
			if info.Recvs && tb.RecvPeer != tb.SendPeer {
				return true
			}
			for _, s := range op.Srcs {
				if !s.Local() {
					continue
				}
				for _, f := range sources(s, op.Count) {
					if f != tb.SendPeer {
						return true
					}
				}
			}
		}
	}
	return false
}
