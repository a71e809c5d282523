package contexts

// The default context's generator: the table of schedules and policies
// (plan), the compilation of each schedule into a bundle (build), and the
// relay analysis that the slow_rank policies are derived from (relays).
// The LL/Simple crossover of allreduce, allgather, reducescatter and
// alltoall is not a static window: it reads the exogenous attribute
// ll_max_bytes (llPref).
// `go test ./examples/contexts -update` writes the result to default/;
// TestUpToDate fails when the committed files differ from what this file
// produces.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Message-size regimes (bytes, ir.MessageBytes), after docs/generators.md
// "Size guidance": LL all-pairs / direct up to smallMax (the default of
// ll_max_bytes, which moves this crossover at run time); trees up to midMax
// for broadcast and reduce (a static window: both sides are Simple); rings,
// chains and hierarchical schedules above.
const (
	smallMax = 64 << 10
	midMax   = 1 << 20
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

// llPref is the preference of an LL schedule that a Simple one takes over
// above ll_max_bytes: prefSmall up to ll_max_bytes, above every Simple
// preference (at most prefHier); llOff beyond it, below every Simple
// preference (at least prefBase - demote). The Simple schedules have no
// lower size bound, so the crossover moves both ways; with the default
// ll_max_bytes selection is that of the static windows max_bytes 65536 /
// min_bytes 65537 it replaces (TestStaticCrossoverEquivalence).
func llPref() string {
	return fmt.Sprintf("msgsize <= %s ? %d : %d", llMaxAttr, prefSmall, llOff)
}

// Preferences. A schedule whose traffic relays through the slow rank loses
// demote; a schedule that routes around it scores avoidPref, above every
// demoted schedule and below every undemoted one of its regime.
const (
	prefSmall = 30 // LL all-pairs / direct, small messages
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

// wideChannels bounds the channel count (threadblocks per rank) of the
// bandwidth schedules: one threadblock moves about 14 GB/s over NVLink, and
// on two H200s a 32-channel ring reached 290 GB/s allreduce busbw at 8 GiB
// (16 channels: 185; bench/results/2026-11-29-h200x2). At n ranks a schedule
// takes 64/n channels (32, 16, 8 at 2, 4, 8 ranks), which keeps the op
// tables, and the context embedded in every binary, small (16 MB at 32
// channels for every n; 4, 8 ranks were not measured on several GPUs). The
// latency schedules (LL, and the rooted collectives' small-message Simple
// ones) keep one channel.
const wideChannels = 32

// wide reports whether e is a bandwidth schedule, generated with as many
// channels as its algorithm takes (up to wideChannels): a Simple schedule
// of 2 ranks or more that serves messages above smallMax; gather and
// scatter keep one channel.
func wide(e *entry) bool {
	c := e.Opts.Collective
	return e.Opts.Protocol == ir.Simple && e.Opts.NRanks > 1 && (e.MaxBytes == 0 || e.MaxBytes > smallMax) &&
		c != ir.Gather && c != ir.Scatter
}

// worlds are the communicator sizes the default context serves.
var worlds = []int{1, 2, 4, 8}

// collectives are the collectives it serves, in manifest order.
var collectives = []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.AllToAll,
	ir.Broadcast, ir.Reduce, ir.Gather, ir.Scatter}

// entry is one schedule of the default context: how to generate it and its
// line in schedule_manifest.jsonl.
type entry struct {
	Name     string // program name; the file is schedules/<Name>.tsb
	Algo     string
	Opts     gen.Options
	MinBytes int64
	MaxBytes int64 // 0: unlimited
	Usable   string
	Pref     string
	Replaces string // name of an earlier entry, or ""
	Comment  string

	Prog   *ir.Program // as generated (transfer level, or primitive for oneshot)
	Relays []int       // ranks that relay (logical ranks for rooted collectives)
}

// scheduleLine is the JSON form of a schedule manifest line
// (docs/selection-context.md §5), in the order the fields are written.
type scheduleLine struct {
	File        string `json:"file"`
	Collective  string `json:"collective"`
	NRanks      int    `json:"nranks"`
	NLocalRanks int    `json:"nlocalranks,omitempty"`
	MinBytes    int64  `json:"min_bytes,omitempty"`
	MaxBytes    int64  `json:"max_bytes,omitempty"`
	Usable      string `json:"usable,omitempty"`
	Preference  string `json:"preference"`
	Replaces    *int   `json:"replaces,omitempty"`
	Name        string `json:"name"`
	Comment     string `json:"comment,omitempty"`
}

// attributeLines is attribute_manifest.jsonl. ll_max_bytes comes last so
// that a context materialised before it existed differs only by lines
// appended to this file.
const attributeLines = `{"name":"slow_rank","type":"int","origin":"exo","default":-1,"description":"rank reported slow (fail-slow), -1 if none: schedules that relay through it are demoted, and one that keeps it off relaying paths is promoted"}
{"name":"root","type":"int","origin":"endo","path":"request.root","description":"root rank of rooted collectives, -1 otherwise"}
{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize","description":"message size in bytes (ir.MessageBytes)"}
{"name":"nranks","type":"int","origin":"endo","path":"request.nranks"}
{"name":"nlocalranks","type":"int","origin":"endo","path":"request.nlocalranks"}
{"name":"ll_max_bytes","type":"int","origin":"exo","default":65536,"description":"largest message size in bytes (request.messagesize) for which the LL schedules of allreduce, allgather, reducescatter and alltoall are preferred over the Simple ones (LL serves at most 4194304 B)"}
`

func fileOf(name string) string { return "schedules/" + name + ".tsb" }

// plan returns every entry of the default context, in manifest order, with
// its program generated and its relays computed.
func plan() ([]*entry, error) {
	var out []*entry
	add := func(e *entry) error {
		if e.Opts.Name == "" {
			e.Opts.Name = e.Name
		}
		if wide(e) {
			// The most channels the algorithm takes (its channel indices
			// stay below gen.MaxTransferChannels).
			for _, k := range []int{min(wideChannels, 64/e.Opts.NRanks), 16, 8, 4, 2} {
				o := e.Opts
				o.Channels = k
				if _, err := gen.Generate(e.Algo, o); err == nil {
					e.Opts = o
					break
				}
			}
		}
		p, err := gen.Generate(e.Algo, e.Opts)
		if err != nil {
			return fmt.Errorf("%s: %w", e.Name, err)
		}
		e.Prog = p
		e.Relays = relays(p)
		out = append(out, e)
		return nil
	}
	for _, n := range worlds {
		for _, c := range collectives {
			es, err := planColl(c, n)
			if err != nil {
				return nil, err
			}
			for _, e := range es {
				if err := add(e); err != nil {
					return nil, err
				}
			}
		}
	}
	// Derived policies need the relays, which need the programs.
	byName := map[string]*entry{}
	for _, e := range out {
		if byName[e.Name] != nil {
			return nil, fmt.Errorf("duplicate entry %s", e.Name)
		}
		byName[e.Name] = e
	}
	for _, e := range out {
		if b, ok := strings.CutPrefix(e.Pref, "@demote:"); ok {
			base, err := strconv.Atoi(b)
			if err != nil {
				return nil, err
			}
			e.Pref = demoted(e, base)
		}
		if e.Replaces != "" && byName[e.Replaces] == nil {
			return nil, fmt.Errorf("%s replaces unknown %s", e.Name, e.Replaces)
		}
		if e.Opts.Avoid != nil && slices.Contains(e.Relays, e.Opts.Avoid[0]) {
			return nil, fmt.Errorf("%s still relays through %d", e.Name, e.Opts.Avoid[0])
		}
	}
	return out, nil
}

// tag is a placeholder preference replaced by demoted(e, base) once the
// program's relays are known.
func tagged(base int) string { return fmt.Sprintf("@demote:%d", base) }

// planColl lists the entries of collective c at n ranks.
func planColl(c ir.Collective, n int) ([]*entry, error) {
	name := func(algo string, suffix ...string) string {
		s := fmt.Sprintf("%s_n%d_%s", c, n, algo)
		for _, x := range suffix {
			s += "_" + x
		}
		return s
	}
	opts := func(proto ir.Protocol) gen.Options {
		return gen.Options{Collective: c, NRanks: n, Protocol: proto}
	}
	if n == 1 {
		algo := "ring"
		if !gen.Supports(algo, c) {
			algo = "direct"
		}
		return []*entry{{Name: name(algo), Algo: algo, Opts: opts(ir.Simple), Pref: "0",
			Comment: "one rank: a local copy"}}, nil
	}
	var es []*entry
	switch c {
	case ir.AllReduce, ir.AllGather, ir.ReduceScatter:
		small := "direct"
		if c == ir.AllReduce {
			small = "oneshot"
		}
		es = append(es, &entry{Name: name(small, "ll"), Algo: small, Opts: opts(ir.LL), MaxBytes: llCap,
			Pref: llPref(), Comment: "messages up to ll_max_bytes: LL all-pairs, one hop, relays through nobody"})
		ring := &entry{Name: name("ring"), Algo: "ring", Opts: opts(ir.Simple),
			Pref: tagged(prefBase), Comment: "messages above ll_max_bytes: ring (bandwidth-optimal on one node)"}
		es = append(es, ring)
		for _, l := range divisors(n) {
			o := opts(ir.Simple)
			o.NLocalRanks = l
			es = append(es, &entry{Name: name("hier", fmt.Sprintf("l%d", l)), Algo: "hier", Opts: o,
				Pref:    tagged(prefHier),
				Comment: fmt.Sprintf("messages above ll_max_bytes on %d nodes of %d ranks: intra-node rings, inter-node rings per rail", n/l, l)})
		}
		if n > 2 {
			if c == ir.AllReduce {
				for r := range n {
					o := opts(ir.Simple)
					o.Avoid = []int{r}
					es = append(es, &entry{Name: name("dbtree", fmt.Sprintf("avoid%d", r)), Algo: "dbtree", Opts: o,
						Usable: fmt.Sprintf("slow_rank == %d", r), Pref: fmt.Sprint(avoidPref),
						Replaces: ring.Name, Comment: fmt.Sprintf("rank %d slow: double binary tree with rank %d a leaf of both trees", r, r)})
				}
			} else {
				es = append(es, &entry{Name: name("direct"), Algo: "direct", Opts: opts(ir.Simple),
					Pref:     fmt.Sprintf("slow_rank >= 0 && slow_rank < %d ? %d : %d", n, avoidPref, prefFlat),
					Replaces: ring.Name, Comment: "messages above ll_max_bytes with a slow rank: direct exchange, relays through nobody"})
			}
		}
	case ir.AllToAll:
		es = append(es,
			&entry{Name: name("direct", "ll"), Algo: "direct", Opts: opts(ir.LL), MaxBytes: llCap,
				Pref: llPref(), Comment: "messages up to ll_max_bytes: direct, LL"},
			&entry{Name: name("direct"), Algo: "direct", Opts: opts(ir.Simple),
				Pref: fmt.Sprint(prefBase), Comment: "messages above ll_max_bytes: direct, one step, relays through nobody"})
	case ir.Gather, ir.Scatter:
		// Simple even for small messages: see rootedSmall.
		es = append(es, &entry{Name: name("direct"), Algo: "direct", Opts: opts(rootedSmall),
			Pref: fmt.Sprint(prefBase), Comment: "direct: the root talks to every rank, one step, relays through nobody"})
	case ir.Broadcast, ir.Reduce:
		es = append(es, &entry{Name: name("direct"), Algo: "direct", Opts: opts(rootedSmall), MaxBytes: smallMax,
			Pref: fmt.Sprint(prefSmall), Comment: "small messages: the root talks to every rank directly (Simple: see rootedSmall)"})
		tree := &entry{Name: name("tree"), Algo: "tree", Opts: opts(ir.Simple), MinBytes: smallMax + 1, MaxBytes: midMax,
			Pref: tagged(prefBase), Comment: "medium messages: pipelined binary tree"}
		chain := &entry{Name: name("chain"), Algo: "chain", Opts: opts(ir.Simple), MinBytes: midMax + 1,
			Pref: tagged(prefBase), Comment: "large messages: pipelined chain"}
		es = append(es, tree, chain)
		for _, base := range []*entry{tree, chain} {
			p, err := gen.Generate(base.Algo, base.Opts)
			if err != nil {
				return nil, err
			}
			for _, a := range relays(p) {
				o := base.Opts
				o.Avoid = []int{a}
				es = append(es, &entry{Name: base.Name + fmt.Sprintf("_avoid%d", a), Algo: base.Algo, Opts: o,
					MinBytes: base.MinBytes, MaxBytes: base.MaxBytes,
					Usable: fmt.Sprintf("slow_rank >= 0 && slow_rank < %d && %s == %d", n, logical(n), a),
					Pref:   fmt.Sprint(avoidPref), Replaces: base.Name,
					Comment: fmt.Sprintf("slow rank at logical position %d (root-relative): %s with it at a leaf", a, base.Algo)})
			}
		}
	default:
		return nil, fmt.Errorf("no plan for %s", c)
	}
	return es, nil
}

// logical is the policy expression of the slow rank's logical rank in a
// program written for root 0, serving a request with root `root` (ir.md §3:
// physical p runs logical (p - root) mod n).
func logical(n int) string { return fmt.Sprintf("(slow_rank - root + %d) %% %d", n, n) }

// demoted returns e's preference: base, less demote when slow_rank names a
// rank that relays in e's program.
func demoted(e *entry, base int) string {
	if len(e.Relays) == 0 {
		return fmt.Sprint(base)
	}
	set := make([]string, len(e.Relays))
	for i, r := range e.Relays {
		set[i] = fmt.Sprint(r)
	}
	vec := "[" + strings.Join(set, ", ") + "]"
	if e.Opts.Collective.Rooted() {
		n := e.Opts.NRanks
		return fmt.Sprintf("%d - (slow_rank >= 0 && slow_rank < %d && contains(%s, %s) ? %d : 0)", base, n, vec, logical(n), demote)
	}
	return fmt.Sprintf("%d - (contains(%s, slow_rank) ? %d : 0)", base, vec, demote)
}

// divisors are the node sizes L with 1 < L < n dividing n: the multi-node
// shapes the hierarchical schedules serve.
func divisors(n int) []int {
	var ds []int
	for l := 2; l < n; l++ {
		if n%l == 0 {
			ds = append(ds, l)
		}
	}
	return ds
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

// compiled is one entry's bundle and the primitive-level program it runs.
type compiled struct {
	Bundle []byte
	Prog   *ir.Program // legalised (primitive level)
}

// compile runs the compiler pipeline (compiler/passes: verify the input,
// legalise, verify, lower, bundle) on e's program, with its source embedded.
func compile(e *entry) (*compiled, error) {
	st, err := passes.Run(e.Prog, passes.Options{EmbedSource: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name, err)
	}
	if errs := errorsOf(st.Diags); errs != "" {
		return nil, fmt.Errorf("%s: %s", e.Name, errs)
	}
	data, err := bundle.Encode(st.Bundle)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Name, err)
	}
	return &compiled{Bundle: data, Prog: st.Prog}, nil
}

func errorsOf(ds []diag.Diagnostic) string {
	var b strings.Builder
	for _, d := range ds {
		if d.Severity == diag.Error {
			b.WriteString(d.String())
			b.WriteString("; ")
		}
	}
	return b.String()
}

// build produces every file of the default context: name → contents.
func build() (map[string][]byte, []*entry, map[string]*compiled, error) {
	es, err := plan()
	if err != nil {
		return nil, nil, nil, err
	}
	files := map[string][]byte{
		"attribute_manifest.jsonl": []byte(attributeLines),
		SlowRankLog:                nil,
		LLMaxBytesLog:              nil,
	}
	comp := map[string]*compiled{}
	id := map[string]int{}
	var man bytes.Buffer
	for i, e := range es {
		c, err := compile(e)
		if err != nil {
			return nil, nil, nil, err
		}
		comp[e.Name] = c
		files[fileOf(e.Name)] = c.Bundle
		id[e.Name] = i
		l := scheduleLine{File: fileOf(e.Name), Collective: e.Opts.Collective.String(), NRanks: e.Opts.NRanks,
			NLocalRanks: e.Opts.NLocalRanks, MinBytes: e.MinBytes, MaxBytes: e.MaxBytes, Usable: e.Usable,
			Preference: e.Pref, Name: e.Name, Comment: e.Comment}
		if e.Replaces != "" {
			r := id[e.Replaces]
			l.Replaces = &r
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(l); err != nil {
			return nil, nil, nil, err
		}
		man.Write(b.Bytes())
	}
	files["schedule_manifest.jsonl"] = man.Bytes()
	return files, es, comp, nil
}
