package cuda

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// TestP2PRebaseArgs: RebaseP2P's launch is a copy of the prepared one's
// argument whose buffer offsets (buf[0], buf[1]) moved, composing with a
// rebase of a rebase, and nothing else: the original is unchanged, the copy
// owns no memory. A module without the offsets (no P2PBasesName) and
// launches that are not point-to-point ones are refused. No GPU needed.
func TestP2PRebaseArgs(t *testing.T) {
	b := &Backend{}
	p := &prepared{b: b, arg: newLaunch(), grid: 64, threads: 256, p2pBases: true}
	fillLaunch(p.arg, launchFields{rank: 1, nranks: 2, launch: 1, elemSize: 1})
	fillP2P(p.arg, 0x7000)
	orig := *p.arg
	q, err := b.RebaseP2P(p, 4096, -24)
	if err != nil {
		t.Fatal(err)
	}
	qp := q.(*prepared)
	if s, r := p2pBasesOf(qp.arg); s != 4096 || r != -24 {
		t.Errorf("rebased offsets %d, %d, want 4096, -24", s, r)
	}
	if *p.arg != orig {
		t.Error("RebaseP2P changed the prepared launch's argument")
	}
	q2, err := b.RebaseP2P(q, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	q2p := q2.(*prepared)
	if s, r := p2pBasesOf(q2p.arg); s != 4104 || r != -16 {
		t.Errorf("offsets after two rebases %d, %d, want 4104, -16", s, r)
	}
	same := *q2p.arg
	moveP2PBases(&same, -4104, 16)
	if same != orig {
		t.Error("a rebased argument differs from the prepared one beyond its buffer offsets")
	}
	if qp.grid != p.grid || qp.threads != p.threads || len(qp.mem) != 0 || !qp.p2pBases {
		t.Errorf("rebased launch: grid %d threads %d, %d allocations, bases %v; want %d, %d, none, true", qp.grid, qp.threads, len(qp.mem), qp.p2pBases, p.grid, p.threads)
	}
	old := &prepared{b: b, arg: newLaunch()}
	fillP2P(old.arg, 0x7000)
	if _, err := b.RebaseP2P(old, 8, 8); !errors.Is(err, device.ErrNotRebasable) {
		t.Errorf("rebase of a launch of a module without %s: %v, want ErrNotRebasable", P2PBasesName, err)
	}
	coll := &prepared{b: b, arg: newLaunch(), p2pBases: true}
	if _, err := b.RebaseP2P(coll, 8, 8); err == nil || errors.Is(err, device.ErrNotRebasable) {
		t.Errorf("rebase of a launch that is not point-to-point: %v, want an error", err)
	}
}
