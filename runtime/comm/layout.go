package comm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// RankInfo is what each rank tells the others when a communicator is
// created: where it runs and how it is configured.
type RankInfo struct {
	HostID string
	// Machine is the host name joined with the kernel's boot id, whatever
	// MSCCLPP_HOSTID says (MachineID): with Device, which ranks share a
	// GPU (Layout.DeviceRanks).
	Machine     string
	PID         int
	Backend     string
	Device      int
	Scratch     int64 // initial scratch bytes
	Alternate   bool
	CheckPeriod int
	SliceBytes  int64  // THESEUS_SLICE_BYTES
	PacketType  string // THESEUS_LL_PROTOCOL (ir.PacketType's name)
	ProxyLanes  int    // THESEUS_PROXY_LANES
	LLFence     bool   // THESEUS_LL_FENCE
}

// Layout is the job's node structure as the layout checks found it.
type Layout struct {
	// Nodes is the number of distinct hosts; PerNode the ranks on each.
	Nodes, PerNode int
	// LocalRank is each rank's position on its node (rank mod PerNode).
	LocalRank []int
	// DeviceRanks is, for each rank, the number of ranks on its machine
	// and device (RankInfo.Machine and Device; simulated nodes on one GPU
	// count together), 0 on the host backend.
	DeviceRanks []int
}

// Node returns every rank's node index (rank / PerNode: nodes host
// contiguous blocks of ranks), or nil for a job on one node.
func (l Layout) Node() []int {
	if l.Nodes <= 1 || l.PerNode <= 0 {
		return nil
	}
	out := make([]int, len(l.LocalRank))
	for r := range out {
		out[r] = r / l.PerNode
	}
	return out
}

// CheckLayout applies the seed's job-layout assumptions (README, "Job Layout
// Assumptions") to every rank's info, indexed by rank, and returns the node
// structure. Every rank computes the same verdict from the same gathered
// infos. Errors wrap ErrLayout and name the offending ranks:
//
//  1. the same number of ranks on every node, in contiguous blocks (node k
//     hosts ranks [k*n, (k+1)*n)); a host identity appearing in two blocks
//     is rejected as well (MSCCLPP_HOSTID set alike on different nodes);
//  2. at most 8 ranks per node in a multi-node job, and, when
//     MSCCLPP_HCA_DEVICES is set (hca > 0 names), at least as many RNICs
//     as ranks per node;
//  3. one device per process: every rank of one process on one device;
//     and (CUDA) no two processes of a node on one device unless
//     allowShared (THESEUS_ALLOW_SHARED_DEVICE);
//
// plus the configuration every rank must share: the backend, the scratch
// size and alternation (identical scratch halves), the context check
// period (selection consistency) and, in a job across nodes, the proxy's
// lanes (THESEUS_PROXY_LANES: a pair of ranks on different nodes opens one
// connection per lane, and both must open the same ones) and the LL fence
// (THESEUS_LL_FENCE: a fence with a peer on another node is a meeting both
// must attend), and on every rank the pipeline slice (THESEUS_SLICE_BYTES)
// and the LL packet format (THESEUS_LL_PROTOCOL). Assumption 4 (send ≡
// recv mod 16) is checked per call.
func CheckLayout(infos []RankInfo, hca int, allowShared bool) (Layout, error) {
	n := len(infos)
	if n == 0 {
		return Layout{}, fmt.Errorf("%w: no ranks", ErrLayout)
	}
	fail := func(peers []int, format string, args ...any) (Layout, error) {
		return Layout{}, &Error{Code: InvalidUsage, Op: "init", Rank: -1, Peers: peers, Msg: fmt.Sprintf(format, args...), Err: ErrLayout}
	}
	// Configuration shared by all.
	for r, in := range infos {
		switch {
		case in.Backend != infos[0].Backend:
			return fail([]int{0, r}, "ranks use different backends (%q, %q)", infos[0].Backend, in.Backend)
		case in.Scratch != infos[0].Scratch || in.Alternate != infos[0].Alternate:
			return fail([]int{0, r}, "ranks use different scratch settings (%d bytes alternate=%v, %d bytes alternate=%v): THESEUS_INITIAL_SCRATCH_SIZE and THESEUS_ALTERNATE_SCRATCH_BUFFER must be identical on every rank",
				infos[0].Scratch, infos[0].Alternate, in.Scratch, in.Alternate)
		case in.CheckPeriod != infos[0].CheckPeriod:
			return fail([]int{0, r}, "ranks use different THESEUS_CONTEXT_CHECK_PERIOD (%d, %d): selection would not stay consistent", infos[0].CheckPeriod, in.CheckPeriod)
		case in.PacketType != infos[0].PacketType:
			return fail([]int{0, r}, "rank 0 uses THESEUS_LL_PROTOCOL=%s, rank %d uses %s: every rank must use the same (the LL packets of one rank are read by its peers)",
				infos[0].PacketType, r, in.PacketType)
		case in.SliceBytes != infos[0].SliceBytes:
			return fail([]int{0, r}, "rank 0 uses THESEUS_SLICE_BYTES=%d, rank %d uses %d: every rank must use the same (ranks that slice a collective differently wait for each other's slices until THESEUS_TIMEOUT)",
				infos[0].SliceBytes, r, in.SliceBytes)
		}
	}
	// 1. Contiguous, equal blocks.
	blockStart := []int{0}
	for r := 1; r < n; r++ {
		if infos[r].HostID != infos[r-1].HostID {
			blockStart = append(blockStart, r)
		}
	}
	nodes := len(blockStart)
	seen := map[string]int{}
	for k, s := range blockStart {
		h := infos[s].HostID
		if first, dup := seen[h]; dup {
			return fail([]int{blockStart[first], s}, "host %q hosts two separate blocks of ranks (ranks must be contiguous per node; is MSCCLPP_HOSTID set alike on different nodes?)", h)
		}
		seen[h] = k
	}
	if n%nodes != 0 {
		return fail(blockStart, "%d ranks on %d nodes: every node must host the same number of ranks", n, nodes)
	}
	per := n / nodes
	var counts []string
	uneven := -1
	for k, s := range blockStart {
		end := n
		if k+1 < nodes {
			end = blockStart[k+1]
		}
		counts = append(counts, fmt.Sprintf("%q %d (ranks %d..%d)", infos[s].HostID, end-s, s, end-1))
		if end-s != per && uneven < 0 {
			uneven = s
		}
	}
	if uneven >= 0 {
		return fail([]int{uneven}, "nodes host different numbers of ranks (%s): every node must host the same number of contiguous ranks",
			strings.Join(counts, ", "))
	}
	// 2. At most 8 per node across nodes; enough RNICs.
	if nodes > 1 && per > 8 {
		return fail(nil, "%d ranks per node in a %d-node job: at most 8 ranks per node are supported across nodes", per, nodes)
	}
	if nodes > 1 && hca > 0 && hca < per {
		return fail(nil, "MSCCLPP_HCA_DEVICES names %d RNICs for %d ranks per node", hca, per)
	}
	// Across nodes, the same lanes everywhere: any two ranks that differ
	// make some pair of ranks of different nodes differ, whose connection
	// setup would wait for lanes the other never opens.
	for r, in := range infos {
		if nodes == 1 {
			break
		}
		if executor.EffectiveLanes(in.ProxyLanes, per) != executor.EffectiveLanes(infos[0].ProxyLanes, per) {
			return fail([]int{0, r}, "rank 0 (node 0, host %q) uses THESEUS_PROXY_LANES=%s, rank %d (node %d, host %q) uses %s: every rank of a job across nodes must use the same",
				infos[0].HostID, lanesName(infos[0].ProxyLanes, per), r, r/per, in.HostID, lanesName(in.ProxyLanes, per))
		}
		if in.LLFence != infos[0].LLFence {
			return fail([]int{0, r}, "rank 0 (node 0, host %q) uses THESEUS_LL_FENCE=%s, rank %d (node %d, host %q) uses %s: every rank of a job across nodes must use the same",
				infos[0].HostID, bit(infos[0].LLFence), r, r/per, in.HostID, bit(in.LLFence))
		}
	}
	// 3. One device per process; shared devices only with permission.
	type hostPID struct {
		host string
		pid  int
	}
	type hostDev struct {
		host string
		dev  int
	}
	procDev := map[hostPID]int{}
	devProc := map[hostDev]int{}
	for r, in := range infos {
		hp := hostPID{in.HostID, in.PID}
		if first, ok := procDev[hp]; ok && infos[first].Device != in.Device {
			return fail([]int{first, r}, "ranks %d and %d run in one process on devices %d and %d: one process manages exactly one device", first, r, infos[first].Device, in.Device)
		} else if !ok {
			procDev[hp] = r
		}
		if in.Backend == "host" {
			continue // the CPU is shared by nature
		}
		hd := hostDev{in.HostID, in.Device}
		if first, ok := devProc[hd]; ok && infos[first].PID != in.PID && !allowShared {
			return fail([]int{first, r}, "ranks %d and %d share device %d on host %q from two processes: set THESEUS_ALLOW_SHARED_DEVICE=1 (with MPS) to allow it", first, r, in.Device, in.HostID)
		} else if !ok {
			devProc[hd] = r
		}
	}
	lay := Layout{Nodes: nodes, PerNode: per, LocalRank: make([]int, n), DeviceRanks: make([]int, n)}
	type machDev struct {
		machine string
		dev     int
	}
	share := map[machDev]int{}
	for _, in := range infos {
		if in.Backend != "host" {
			share[machDev{in.Machine, in.Device}]++
		}
	}
	for r, in := range infos {
		lay.LocalRank[r] = r % per
		if in.Backend != "host" {
			lay.DeviceRanks[r] = share[machDev{in.Machine, in.Device}]
		}
	}
	return lay, nil
}

var (
	hostIDOnce sync.Once
	hostID     string
)

// DefaultHostID is MSCCLPP_HOSTID (or THESEUS_HOSTID) when set, else
// MachineID.
func DefaultHostID() string {
	if v, ok := env.HostID.Raw(); ok && v != "" {
		return v
	}
	return MachineID()
}

// MachineID is the host name joined with the kernel's boot id.
func MachineID() string {
	hostIDOnce.Do(func() {
		h, _ := os.Hostname()
		b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		hostID = h + ":" + strings.TrimSpace(string(b))
	})
	return hostID
}

// hcaCount is the number of NICs MSCCLPP_HCA_DEVICES lists, as UCX's
// settings read it (ucx.HCAs: empty entries dropped).
func hcaCount() int { return len(ucx.HCAs()) }

// The process's device binding (assumption 3): every communicator a
// process creates is bound to one device; the binding is released when the
// last communicator is destroyed.
var procDevice struct {
	sync.Mutex
	backend string
	dev     int
	refs    int
}

func bindDevice(backend string, dev int) error {
	procDevice.Lock()
	defer procDevice.Unlock()
	if procDevice.refs > 0 && (procDevice.backend != backend || procDevice.dev != dev) {
		return fmt.Errorf("this process's communicators are bound to %s device %d; one process manages exactly one device (requested %s device %d)",
			procDevice.backend, procDevice.dev, backend, dev)
	}
	procDevice.backend, procDevice.dev = backend, dev
	procDevice.refs++
	return nil
}

func unbindDevice() {
	procDevice.Lock()
	defer procDevice.Unlock()
	if procDevice.refs > 0 {
		procDevice.refs--
	}
}

// bit is a boolean variable's value as it is set: 0 or 1.
func bit(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// lanesName is a THESEUS_PROXY_LANES value as the layout check names it.
func lanesName(n, per int) string {
	if n == 0 {
		return fmt.Sprintf("%d (the default: 4 / the ranks per node)", executor.EffectiveLanes(n, per))
	}
	return strconv.Itoa(n)
}
