package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/internal/netnstest"
)

// TestNetworkNamespaces runs the ring of TestRing with each rank in its
// own network namespace, joined by a veth pair (two "nodes" that share no
// interface but the pair): the bootstrap and UCX's TCP both go over it.
// It needs root and iproute2; elsewhere it skips, saying so.
func TestNetworkNamespaces(t *testing.T) {
	needUCX(t)
	p := netnstest.New(t, "th", 231)
	p0 := startRank(t, 0, p.Exec(0), []string{rankEnv + "=0/2/ring/new", "MSCCLPP_SOCKET_IFNAME=" + p.Dev[0]})
	l := p0.next(t, time.Minute)
	id := field(l, "id")
	if !strings.HasPrefix(l, "MP id ") || id == "" {
		t.Fatalf("rank 0: %s\n%s", l, p0.output())
	}
	p1 := startRank(t, 1, p.Exec(1), []string{fmt.Sprintf("%s=1/2/ring/%s", rankEnv, id), "MSCCLPP_SOCKET_IFNAME=" + p.Dev[1]})
	lines := expectOK(t, []*rankProc{p0, p1}, 3*time.Minute)
	for i, l := range lines {
		if want := "tcp/" + p.Dev[i]; !strings.Contains(quoted(l, "net"), want) {
			t.Errorf("rank %d: transport %q, want %s", i, quoted(l, "net"), want)
		}
	}
	t.Log(lines)
}
