package ucx

import (
	"bufio"
	"slices"
	"strings"
)

// Lane is one transport UCX selected for an endpoint, from
// ucp_ep_print_info: the transport (tcp, rc_mlx5, posix, cma, cuda_ipc...),
// its device (lo, mlx5_0:1, memory) and what the lane carries (am, rma_bw,
// amo, ...).
type Lane struct {
	Transport, Device string
	Uses              []string
}

func (l Lane) String() string { return l.Transport + "/" + l.Device }

// parseLanes reads the lane lines of ucp_ep_print_info, for example
//
//	#                 lane[0]:  1:tcp/lo.0 md[1]  -> md[1]/tcp/sysdev[255] am am_bw#0 keepalive wireup
func parseLanes(info string) []Lane {
	var out []Lane
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimLeft(sc.Text(), "# "))
		if !strings.HasPrefix(line, "lane[") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		_, rsc, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		tl, dev, _ := strings.Cut(rsc, "/")
		if i := strings.LastIndexByte(dev, '.'); i > 0 {
			dev = dev[:i] // the path index
		}
		l := Lane{Transport: tl, Device: dev}
		if i := slices.Index(f, "->"); i >= 0 && i+2 < len(f) {
			for _, u := range f[i+2:] {
				u, _, _ = strings.Cut(u, "#")
				l.Uses = append(l.Uses, u)
			}
		}
		out = append(out, l)
	}
	return out
}
