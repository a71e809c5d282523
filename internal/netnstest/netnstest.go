// Package netnstest makes two network namespaces joined by a veth pair for
// tests that run "nodes" that share no interface but the pair (the
// cross-node transport's tests). It needs root and iproute2: elsewhere the
// test skips, saying so.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Pair is two namespaces and the ends of the veth pair between them.
type Pair struct {
	// IP is the ip command; NS the namespaces, Dev the pair's ends (Dev[i]
	// in NS[i]) and Addr their addresses (10.x.y.1 and .2, /24).
	IP   string
	NS   [2]string
	Dev  [2]string
	Addr [2]string
}

// Exec is the command prefix that runs a program in namespace i.
func (p *Pair) Exec(i int) []string { return []string{p.IP, "netns", "exec", p.NS[i]} }

// New makes the pair, named after tag and the process id, and removes it at
// the test's cleanup. It skips the test when not root, without ip, or when
// the namespaces cannot be made.
func New(t testing.TB, tag string, subnet int) *Pair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip (iproute2)")
	}
	id := fmt.Sprintf("%s%d", tag, os.Getpid()%100000)
	net := fmt.Sprintf("10.%d.%d", subnet, os.Getpid()%250)
	p := &Pair{IP: ip, NS: [2]string{id + "a", id + "b"}, Dev: [2]string{id + "x", id + "y"}, Addr: [2]string{net + ".1", net + ".2"}}
	run := func(args ...string) error {
		if out, err := exec.Command(ip, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		for _, n := range p.NS {
			exec.Command(ip, "netns", "del", n).Run() // removes its end of the pair
		}
	})
	setup := [][]string{
		{"netns", "add", p.NS[0]}, {"netns", "add", p.NS[1]},
		{"link", "add", p.Dev[0], "type", "veth", "peer", "name", p.Dev[1]},
		{"link", "set", p.Dev[0], "netns", p.NS[0]}, {"link", "set", p.Dev[1], "netns", p.NS[1]},
	}
	for i := range 2 {
		setup = append(setup, []string{"-n", p.NS[i], "addr", "add", p.Addr[i] + "/24", "dev", p.Dev[i]},
			[]string{"-n", p.NS[i], "link", "set", p.Dev[i], "up"}, []string{"-n", p.NS[i], "link", "set", "lo", "up"})
	}
	for _, a := range setup {
		if err := run(a...); err != nil {
			if a[0] == "netns" && a[1] == "add" {
				t.Skipf("cannot make network namespaces here: %v", err)
			}
			t.Fatal(err)
		}
	}
	return p
}
