package ucx

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/runtime/env"
)

func fakeSettings(t *testing.T, vars map[string]string, ifs, rdma []string) {
	t.Helper()
	t.Cleanup(env.SetLookupForTest(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }))
	oi, or, ol := listInterfaces, listRDMAPorts, lookupEnv
	listInterfaces = func() ([]string, error) { return ifs, nil }
	listRDMAPorts = func() []string { return rdma }
	lookupEnv = func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	t.Cleanup(func() { listInterfaces, listRDMAPorts, lookupEnv = oi, or, ol })
}

// fakeVersion makes Settings see UCX 1.minor loaded.
func fakeVersion(t *testing.T, minor uint) {
	ov := loadedVersion
	loadedVersion = func() (uint, uint, uint) { return 1, minor, 0 }
	t.Cleanup(func() { loadedVersion = ov })
}

func TestSettings(t *testing.T) {
	ifs := []string{"lo", "eth0", "eth1", "ib0"}
	rdma := []string{"mlx5_0:1", "mlx5_1:1"}
	cases := []struct {
		name string
		vars map[string]string
		o    Options
		want []Setting
	}{
		{"none", nil, Options{LocalRank: 1, LocalRanks: 2}, nil},
		{"hca", map[string]string{"MSCCLPP_HCA_DEVICES": "mlx5_0, mlx5_1"}, Options{LocalRank: 1, LocalRanks: 2},
			[]Setting{{Key: "NET_DEVICES", Value: "mlx5_1:1", From: "MSCCLPP_HCA_DEVICES[1]"}}},
		{"hca port", map[string]string{"THESEUS_HCA_DEVICES": "mlx5_0:2"}, Options{LocalRanks: 1},
			[]Setting{{Key: "NET_DEVICES", Value: "mlx5_0:2", From: "THESEUS_HCA_DEVICES[0]"}}},
		{"ifname keeps rdma", map[string]string{"MSCCLPP_SOCKET_IFNAME": "eth"}, Options{},
			[]Setting{{Key: "NET_DEVICES", Value: "mlx5_0:1,mlx5_1:1,eth0,eth1", From: "MSCCLPP_SOCKET_IFNAME"}}},
		{"hca and ifname", map[string]string{"MSCCLPP_SOCKET_IFNAME": "lo", "MSCCLPP_HCA_DEVICES": "mlx5_0,mlx5_1"}, Options{LocalRank: 0, LocalRanks: 2},
			[]Setting{{Key: "NET_DEVICES", Value: "mlx5_0:1,lo", From: "MSCCLPP_HCA_DEVICES[0], MSCCLPP_SOCKET_IFNAME"}}},
		{"explicit UCX wins", map[string]string{"MSCCLPP_SOCKET_IFNAME": "lo", "UCX_NET_DEVICES": "eth0"}, Options{},
			[]Setting{{Key: "NET_DEVICES", Value: "mlx5_0:1,mlx5_1:1,lo", From: "MSCCLPP_SOCKET_IFNAME", Kept: true}}},
		{"family and gid", map[string]string{"MSCCLPP_SOCKET_FAMILY": "af_inet6", "MSCCLPP_GID_INDEX": "3"}, Options{},
			[]Setting{{Key: "TCP_AF_PRIO", Value: "inet6", From: "MSCCLPP_SOCKET_FAMILY", Env: true},
				{Key: "IB_GID_INDEX", Value: "3", From: "MSCCLPP_GID_INDEX", Env: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fakeSettings(t, c.vars, ifs, rdma)
			fakeVersion(t, 13)
			got, err := Settings(c.o)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, withoutTCPSegs(got)); d != "" {
				t.Fatalf("settings (-want +got):\n%s", d)
			}
		})
	}
}

// withoutTCPSegs drops the TCP segment settings (TestTCPSegments).
func withoutTCPSegs(ss []Setting) []Setting {
	var out []Setting
	for _, s := range ss {
		if s.Key != "TCP_TX_SEG_SIZE" && s.Key != "TCP_RX_SEG_SIZE" {
			out = append(out, s)
		}
	}
	return out
}

// TestTCPSegments: both TCP segment sizes are TCPSegSize unless either is
// set explicitly: an explicit RX keeps both of UCX's; an explicit TX alone
// keeps TX and gives RX TCPSegSize or the TX size if larger (UCX's 64 KiB
// RX would refuse a larger TX segment), UCX's RX for a TX that is no
// plain size.
func TestTCPSegments(t *testing.T) {
	from := "Theseus: puts over TCP in larger segments"
	atLeast := from + ", at least UCX_TCP_TX_SEG_SIZE"
	for _, c := range []struct {
		vars       map[string]string
		kept       bool
		rx, rxFrom string // RX's setting when not kept with TX
		tx, txFrom string // TX's setting when not kept with RX
	}{{vars: nil}, {vars: map[string]string{"UCX_TCP_TX_SEG_SIZE": "8k"}, kept: true, rx: TCPSegSize, rxFrom: atLeast},
		{vars: map[string]string{"UCX_TCP_TX_SEG_SIZE": "512k"}, kept: true, rx: "524288", rxFrom: atLeast},
		{vars: map[string]string{"UCX_TCP_TX_SEG_SIZE": "262144"}, kept: true, rx: TCPSegSize, rxFrom: atLeast},
		{vars: map[string]string{"UCX_TCP_TX_SEG_SIZE": "inf"}, kept: true},
		{vars: map[string]string{"UCX_TCP_RX_SEG_SIZE": "1m"}, kept: true, tx: TCPSegSize, txFrom: from + ", within UCX_TCP_RX_SEG_SIZE"},
		{vars: map[string]string{"UCX_TCP_RX_SEG_SIZE": "128k"}, kept: true},
		{vars: map[string]string{"UCX_TCP_TX_SEG_SIZE": "1m", "UCX_TCP_RX_SEG_SIZE": "1m"}, kept: true},
		// Inherited from a parent whose context set them: not explicit.
		{vars: map[string]string{"UCX_TCP_TX_SEG_SIZE": TCPSegSize, "UCX_TCP_RX_SEG_SIZE": TCPSegSize}}} {
		fakeSettings(t, c.vars, []string{"lo"}, nil)
		fakeVersion(t, 13)
		got, err := Settings(Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := []Setting{{Key: "TCP_TX_SEG_SIZE", Value: TCPSegSize, From: from, Env: true, Kept: c.kept}, {Key: "TCP_RX_SEG_SIZE", Value: TCPSegSize, From: from, Env: true, Kept: c.kept}}
		if c.rx != "" {
			want[1] = Setting{Key: "TCP_RX_SEG_SIZE", Value: c.rx, From: c.rxFrom, Env: true}
		}
		if c.tx != "" {
			want[0] = Setting{Key: "TCP_TX_SEG_SIZE", Value: c.tx, From: c.txFrom, Env: true}
		}
		// The side left to UCX because of the other's explicit value names it.
		_, txSet := c.vars["UCX_TCP_TX_SEG_SIZE"]
		_, rxSet := c.vars["UCX_TCP_RX_SEG_SIZE"]
		if c.kept && txSet && !rxSet && want[1].Kept {
			want[1].KeptFor = "UCX_TCP_TX_SEG_SIZE"
		}
		if c.kept && rxSet && !txSet && want[0].Kept {
			want[0].KeptFor = "UCX_TCP_RX_SEG_SIZE"
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%v: settings (-want +got):\n%s", c.vars, d)
		}
	}
}

// TestKeptForString: the INIT line of a setting kept because of another
// variable names that variable instead of claiming it was set.
func TestKeptForString(t *testing.T) {
	s := Setting{Key: "TCP_TX_SEG_SIZE", Value: TCPSegSize, From: "Theseus", Kept: true, KeptFor: "UCX_TCP_RX_SEG_SIZE"}
	if got, want := s.String(), "UCX_TCP_TX_SEG_SIZE left to UCX (UCX_TCP_RX_SEG_SIZE is set explicitly; Theseus would give "+TCPSegSize+")"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	s.KeptFor = ""
	if got, want := s.String(), "UCX_TCP_TX_SEG_SIZE kept (set explicitly; Theseus would give "+TCPSegSize+")"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestProtoV2Off: from UCX 1.15 the protocols v2 are turned off
// (PROTO_ENABLE=n) unless UCX_PROTO_ENABLE is set: with them, UCX 1.16
// cancels atomics over TCP and, built with assertions, aborts during
// wireup.
func TestProtoV2Off(t *testing.T) {
	for _, c := range []struct {
		minor uint
		vars  map[string]string
		want  []Setting
	}{
		{13, nil, nil},
		{16, nil, []Setting{{Key: "PROTO_ENABLE", Value: "n", From: "UCX 1.16: its protocols v2 lose RMA and atomics over TCP"}}},
		{16, map[string]string{"UCX_PROTO_ENABLE": "y"}, []Setting{{Key: "PROTO_ENABLE", Value: "n", From: "UCX 1.16: its protocols v2 lose RMA and atomics over TCP", Kept: true}}},
	} {
		fakeSettings(t, c.vars, nil, nil)
		fakeVersion(t, c.minor)
		got, err := Settings(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(c.want, withoutTCPSegs(got)); d != "" {
			t.Errorf("UCX 1.%d %v (-want +got):\n%s", c.minor, c.vars, d)
		}
	}
}

func TestSettingsErrors(t *testing.T) {
	cases := []struct {
		name string
		vars map[string]string
		o    Options
		want []string
	}{
		{"hca list too short", map[string]string{"MSCCLPP_HCA_DEVICES": "mlx5_0"}, Options{LocalRank: 0, LocalRanks: 2},
			[]string{"MSCCLPP_HCA_DEVICES", "lists 1 NIC(s) (mlx5_0) for 2 rank(s)", "local rank k uses the k-th NIC"}},
		{"hca rank beyond list", map[string]string{"MSCCLPP_HCA_DEVICES": "mlx5_0,mlx5_1"}, Options{LocalRank: 2},
			[]string{"lists 2 NIC(s)", "needs at least 3"}},
		{"ifname matches nothing", map[string]string{"MSCCLPP_SOCKET_IFNAME": "enp9"}, Options{},
			[]string{"MSCCLPP_SOCKET_IFNAME=enp9 matches no network interface", "lo, eth0"}},
		{"bad family", map[string]string{"MSCCLPP_SOCKET_FAMILY": "AF_UNIX"}, Options{},
			[]string{"MSCCLPP_SOCKET_FAMILY", "AF_INET, AF_INET6"}},
		{"bad gid", map[string]string{"MSCCLPP_GID_INDEX": "-1"}, Options{},
			[]string{"MSCCLPP_GID_INDEX", "GID index"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fakeSettings(t, c.vars, []string{"lo", "eth0"}, nil)
			_, err := Settings(c.o)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestContextHCATooShort: NewContext refuses before touching UCX.
func TestContextHCATooShort(t *testing.T) {
	needUCX(t)
	fakeSettings(t, map[string]string{"MSCCLPP_HCA_DEVICES": "mlx5_0"}, []string{"lo"}, nil)
	_, err := NewContext(Options{LocalRank: 1, LocalRanks: 2})
	if err == nil || !strings.Contains(err.Error(), "MSCCLPP_HCA_DEVICES lists 1 NIC(s)") {
		t.Fatalf("NewContext: %v", err)
	}
}

// TestContextSettingsApplied: the interface setting reaches UCX (a
// context on the loopback device only works, and its endpoint uses it).
func TestContextSettingsApplied(t *testing.T) {
	needUCX(t)
	fakeSettings(t, map[string]string{"MSCCLPP_SOCKET_IFNAME": "lo"}, []string{"lo", "eth0"}, nil)
	p := newPair(t, 4096)
	want := []Setting{{Key: "NET_DEVICES", Value: "lo", From: "MSCCLPP_SOCKET_IFNAME"}}
	var got []Setting
	for _, s := range p.c.Settings() {
		if s.Key != "PROTO_ENABLE" { // (UCX 1.15 and later: TestProtoV2Off)
			got = append(got, s)
		}
	}
	got = withoutTCPSegs(got)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("settings (-want +got):\n%s", d)
	}
	// An atomic and its flush: the connection is up both ways (a flush
	// alone may complete during UCX's wireup).
	if err := p.ep.Inc(uint64(addr(p.dst)), p.rk); err != nil {
		t.Fatal(err)
	}
	r, err := p.ep.Flush()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, r); err != nil {
		t.Fatal(err)
	}
	for _, l := range p.ep.Lanes() {
		if l.Device != "lo" {
			t.Fatalf("lane %v: NET_DEVICES=lo not applied", l)
		}
	}
}
