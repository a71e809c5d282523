package verify

import (
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// NeedsLaunchFence reports whether the runtime must fence every launch of
// p (optable.Table.FenceLaunches): the verifier found a race that only
// consecutive iterations can have (TS0206, a warning) on a Simple program.
// LL launches are always fenced; a Simple program is not sliced unless its
// slice bytes allow it, but consecutive launches of one shape are not
// fenced by default, so the race would happen between them
// (docs/known-issues.md §14). ds are the program's diagnostics.
func NeedsLaunchFence(p *ir.Program, ds []diag.Diagnostic) bool {
	if p == nil || p.Protocol == ir.LL {
		return false
	}
	for _, d := range ds {
		if d.Code == diag.RaceAcrossLaunch {
			return true
		}
	}
	return false
}
