package publish

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtext"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// proveBundle checks what the runtime's loader does not about a bundle
// (name, the file's bytes data), as `theseusc lint` does and more:
//
//   - a bundle that embeds its source: the source is proven with every
//     check of compiler/verify (structure, synchronisation, deadlock
//     freedom, races, the collective's postcondition), whatever the
//     bundle's verified flag claims (the flag is a header bit, outside the
//     bundle's ID);
//   - a bundle that is not verified (theseusc compile --skip verify-input):
//     the runtime would run its tables after the cross-rank table checks
//     only, so its source must also compile, with this build's compiler,
//     to exactly these tables (the same bundle ID); one without a source
//     cannot be proven and is refused.
//
// A verified bundle without a source is accepted as the runtime accepts it.
func proveBundle(name string, data []byte) *Rejection {
	b, err := bundle.Decode(data)
	if err != nil {
		r := reject(api.ReasonInvalidSchedule, "%s: %v", name, err)
		r.Diagnostics = []diag.Diagnostic{load.BundleDiag(name, err)}
		return r
	}
	if b.Source == nil {
		if b.Verified {
			return nil
		}
		return reject(api.ReasonInvalidSchedule, "%s was compiled without verification (theseusc compile --skip) and carries no source: "+
			"nothing proves it deadlock- and race-free or that it computes its collective; compile it with verification, or with --embed-source so that it can be proven here", name)
	}
	p, ds := irtext.Parse(name+load.SourceSuffix, b.Source)
	if rej := diagRejection(name, "its embedded source does not parse", ds); rej != nil {
		return rej
	}
	nb, ds, err := passes.Compile(p, passes.Options{})
	if err != nil {
		return reject(api.ReasonInvalidSchedule, "%s: compiling its embedded source: %v", name, err)
	}
	if rej := diagRejection(name, "its embedded source fails verification: the runtime would run a schedule that is wrong, races or deadlocks", ds); rej != nil {
		return rej
	}
	if b.Verified {
		return nil // proven where it was built; its source is proven again above
	}
	id, err1 := b.ID()
	nid, err2 := nb.ID()
	if err := errors.Join(err1, err2); err != nil {
		return reject(api.ReasonInvalidSchedule, "%s: %v", name, err)
	}
	if id != nid {
		return reject(api.ReasonInvalidSchedule, "%s was compiled without verification and its tables are not what its embedded source compiles to (bundle %s, the source's %s): "+
			"recompile it with this theseusc, without --skip", name, shortID(id), shortID(nid))
	}
	return nil
}

func shortID(id bundle.ID) string {
	s := id.String()
	if len(s) > 16 {
		s = s[:16]
	}
	return s
}

// diagRejection rejects with the error diagnostics of ds (nil when none).
func diagRejection(name, why string, ds []diag.Diagnostic) *Rejection {
	var errs []diag.Diagnostic
	for _, d := range ds {
		if d.Severity == diag.Error {
			errs = append(errs, d)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	r := reject(api.ReasonInvalidSchedule, "%s: %s", name, why)
	r.Diagnostics = errs
	return r
}

// checkGenerated rejects generated entry e (line n of the schedule
// manifest) when the runtime could never use it: its channel expression
// does not compile under the runtime's rules (selector.CompileChannels: an
// integer, or an expression over request.nranks and request.nlocalranks
// only), or its generator serves none of the communicator shapes the entry
// admits (selector.GenCheck, the generator's own check: its nranks with its
// nlocalranks, or, where the entry leaves them open, any).
func checkGenerated(m *Model, e *manifest.Schedule, n, maxVec int) *Rejection {
	if e.Gen == nil {
		return nil // a "gen": "p2p" entry: parameters, no program
	}
	prog, k, ds := selector.CompileChannels(e.Gen, m, manifest.ScheduleManifest, n, maxVec)
	if prog == nil && k == 0 {
		rej := diagRejection("the generated entry", "its channels do not compile", ds)
		if rej == nil {
			rej = reject(api.ReasonBadExpression, "the generated entry's channels do not compile")
		}
		rej.Reason = api.ReasonBadExpression
		for _, d := range ds {
			rej.ModelDependent = rej.ModelDependent || d.Code == diag.PolicyUnknown
		}
		return rej
	}
	if err := genServes(e, prog, k); err != nil {
		return reject(api.ReasonInvalidSchedule, "the generated entry %s can serve no communicator: %v; the runtime would never select it", e.Gen, err)
	}
	return nil
}

// genServes is nil when e's generator serves some communicator shape e
// admits and its channels (CompileChannels' prog, or the literal k)
// evaluate there (selector.ChannelsAt), else the reason at the first shape
// tried. With nranks N: N
// ranks, nlocalranks L per node (the hierarchical generator: any divisor
// of N when the entry gives none); without: 1 to 64 ranks, then powers of
// two up to ir.MaxRanks (multiples of L when the entry gives it).
func genServes(e *manifest.Schedule, prog *bc.Program, k int) error {
	hier := gen.Canonical(e.Gen.Algorithm) == "hier"
	var first error
	try := func(n, l int) bool {
		err := selector.GenCheck(e, n, l)
		if err == nil {
			_, err = selector.ChannelsAt(e.Gen, prog, k, n, l)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("at %d ranks (%d per node): %w", n, l, err)
		}
		return err == nil
	}
	// layouts lists the nlocalranks tried at n ranks.
	layouts := func(n int) []int {
		switch {
		case e.NLocalRanks > 0:
			return []int{e.NLocalRanks}
		case !hier:
			return []int{n}
		}
		var ls []int
		for l := n - 1; l >= 1; l-- { // several nodes first: what hier is for
			if n%l == 0 {
				ls = append(ls, l)
			}
		}
		return append(ls, n)
	}
	var sizes []int
	if e.NRanks > 0 {
		sizes = []int{e.NRanks}
	} else {
		for n := 1; n <= 64; n++ {
			sizes = append(sizes, n)
		}
		for n := 128; n <= ir.MaxRanks; n *= 2 {
			sizes = append(sizes, n)
		}
		if l := e.NLocalRanks; l > 0 {
			sizes = sizes[:0]
			for k := 1; k <= 64 && k*l <= ir.MaxRanks; k++ {
				sizes = append(sizes, k*l)
			}
		}
	}
	for _, n := range sizes {
		ls := layouts(n)
		if e.NRanks == 0 && hier && e.NLocalRanks == 0 && len(ls) > 8 {
			ls = append(ls[:4], ls[len(ls)-4:]...) // enough to find one
		}
		for _, l := range ls {
			if try(n, l) {
				return nil
			}
		}
	}
	if e.NRanks == 0 && first != nil {
		return fmt.Errorf("none of 1 to %d ranks; %w", ir.MaxRanks, first)
	}
	return first
}

// hasControl reports whether s holds a character a terminal acts on (C0
// and C1 controls, DEL) or one that reorders what is displayed (the
// Unicode bidirectional controls), or is not valid UTF-8: what names,
// comments and descriptions may not hold, since list, show and theseusc
// select print them.
func hasControl(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			return true
		case r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
			return true
		}
	}
	return false
}
