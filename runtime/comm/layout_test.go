package comm

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/runtime/env"
)

func infos(hosts []string, pids []int, devs []int, backend string) []RankInfo {
	out := make([]RankInfo, len(hosts))
	for r := range hosts {
		out[r] = RankInfo{HostID: hosts[r], Machine: hosts[r], PID: pids[r], Backend: backend, Device: devs[r], Scratch: 1 << 24, CheckPeriod: 1000, ProxyLanes: 1}
	}
	return out
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 100 + i
	}
	return s
}

func TestCheckLayout(t *testing.T) {
	zeros := func(n int) []int { return make([]int, n) }
	ones := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1
		}
		return s
	}
	local := func(n int) []int { return seq(n)[:n:n] }
	hosts := func(per int, names ...string) []string {
		var h []string
		for _, n := range names {
			for range per {
				h = append(h, n)
			}
		}
		return h
	}
	devs := func(per, nodes int) []int {
		var d []int
		for range nodes {
			for i := range per {
				d = append(d, i)
			}
		}
		return d
	}
	good := []struct {
		name string
		in   []RankInfo
		want Layout
	}{
		{"one node, 4 ranks", infos(hosts(4, "a"), local(4), devs(4, 1), "cuda"), Layout{Nodes: 1, PerNode: 4, LocalRank: []int{0, 1, 2, 3}, DeviceRanks: []int{1, 1, 1, 1}}},
		{"two nodes of 2", infos(hosts(2, "a", "b"), local(4), devs(2, 2), "cuda"), Layout{Nodes: 2, PerNode: 2, LocalRank: []int{0, 1, 0, 1}, DeviceRanks: []int{1, 1, 1, 1}}},
		{"host backend, one process", infos(hosts(4, "a"), []int{7, 7, 7, 7}, zeros(4), "host"), Layout{Nodes: 1, PerNode: 4, LocalRank: []int{0, 1, 2, 3}, DeviceRanks: zeros(4)}},
		{"16 ranks on one node", infos(hosts(16, "a"), local(16), devs(16, 1), "cuda"), Layout{Nodes: 1, PerNode: 16, LocalRank: devs(16, 1), DeviceRanks: ones(16)}},
		{"two nodes of 8", infos(hosts(8, "a", "b"), local(16), devs(8, 2), "cuda"), Layout{Nodes: 2, PerNode: 8, LocalRank: devs(8, 2), DeviceRanks: ones(16)}},
	}
	for _, tc := range good {
		got, err := CheckLayout(tc.in, 0, false)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
	bad := []struct {
		name  string
		in    []RankInfo
		hca   int
		peers []int
	}{
		{"unequal blocks", infos([]string{"a", "a", "a", "b"}, local(4), []int{0, 1, 2, 0}, "cuda"), 0, []int{0}},
		{"not contiguous", infos([]string{"a", "b", "a", "b"}, local(4), []int{0, 0, 1, 1}, "cuda"), 0, []int{0, 2}},
		{"same host id on two blocks", infos([]string{"a", "a", "b", "b", "a", "a"}, local(6), []int{0, 1, 0, 1, 2, 3}, "cuda"), 0, []int{0, 4}},
		{"9 ranks per node across nodes", infos(hosts(9, "a", "b"), local(18), devs(9, 2), "cuda"), 0, nil},
		{"too few RNICs", infos(hosts(4, "a", "b"), local(8), devs(4, 2), "cuda"), 2, nil},
		{"one process, two devices", infos(hosts(2, "a"), []int{5, 5}, []int{0, 1}, "host"), 0, []int{0, 1}},
		{"two processes, one device", infos(hosts(2, "a"), local(2), []int{0, 0}, "cuda"), 0, []int{0, 1}},
	}
	for _, tc := range bad {
		_, err := CheckLayout(tc.in, tc.hca, false)
		var e *Error
		if !errors.As(err, &e) || e.Code != InvalidUsage || !errors.Is(err, ErrLayout) {
			t.Errorf("%s: %v, want an InvalidUsage layout error", tc.name, err)
			continue
		}
		if d := cmp.Diff(tc.peers, e.Peers); d != "" {
			t.Errorf("%s: peers (-want +got):\n%s\n%v", tc.name, d, err)
		}
	}
	// The unequal-blocks message gives every node's count (it said "others
	// 2" for a node of 1: the expected count).
	if _, err := CheckLayout(infos([]string{"a", "a", "a", "b"}, local(4), []int{0, 1, 2, 0}, "cuda"), 0, false); err == nil ||
		!strings.Contains(err.Error(), `"a" 3 (ranks 0..2), "b" 1 (ranks 3..3)`) {
		t.Errorf("unequal blocks: %v, want every node's count", err)
	}
	// THESEUS_ALLOW_SHARED_DEVICE admits two processes on one device.
	if _, err := CheckLayout(infos(hosts(2, "a"), local(2), []int{0, 0}, "cuda"), 0, true); err != nil {
		t.Errorf("shared device allowed: %v", err)
	}
	// Configuration every rank must share.
	for name, mut := range map[string]func(*RankInfo){
		"backend":      func(i *RankInfo) { i.Backend = "host" },
		"scratch":      func(i *RankInfo) { i.Scratch = 1 << 20 },
		"alternate":    func(i *RankInfo) { i.Alternate = true },
		"check period": func(i *RankInfo) { i.CheckPeriod = 10 },
	} {
		in := infos(hosts(2, "a"), local(2), []int{0, 1}, "cuda")
		mut(&in[1])
		_, err := CheckLayout(in, 0, false)
		var e *Error
		if !errors.As(err, &e) || e.Code != InvalidUsage || !cmp.Equal(e.Peers, []int{0, 1}) {
			t.Errorf("%s differs: %v, want InvalidUsage naming ranks 0 and 1", name, err)
		}
	}
	// THESEUS_PROXY_LANES: the default (0) is 4 / the ranks per node, so
	// ranks that keep it agree with ranks that set what it gives.
	agree := infos(hosts(2, "a", "b"), local(4), devs(2, 2), "cuda")
	agree[0].ProxyLanes, agree[1].ProxyLanes, agree[2].ProxyLanes, agree[3].ProxyLanes = 0, 0, 2, 2
	if _, err := CheckLayout(agree, 0, false); err != nil {
		t.Errorf("the default lanes (2 at 2 ranks a node) and 2 set explicitly: %v", err)
	}
	// THESEUS_PROXY_LANES: the same on every rank of a job across nodes
	// (rank 2, the first of node "b", differs from rank 0); on one node,
	// where no proxy runs, it may differ.
	in := infos(hosts(2, "a", "b"), local(4), devs(2, 2), "cuda")
	in[2].ProxyLanes, in[3].ProxyLanes = 4, 4
	_, err := CheckLayout(in, 0, false)
	var e *Error
	const want = `rank 0 (node 0, host "a") uses THESEUS_PROXY_LANES=1, rank 2 (node 1, host "b") uses 4: every rank of a job across nodes must use the same`
	if !errors.As(err, &e) || e.Code != InvalidUsage || !errors.Is(err, ErrLayout) || !cmp.Equal(e.Peers, []int{0, 2}) || e.Msg != want {
		t.Errorf("lanes differ across nodes: %v, want InvalidUsage naming ranks 0 and 2: %s", err, want)
	}
	in = infos(hosts(2, "a"), local(2), devs(2, 1), "cuda")
	in[1].ProxyLanes = 3
	if _, err := CheckLayout(in, 0, false); err != nil {
		t.Errorf("lanes differ on one node: %v, want no error", err)
	}
	// THESEUS_SLICE_BYTES: the same on every rank, one node too.
	in = infos(hosts(2, "a"), local(2), devs(2, 1), "cuda")
	in[1].SliceBytes = 4096
	_, err = CheckLayout(in, 0, false)
	const wantSlice = `rank 0 uses THESEUS_SLICE_BYTES=0, rank 1 uses 4096: every rank must use the same (ranks that slice a collective differently wait for each other's slices until THESEUS_TIMEOUT)`
	if !errors.As(err, &e) || e.Code != InvalidUsage || !cmp.Equal(e.Peers, []int{0, 1}) || e.Msg != wantSlice {
		t.Errorf("slice bytes differ: %v, want InvalidUsage naming ranks 0 and 1: %s", err, wantSlice)
	}
	in = infos(hosts(2, "a"), local(2), devs(2, 1), "cuda")
	in[0].PacketType, in[1].PacketType = "LL16", "LL8"
	if _, err = CheckLayout(in, 0, false); !errors.As(err, &e) || e.Code != InvalidUsage || !strings.Contains(e.Msg, "THESEUS_LL_PROTOCOL=LL16, rank 1 uses LL8") {
		t.Errorf("packet types differ: %v, want InvalidUsage naming THESEUS_LL_PROTOCOL", err)
	}
	// THESEUS_LL_FENCE: the same across nodes (a fence with a peer on
	// another node is a meeting); on one node each rank's fence is its own.
	in = infos(hosts(2, "a", "b"), local(4), devs(2, 2), "cuda")
	in[3].LLFence = true
	_, err = CheckLayout(in, 0, false)
	const wantFence = `rank 0 (node 0, host "a") uses THESEUS_LL_FENCE=0, rank 3 (node 1, host "b") uses 1: every rank of a job across nodes must use the same`
	if !errors.As(err, &e) || e.Code != InvalidUsage || !cmp.Equal(e.Peers, []int{0, 3}) || e.Msg != wantFence {
		t.Errorf("LL fence differs across nodes: %v, want InvalidUsage naming ranks 0 and 3: %s", err, wantFence)
	}
	in = infos(hosts(2, "a"), local(2), devs(2, 1), "cuda")
	in[1].LLFence = true
	if _, err := CheckLayout(in, 0, false); err != nil {
		t.Errorf("LL fence differs on one node: %v, want no error", err)
	}
}

func TestCodes(t *testing.T) {
	// ncclResult_t values (NCCL 2.25.1 nccl.h).
	want := map[Code]int{Success: 0, UnhandledCudaError: 1, SystemError: 2, InternalError: 3, InvalidArgument: 4,
		InvalidUsage: 5, RemoteError: 6, InProgress: 7}
	for c, v := range want {
		if int(c) != v {
			t.Errorf("%v = %d, want %d", c, int(c), v)
		}
	}
	if CodeOf(nil) != Success || CodeOf(errors.New("x")) != InternalError {
		t.Error("CodeOf of nil or a plain error")
	}
	wrapped := errors.Join(errors.New("ctx"), &Error{Code: InvalidUsage})
	if CodeOf(wrapped) != InvalidUsage {
		t.Errorf("CodeOf(wrapped) = %v", CodeOf(wrapped))
	}
}

// TestHCACount: the init layout check counts MSCCLPP_HCA_DEVICES as UCX's
// settings read it (ucx.HCAs): a trailing comma or an empty entry is no NIC
// (fresh user f25: "mlx5_0," passed init as 2 NICs, then failed in UCX).
func TestHCACount(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
	}{{"", 0}, {"mlx5_0", 1}, {"mlx5_0,", 1}, {" mlx5_0 , , mlx5_1:1 ", 2}, {",", 0}} {
		t.Setenv("MSCCLPP_HCA_DEVICES", tc.v)
		env.Reset()
		if got := hcaCount(); got != tc.want {
			t.Errorf("MSCCLPP_HCA_DEVICES=%q: %d NICs, want %d", tc.v, got, tc.want)
		}
	}
	env.Reset()
}

// TestDeviceRanks: simulated nodes on one GPU (distinct MSCCLPP_HOSTIDs,
// one machine and device, shared with THESEUS_ALLOW_SHARED_DEVICE) count
// together in Layout.DeviceRanks, which the point-to-point engine's
// residency check uses: 2 nodes x 2 ranks on one GPU are 4 ranks on it,
// not the node's 2.
func TestDeviceRanks(t *testing.T) {
	in := infos([]string{"node0", "node0", "node1", "node1"}, seq(4), []int{0, 0, 0, 0}, "cuda")
	for r := range in {
		in[r].Machine = "vm:boot"
	}
	lay, err := CheckLayout(in, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int{4, 4, 4, 4}, lay.DeviceRanks); d != "" || lay.PerNode != 2 || lay.Nodes != 2 {
		t.Errorf("2 simulated nodes of 2 on one GPU: %+v (DeviceRanks -want +got: %s)", lay, d)
	}
	in[3].Device = 1 // the second node's second rank on another GPU
	lay, err = CheckLayout(in, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]int{3, 3, 3, 1}, lay.DeviceRanks); d != "" {
		t.Errorf("DeviceRanks -want +got: %s", d)
	}
}
