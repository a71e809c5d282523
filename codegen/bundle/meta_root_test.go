package bundle

import (
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// TestMetaDropsIgnoredRoot: a root on a collective without one is ignored
// (the verifier warns, TS0114), so compile must not fail on it.
func TestMetaDropsIgnoredRoot(t *testing.T) {
	m := MetaOf(&ir.Program{Collective: ir.AllReduce, NRanks: 2, Root: 1})
	if m.Root != -1 {
		t.Errorf("allreduce root %d, want -1", m.Root)
	}
	m = MetaOf(&ir.Program{Collective: ir.Broadcast, NRanks: 2, Root: 1})
	if m.Root != 1 {
		t.Errorf("broadcast root %d, want 1", m.Root)
	}
}
