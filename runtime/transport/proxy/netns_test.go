package proxy

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestNetworkNamespaces runs the ring of TestRing with each rank in its
// own network namespace, joined by a veth pair (two "nodes" that share no
// interface but the pair): the bootstrap and UCX's TCP both go over it.
// It needs root and iproute2; elsewhere it skips, saying so.
func TestNetworkNamespaces(t *testing.T) {
	needUCX(t)
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip (iproute2)")
	}
	tag := fmt.Sprintf("th%d", os.Getpid()%100000)
	ns := []string{tag + "a", tag + "b"}
	dev := []string{tag + "x", tag + "y"}
	subnet := fmt.Sprintf("10.231.%d", os.Getpid()%250)
	run := func(args ...string) error {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		for _, n := range ns {
			exec.Command(ip, "netns", "del", n).Run() // removes its end of the pair
		}
	})
	setup := [][]string{
		{"netns", "add", ns[0]}, {"netns", "add", ns[1]},
		{"link", "add", dev[0], "type", "veth", "peer", "name", dev[1]},
		{"link", "set", dev[0], "netns", ns[0]}, {"link", "set", dev[1], "netns", ns[1]},
	}
	for i := range 2 {
		setup = append(setup, []string{"-n", ns[i], "addr", "add", fmt.Sprintf("%s.%d/24", subnet, i+1), "dev", dev[i]},
			[]string{"-n", ns[i], "link", "set", dev[i], "up"}, []string{"-n", ns[i], "link", "set", "lo", "up"})
	}
	for _, a := range setup {
		if err := run(a...); err != nil {
			if a[0] == "netns" && a[1] == "add" {
				t.Skipf("cannot make network namespaces here: %v", err)
			}
			t.Fatal(err)
		}
	}
	wrap := func(i int) []string { return []string{ip, "netns", "exec", ns[i]} }
	p0 := startRank(t, 0, wrap(0), []string{rankEnv + "=0/2/ring/new", "MSCCLPP_SOCKET_IFNAME=" + dev[0]})
	l := p0.next(t, time.Minute)
	id := field(l, "id")
	if !strings.HasPrefix(l, "MP id ") || id == "" {
		t.Fatalf("rank 0: %s\n%s", l, p0.output())
	}
	p1 := startRank(t, 1, wrap(1), []string{fmt.Sprintf("%s=1/2/ring/%s", rankEnv, id), "MSCCLPP_SOCKET_IFNAME=" + dev[1]})
	lines := expectOK(t, []*rankProc{p0, p1}, 3*time.Minute)
	for i, l := range lines {
		if want := "tcp/" + dev[i]; !strings.Contains(quoted(l, "net"), want) {
			t.Errorf("rank %d: transport %q, want %s", i, quoted(l, "net"), want)
		}
	}
	t.Log(lines)
}
