package comm

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// namedBackend is a backend that only has a name (crossNode reads no more).
type namedBackend struct {
	device.Backend
	name string
}

func (b namedBackend) Name() string { return b.name }

// TestP2PAcrossNodesBackends: point-to-point between ranks of different
// nodes is refused on CUDA (the kernel's engine has no port channels yet:
// ncclInvalidUsage naming the pair and their nodes) and left to the
// executor's port-channel connections on the host backend; ranks of one
// node are never refused.
func TestP2PAcrossNodesBackends(t *testing.T) {
	for _, tc := range []struct {
		backend string
		peer    int
		refused bool
	}{
		{"cuda", 2, true}, {"cuda", 3, true}, {"cuda", 1, false},
		{"host", 2, false}, {"host", 1, false},
	} {
		c := &Comm{cfg: Config{Backend: namedBackend{name: tc.backend}}, rank: 1, perNode: 2}
		if got := c.crossNode(tc.peer); got != tc.refused {
			t.Errorf("%s: crossNode(%d) = %v, want %v", tc.backend, tc.peer, got, tc.refused)
		}
	}
	c := &Comm{cfg: Config{Backend: namedBackend{name: "cuda"}}, rank: 1, perNode: 2}
	err := c.crossNodeErr("ncclSend", 2)
	var e *Error
	if !errors.As(err, &e) || e.Code != InvalidUsage || !cmp.Equal(e.Peers, []int{2}) {
		t.Fatalf("%v, want ncclInvalidUsage naming rank 2", err)
	}
	for _, want := range []string{"rank 1 (node 0)", "rank 2 (node 1)", "CUDA backend", "docs/p2p.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
