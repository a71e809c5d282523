package selector

import (
	"context"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// The p2p entries: before the first epoch none is visible; the best usable
// one of the communicator's shape wins; an entry published later is chosen
// once an epoch installs it (the hot swap) and not before; choosing takes
// no agreement step and counts no request.
func TestP2PSelection(t *testing.T) {
	h := newHarness(t)
	h.standardAttrs()
	h.attr(`{"name":"wide","type":"bool","origin":"exo","default":false}`)
	h.sched(`{"file":"a.json","collective":"allreduce","nranks":8}`)
	h.file("a.json", allreduce8())
	h.sched(`{"gen":"p2p","collective":"sendrecv","chunk_bytes":65536,"preference":"1","name":"base"}`)
	h.sched(`{"gen":"p2p","collective":"sendrecv","nlocalranks":4,"channels":8,"preference":"5","name":"four per node"}`)
	h.sched(`{"gen":"p2p","collective":"sendrecv","channels":16,"usable":"wide","preference":"9","name":"wide"}`)
	h.sched(`{"gen":"p2p","collective":"sendrecv","nranks":2,"channels":2,"preference":"nranks * 10","name":"pairs"}`)
	if c := h.s.P2P(8, 8); c.ID != None {
		t.Fatalf("before any epoch: %+v, want None", c)
	}
	if err := h.s.Prime(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := h.s.Stats()
	for _, c := range []struct {
		nranks, nlocal int
		want           string
	}{{8, 8, "base"}, {8, 4, "four per node"}, {2, 2, "pairs"}} {
		if got := h.s.P2P(c.nranks, c.nlocal); got.Name != c.want || got.Entry == nil {
			t.Errorf("%d ranks, %d per node: %+v, want %q", c.nranks, c.nlocal, got, c.want)
		}
	}
	h.value("wide", `{"value":true}`)
	if got := h.s.P2P(8, 8); got.Name != "base" {
		t.Errorf("before the next epoch: %q", got.Name)
	}
	if after := h.s.Stats(); after.Requests != st.Requests || after.Agreements != st.Agreements || after.Epochs != st.Epochs {
		t.Errorf("P2P took steps: %+v then %+v", st, after)
	}
	h.sel(req(ir.AllReduce, 100)) // (Prime ran the first epoch: this request is the period's last)
	h.sel(req(ir.AllReduce, 100)) // check period 1: an epoch
	if got := h.s.P2P(8, 8); got.Name != "wide" || got.Entry.Channels != 16 {
		t.Errorf("after the epoch: %+v", got)
	}
}
