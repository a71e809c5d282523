package schedfile

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"weak"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/speckernels"
)

// Generated entries (docs/selection-context.md §5.5). A generated
// schedule is built once per shape and process:
//
//  1. the generator writes the whole program for the communicator's
//     shape, with the most channels it accepts (halving from the entry's);
//  2. compiler/verify proves it with every check, as `theseusc compile`'s
//     verify-input does (the whole program: a rank's deadlock freedom and
//     the collective's postcondition are properties of all ranks);
//  3. the legaliser's analysis (legalize.Prepare) fixes every rank's
//     channel ends and scratch slots, from which the resource summary of
//     every rank is known without writing any rank's primitives.
//
// The bundle is a bundle.NewLazy one, shared by the process's ranks of
// that shape: a rank's section is written only when that rank's table is
// asked for — the calling rank's at load time, another logical rank's when
// a rooted collective's root rotation needs it — by legalising that rank
// alone (Plan.Rank) and lowering it (optable.LowerRankBinary) against the
// other ranks' channel ends and buffers (Plan.Skeleton). Bundle.Table then
// checks the table against the summary. The whole legalised program is
// never built: at 1024 ranks a ring allreduce's is 6.3 M primitives.
//
// The pipeline's cheap post-legalisation checks (structure and
// synchronisation of the legalised program) need every rank's primitives,
// so this path does without them; TestGeneratedMatchesCompile shows that it
// writes exactly the tables and summaries `theseusc compile` writes.

// genKey identifies one generated program: the recipe, resolved for a
// shape.
type genKey struct {
	algo     string // canonical name
	coll     ir.Collective
	proto    ir.Protocol
	channels int // the most asked for
	n, l     int
	avoid    string
}

// genShape is the cache entry of one genKey.
type genShape struct {
	once sync.Once
	err  error
	info *selector.ScheduleInfo
	k    int // the channels used

	mu     sync.Mutex
	strong *genSource              // kept for small programs
	weak   weak.Pointer[genSource] // for large ones: rebuilt when collected
	fence  bool                    // every launch fenced (verify.NeedsLaunchFence)
	// selfFenced: an LL program whose repeated launches need no fence
	// (verify.SelfFencedLL).
	selfFenced bool
	key        genKey
	avoid      []int
}

// genSource is what writing one rank's section needs.
type genSource struct {
	p    *ir.Program    // as generated (verified)
	plan *legalize.Plan // nil when p is already primitive-level
	skel *ir.Program    // every rank without threadblocks (p itself when primitive)
}

// keepOps is the program size (ops) up to which a shape keeps its
// generated program for the sections not written yet; a larger one is
// generated again when one is asked for (without verifying again).
const keepOps = 1 << 18

var genCache sync.Map // genKey -> *genShape

// noAvoid is genKey.avoid of a shape that avoids no rank.
var noAvoid = fmt.Sprint([]int(nil))

// generated builds (or finds) req's generated schedule and writes
// req.Rank's section. Errors: the generator's (for no channel count it
// accepts), an *Error with the verifier's diagnostics, or a failure to
// write or check the rank's table.
func generated(req selector.LoadRequest) (*selector.ScheduleInfo, error) {
	g := req.Gen
	algo := gen.Canonical(g.Algorithm)
	if algo == "" {
		_, err := gen.Generate(g.Algorithm, gen.Options{})
		return nil, err
	}
	key := genKey{algo: algo, coll: req.Collective, proto: g.Protocol, channels: max(g.Channels, 1),
		n: req.NRanks, l: g.NLocalRanks, avoid: fmt.Sprint(g.Avoid)}
	v, _ := genCache.LoadOrStore(key, &genShape{key: key, avoid: slices.Clone(g.Avoid)})
	sh := v.(*genShape)
	var src *genSource // the builder holds its source until its rank's section is written
	sh.once.Do(func() { sh.info, src, sh.err = sh.build(req.Path) })
	if sh.err != nil {
		return nil, sh.err
	}
	b := sh.info.Artifact.(*bundle.Bundle)
	if req.Rank >= 0 && req.Rank < b.Meta.NRanks {
		if _, err := b.Table(req.Rank); err != nil {
			return nil, fmt.Errorf("%s: rank %d: %w", req.Path, req.Rank, err)
		}
	}
	runtime.KeepAlive(src)
	info := *sh.info
	return &info, nil
}

// options is the generator's options for k channels.
func (sh *genShape) options(k int) gen.Options {
	return gen.Options{Collective: sh.key.coll, NRanks: sh.key.n, NLocalRanks: sh.key.l, Protocol: sh.key.proto,
		Channels: k, Avoid: slices.Clone(sh.avoid)}
}

// build generates and verifies the program and returns its ScheduleInfo,
// whose Artifact is the lazy bundle, and the source its sections are
// written from.
func (sh *genShape) build(label string) (*selector.ScheduleInfo, *genSource, error) {
	var p *ir.Program
	var err error
	for k := sh.key.channels; ; k /= 2 {
		p, err = gen.Generate(sh.key.algo, sh.options(k))
		if err == nil {
			sh.k = k
			break
		}
		if !errors.Is(err, gen.ErrOptions) || k <= 1 {
			return nil, nil, fmt.Errorf("%s: %w", label, err)
		}
	}
	ds := verify.Verify(p, verify.Options{})
	if err := errorsOf(label, ds); err != nil {
		return nil, nil, err
	}
	sh.fence = verify.NeedsLaunchFence(p, ds)
	sh.selfFenced = !sh.fence && verify.SelfFencedLL(p, ds)
	src, err := newGenSource(p, label)
	if err != nil {
		return nil, nil, err
	}
	ranks := make([]bundle.RankResources, p.NRanks)
	for r := range ranks {
		sk := &src.skel.Ranks[r]
		ranks[r] = bundle.RankResources{Chunks: sk.Chunks, Registrations: bundle.Registrations(&p.Ranks[r])}
		ranks[r].Channels = make([]bundle.ChannelEnd, len(sk.Channels))
		for c, ch := range sk.Channels {
			ranks[r].Channels[c] = bundle.ChannelEnd{Peer: ch.Peer, PeerChannel: ch.PeerChannel, Type: ch.Type, Init: ch.Init}
		}
	}
	if p.NumOps() <= keepOps {
		sh.strong = src
	} else {
		sh.weak = weak.Make(src)
	}
	b, err := bundle.NewLazy(bundle.MetaOf(src.skel), ranks, true, sh.section)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", label, err)
	}
	sh.prebuilt(b)
	m := b.Meta
	return &selector.ScheduleInfo{Collective: m.Collective, NRanks: m.NRanks, NLocalRanks: m.NLocalRanks,
		MinBytes: m.MinBytes, MaxBytes: m.MaxBytes, InPlace: m.InPlace, OutOfPlace: m.OutOfPlace,
		Protocol: m.Protocol, Artifact: b}, src, nil
}

// prebuilt gives b the prebuilt specialised kernels of its shape
// (runtime/speckernels), when there are any: a rank's kernel is used only
// if its table is the one the kernel was built from.
func (sh *genShape) prebuilt(b *bundle.Bundle) {
	if sh.key.avoid != noAvoid {
		return
	}
	set := speckernels.Lookup(speckernels.Shape{Algo: sh.key.algo, Coll: sh.key.coll, Proto: sh.key.proto, Channels: sh.k, NRanks: sh.key.n, NLocalRanks: sh.key.l})
	if set == nil {
		return
	}
	b.SetKernelSource(func(rank int, dt ir.DataType) ([]byte, error) {
		tab, err := b.TableBytes(rank)
		if err != nil {
			return nil, err
		}
		return set.Kernel(rank, dt, tab)
	})
}

// GeneratedTables returns every rank's op table of the generated schedule
// of algo for shape (coll, proto, the most channels asked for, n ranks of
// which l share a node), as a generated entry writes them: what
// runtime/speckernels' kernels are built from (cmd/internal/genspec) and
// checked against. Errors: as a generated entry's.
func GeneratedTables(algo string, coll ir.Collective, proto ir.Protocol, channels, n, l int) ([][]byte, error) {
	canon := gen.Canonical(algo)
	if canon == "" {
		return nil, fmt.Errorf("schedfile: no generator %q", algo)
	}
	sh := &genShape{key: genKey{algo: canon, coll: coll, proto: proto, channels: max(channels, 1), n: n, l: l, avoid: noAvoid}}
	info, src, err := sh.build(algo)
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(src)
	b := info.Artifact.(*bundle.Bundle)
	tabs := make([][]byte, n)
	for r := range tabs {
		if tabs[r], err = b.TableBytes(r); err != nil {
			return nil, err
		}
	}
	return tabs, nil
}

// newGenSource prepares p's legalisation (when p has transfer ops).
func newGenSource(p *ir.Program, label string) (*genSource, error) {
	if p.Level() != ir.LevelTransfer {
		return &genSource{p: p, skel: p}, nil
	}
	plan, ds := legalize.Prepare(p)
	if plan == nil {
		if err := errorsOf(label, ds); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: legalisation failed", label)
	}
	return &genSource{p: p, plan: plan, skel: plan.Skeleton()}, nil
}

// source returns the generated program and its plan, generating them again
// (with the channels build chose; no verification: this shape passed) when
// a large program's were collected.
func (sh *genShape) source() (*genSource, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.strong != nil {
		return sh.strong, nil
	}
	if src := sh.weak.Value(); src != nil {
		return src, nil
	}
	p, err := gen.Generate(sh.key.algo, sh.options(sh.k))
	if err != nil {
		return nil, err
	}
	src, err := newGenSource(p, p.Name)
	if err != nil {
		return nil, err
	}
	sh.weak = weak.Make(src)
	return src, nil
}

// section writes rank r's table and threadblock summary (bundle.NewLazy's
// build).
func (sh *genShape) section(r int) ([]byte, []bundle.TBSummary, error) {
	src, err := sh.source()
	if err != nil {
		return nil, nil, err
	}
	var rk ir.Rank
	q := src.skel
	if src.plan != nil {
		rk = src.plan.Rank(r)
		qq := *src.skel
		qq.Ranks = slices.Clone(src.skel.Ranks)
		qq.Ranks[r] = rk
		q = &qq
	} else {
		rk = src.p.Ranks[r]
	}
	raw, err := optable.LowerRankBinary(q, r)
	if err != nil {
		var d diag.Diagnostic
		if errors.As(err, &d) {
			return nil, nil, &Error{Path: src.p.Name, Diags: []diag.Diagnostic{d}}
		}
		return nil, nil, err
	}
	if sh.fence {
		if err := optable.MarkFence(raw); err != nil {
			return nil, nil, err
		}
	} else if sh.selfFenced {
		if err := optable.MarkSelfFenced(raw); err != nil {
			return nil, nil, err
		}
	}
	return raw, bundle.SummarizeRank(&rk).TBs, nil
}
