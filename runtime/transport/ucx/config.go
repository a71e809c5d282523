package ucx

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// Options configure NewContext.
type Options struct {
	// LocalRank is this process's rank among the ranks of its node (0 ..
	// LocalRanks-1), LocalRanks their number: local rank k uses the k-th
	// NIC of MSCCLPP_HCA_DEVICES. LocalRanks 0 skips the list-length check.
	LocalRank, LocalRanks int
}

// Setting is one change of UCX's configuration that a Theseus/MSCCL++
// variable maps to.
type Setting struct {
	Key   string // UCX's name without the UCX_ prefix (NET_DEVICES, TCP_AF_PRIO, IB_GID_INDEX)
	Value string
	From  string // the variable(s) it comes from
	// Env: applied by setting UCX_<Key> in the environment before ucp_init
	// (memory-domain options), else with ucp_config_modify.
	Env bool
	// Kept: UCX_<Key> is set explicitly, so UCX's own value stays and this
	// one is not applied.
	Kept bool
	// KeptFor: when Kept although UCX_<Key> is not set, the variable whose
	// explicit value keeps it (UCX_TCP_RX_SEG_SIZE for the TX segment).
	KeptFor string
}

func (s Setting) String() string {
	if s.Kept && s.KeptFor != "" {
		return fmt.Sprintf("UCX_%s left to UCX (%s is set explicitly; %s would give %s)", s.Key, s.KeptFor, s.From, s.Value)
	}
	if s.Kept {
		return fmt.Sprintf("UCX_%s kept (set explicitly; %s would give %s)", s.Key, s.From, s.Value)
	}
	return fmt.Sprintf("UCX_%s=%s (from %s)", s.Key, s.Value, s.From)
}

// Hooks for tests: the host's network interfaces (up ones) and RDMA ports.
var (
	listInterfaces = func() ([]string, error) {
		ifs, err := net.Interfaces()
		if err != nil {
			return nil, err
		}
		var out []string
		for _, i := range ifs {
			if i.Flags&net.FlagUp != 0 {
				out = append(out, i.Name)
			}
		}
		return out, nil
	}
	listRDMAPorts = func() []string {
		ports, _ := filepath.Glob("/sys/class/infiniband/*/ports/*")
		var out []string
		for _, p := range ports {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p)))+":"+filepath.Base(p))
		}
		sort.Strings(out)
		return out
	}
	lookupEnv = os.LookupEnv
	// loadedVersion is the loaded libucp's release (Version).
	loadedVersion = Version
)

// explicit reports whether UCX_<key> is set to something other than
// value: then UCX's (the user's) value stays. The same value is not
// explicit: a process inherits the variables NewContext set in its parent
// (Env settings), and keeping them changes nothing.
func explicit(key, value string) bool {
	v, ok := lookupEnv("UCX_" + key)
	return ok && v != value
}

// TCPSegSize is the TCP segment size Settings gives UCX (UCX_TCP_TX_SEG_SIZE
// and UCX_TCP_RX_SEG_SIZE, in UCX's memory units).
const TCPSegSize = "256k"

// HCAs is MSCCLPP_HCA_DEVICES as a list: its comma-separated entries,
// trimmed, empty ones dropped ("mlx5_0," is one NIC); nil when unset or
// empty. Local rank k uses the k-th.
func HCAs() []string {
	raw, ok := env.HCADevices.Raw()
	if !ok {
		return nil
	}
	var hcas []string
	for _, h := range strings.Split(raw, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hcas = append(hcas, h)
		}
	}
	return hcas
}

// Settings maps the seed's network variables onto UCX's configuration:
//
//   - MSCCLPP_HCA_DEVICES (comma-separated RNICs; local rank k uses the k-th)
//     and MSCCLPP_SOCKET_IFNAME (an interface-name prefix, as the bootstrap
//     reads it) give NET_DEVICES: the rank's NIC (port 1 unless "dev:port"
//     is given) and the matching interfaces. With only the interface set,
//     every RDMA port stays listed; with only the HCAs, TCP has no device.
//   - MSCCLPP_SOCKET_FAMILY AF_INET / AF_INET6 gives TCP_AF_PRIO inet / inet6.
//   - MSCCLPP_GID_INDEX, when set, gives IB_GID_INDEX.
//   - TCP_TX_SEG_SIZE and TCP_RX_SEG_SIZE = TCPSegSize (UCX: 8 KiB and
//     64 KiB): UCX moves a put over TCP as active messages of one TX
//     segment each; 8 KiB segments held one connection's puts to a third
//     of what 256 KiB ones carry on loopback (docs/transport.md,
//     "Figures"). An explicit UCX_TCP_TX_SEG_SIZE or UCX_TCP_RX_SEG_SIZE
//     keeps both of UCX's (a TX segment must fit an RX one).
//   - UCX 1.15 and later: PROTO_ENABLE=n (UCX's first protocols). The
//     protocols v2, the default from 1.16, lose RMA and atomics over TCP:
//     "cannot find remote protocol for amo_post", the requests canceled,
//     and, built with assertions, an abort in tcp_ep.c's pending queue
//     dispatch during wireup (bench/results/2026-12-01-h200-eleventh,
//     call E; ucx/TestProtoV2Off).
//
// An explicit UCX_<key> keeps UCX's value (the Setting is Kept). Errors: an
// HCA list shorter than o.LocalRanks (or not reaching o.LocalRank), an
// interface prefix that matches nothing, a bad family or GID index.
func Settings(o Options) ([]Setting, error) {
	var out []Setting
	add := func(s Setting) {
		s.Kept = explicit(s.Key, s.Value)
		out = append(out, s)
	}
	var devs, from []string
	if hcas := HCAs(); hcas != nil {
		n := max(o.LocalRanks, o.LocalRank+1)
		if len(hcas) < n {
			return nil, fmt.Errorf("ucx: %s lists %d NIC(s) (%s) for %d rank(s) on this node: local rank k uses the k-th NIC, so it needs at least %d", env.HCADevices.Source(), len(hcas), strings.Join(hcas, ","), n, n)
		}
		h := hcas[o.LocalRank]
		if !strings.Contains(h, ":") {
			h += ":1"
		}
		devs = append(devs, h)
		from = append(from, fmt.Sprintf("%s[%d]", env.HCADevices.Source(), o.LocalRank))
	}
	if raw, ok := env.SocketIfname.Raw(); ok && strings.TrimSpace(raw) != "" {
		pfx := strings.TrimSpace(raw)
		ifs, err := listInterfaces()
		if err != nil {
			return nil, fmt.Errorf("ucx: list network interfaces: %w", err)
		}
		var match []string
		for _, i := range ifs {
			if strings.HasPrefix(i, pfx) {
				match = append(match, i)
			}
		}
		if len(match) == 0 {
			return nil, fmt.Errorf("ucx: %s=%s matches no network interface that is up (have %s)", env.SocketIfname.Source(), pfx, strings.Join(ifs, ", "))
		}
		if len(devs) == 0 {
			devs = append(devs, listRDMAPorts()...)
		}
		devs = append(devs, match...)
		from = append(from, env.SocketIfname.Source())
	}
	if len(devs) > 0 {
		add(Setting{Key: "NET_DEVICES", Value: strings.Join(devs, ","), From: strings.Join(from, ", ")})
	}
	fam, err := env.SocketFamily.Enum()
	if err != nil {
		return nil, fmt.Errorf("ucx: %w", err)
	}
	switch fam {
	case "AF_INET":
		add(Setting{Key: "TCP_AF_PRIO", Value: "inet", From: env.SocketFamily.Source(), Env: true})
	case "AF_INET6":
		add(Setting{Key: "TCP_AF_PRIO", Value: "inet6", From: env.SocketFamily.Source(), Env: true})
	}
	if major, minor, _ := loadedVersion(); major > 1 || major == 1 && minor >= 15 {
		add(Setting{Key: "PROTO_ENABLE", Value: "n", From: fmt.Sprintf("UCX %d.%d: its protocols v2 lose RMA and atomics over TCP", major, minor)})
	}
	// TCP segments: UCX carries puts over TCP as active messages cut into
	// TX_SEG_SIZE pieces (8 KiB by default), each its own send and its
	// own handling at the target; RX_SEG_SIZE (64 KiB) must hold a TX
	// segment. An explicit one is kept, and the other follows: an
	// explicit TX alone gives RX TCPSegSize or the TX size if larger (UCX
	// refuses a TX segment over its 64 KiB RX: "RX segment size ... must
	// be >= TX segment size"); an explicit RX alone of TCPSegSize or more
	// gives TX TCPSegSize; otherwise (a smaller RX, a value that is not a
	// plain size: inf, auto) the other stays UCX's. Through the environment: ucp_config_modify
	// leaves them unused (UCX 1.13 warns "invalid configurations:
	// TCP_TX_SEG_SIZE=...").
	const segFrom = "Theseus: puts over TCP in larger segments"
	tx, rx := explicit("TCP_TX_SEG_SIZE", TCPSegSize), explicit("TCP_RX_SEG_SIZE", TCPSegSize)
	txs := Setting{Key: "TCP_TX_SEG_SIZE", Value: TCPSegSize, From: segFrom, Env: true, Kept: tx || rx}
	rxs := Setting{Key: "TCP_RX_SEG_SIZE", Value: TCPSegSize, From: segFrom, Env: true, Kept: tx || rx}
	if tx && !rx {
		v, _ := lookupEnv("UCX_TCP_TX_SEG_SIZE")
		if n, err := env.ParseSize(v); err == nil {
			rxs.Kept = false
			rxs.From = segFrom + ", at least UCX_TCP_TX_SEG_SIZE"
			if def, _ := env.ParseSize(TCPSegSize); n > def {
				rxs.Value = fmt.Sprint(n)
			}
		}
	}
	if rx && !tx {
		v, _ := lookupEnv("UCX_TCP_RX_SEG_SIZE")
		n, err := env.ParseSize(v)
		if def, _ := env.ParseSize(TCPSegSize); err == nil && n >= def {
			txs.Kept = false
			txs.From = segFrom + ", within UCX_TCP_RX_SEG_SIZE"
		}
	}
	if rx && !tx && txs.Kept {
		txs.KeptFor = "UCX_TCP_RX_SEG_SIZE"
	}
	if tx && !rx && rxs.Kept {
		rxs.KeptFor = "UCX_TCP_TX_SEG_SIZE"
	}
	out = append(out, txs, rxs)
	if _, ok := env.GIDIndex.Raw(); ok {
		g, err := env.GIDIndex.Int()
		if err != nil || g < 0 {
			return nil, fmt.Errorf("ucx: %s=%q: want a GID index >= 0", env.GIDIndex.Source(), env.GIDIndex.String())
		}
		add(Setting{Key: "IB_GID_INDEX", Value: fmt.Sprint(g), From: env.GIDIndex.Source(), Env: true})
	}
	return out, nil
}
