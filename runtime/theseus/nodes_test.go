//go:build linux

package theseus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/internal/netnstest"
	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

func needUCX(t testing.TB) {
	t.Helper()
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
	if _, ok := os.LookupEnv("UCX_TLS"); !ok {
		t.Setenv("UCX_TLS", "tcp")
	}
}

// nodeComms creates nodes x per ranks as goroutines of this process, rank
// r on simulated node r/per (its own host id), on context dir (""; the
// default context).
func nodeComms(t testing.TB, nodes, per int, dir string) []*Comm {
	t.Helper()
	n := nodes * per
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*Comm, n)
	errs := ranks.Each(n, func(r int) error {
		cfg := Config{Backend: "host", ContextDir: dir}
		cfg.Options.Timeout = 20 * time.Second
		cfg.Options.InitialScratch = 1 << 20
		cfg.Options.HostID = fmt.Sprintf("node%d", r/per)
		var err error
		comms[r], err = NewComm(context.Background(), id, r, n, cfg)
		return err
	})
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Destroy()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms
}

// TestNodesInProcess: 2 nodes of 2 ranks as goroutines of this process
// (each simulated node's ranks with their own proxy), UCX over TCP: a
// sample of every collective computes right through port channels
// between the nodes.
func TestNodesInProcess(t *testing.T) {
	needUCX(t)
	comms := nodeComms(t, 2, 2, "")
	var cases []devicetest.Case
	for i, coll := range allColls {
		for _, count := range []int64{7, 1000003} {
			cases = append(cases, devicetest.Case{Coll: coll, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: 4,
				Root: i % 4, InPlace: i%2 == 0, Seed: uint64(i + 1)})
		}
	}
	res := onEach(comms, func(c *Comm) rankResult {
		x := runCases(c, cases)
		if x.Err == nil {
			if err := runP2PSuite(c); err != nil {
				x.Err = fmt.Errorf("point-to-point: %w", err)
			} else if st := c.Stats().Executor.P2P; st.Links != 2 {
				x.Err = fmt.Errorf("point-to-point: %d connections across nodes, want 2 (%+v)", st.Links, st)
			}
		}
		return x
	})
	for r, x := range res {
		if x.Err != nil || x.Wrong != 0 {
			t.Errorf("rank %d: %d wrong: %v", r, x.Wrong, x.Err)
		}
		var names []string
		for k := range x.Schedules {
			names = append(names, k)
		}
		t.Logf("rank %d: %d cases, schedules %s", r, x.Cases, strings.Join(names, " "))
	}
}

// nodeCases is the sample the multi-node runs check: every collective in
// float32 at counts 1, 7 and 1000003 (both arrangements among them), and
// at count 4099 in five other datatypes; every redop for allreduce.
func nodeCases(n int) []devicetest.Case {
	var cs []devicetest.Case
	add := func(coll ir.Collective, dt ir.DataType, op ir.RedOp, count int64) {
		cs = append(cs, devicetest.Case{Coll: coll, DataType: dt, RedOp: op, Count: count, NRanks: n,
			Root: (len(cs) * 3) % n, InPlace: len(cs)%2 == 1, Seed: uint64(len(cs) + 1)})
	}
	for _, coll := range allColls {
		for _, count := range []int64{1, 7, 1000003} {
			add(coll, ir.Float32, ir.Sum, count)
		}
		for _, dt := range []ir.DataType{ir.Int8, ir.Float16, ir.Bfloat16, ir.Float64, ir.Uint64} {
			add(coll, dt, ir.Sum, 4099)
		}
	}
	for _, op := range ir.AllRedOps() {
		add(ir.AllReduce, ir.Float32, op, 777)
	}
	return cs
}

// runNodesRank runs nodeCases and reports the result, this process's id
// and the processes whose memory it maps ("MP result ... pid= imports=").
func runNodesRank(t *testing.T, c *Comm, rank, n int) {
	res := runCases(c, nodeCases(n))
	if res.Err == nil {
		// Point-to-point and AlltoAllv: every pattern and matrix, the
		// pairs across nodes over port channels.
		if err := runP2PSuite(c); err != nil {
			res.Err = fmt.Errorf("point-to-point: %w", err)
		}
	}
	var imp []string
	for _, p := range host.ImportedFrom() {
		imp = append(imp, strconv.Itoa(p))
	}
	var names []string
	for k := range res.Schedules {
		names = append(names, k)
	}
	sort.Strings(names)
	st := c.Stats().Executor.P2P
	line := fmt.Sprintf("MP result rank=%d cases=%d checked=%d wrong=%d pid=%d imports=%s p2p=%d/%d/%d schedules=%s", rank, res.Cases, res.Checked, res.Wrong,
		os.Getpid(), strings.Join(imp, ","), st.Launches, st.Connects, st.Links, strings.Join(names, ","))
	if res.Err != nil {
		line += " err=" + strings.ReplaceAll(res.Err.Error(), "\n", " ")
	}
	fmt.Println(line)
	if err := c.Destroy(); err != nil {
		t.Error(err)
	}
}

// TestNodesMultiProcess: 2 and 4 simulated nodes of 2 ranks each, one
// process per rank with its node's MSCCLPP_HOSTID, UCX over TCP on
// loopback, on the default context: every collective (a sample of
// datatypes, counts, arrangements and redops) is right on every rank
// (#wrong 0); no process maps the memory of a process of another node
// (host.ImportedFrom: the ranks of one node share memory, those of
// different nodes only talk through the proxy); the INIT log names the
// transport between the nodes (NET/UCX tcp).
func TestNodesMultiProcess(t *testing.T) {
	needUCX(t)
	for _, nodes := range []int{2, 4} {
		t.Run(fmt.Sprintf("%dx2", nodes), func(t *testing.T) { nodesMultiProcess(t, nodes, 2, nil) })
	}
	// Three parallel connections per pair of ranks (THESEUS_PROXY_LANES):
	// the channel ends spread over them.
	t.Run("2x2-lanes3", func(t *testing.T) {
		nodesMultiProcess(t, 2, 2, func(int) ([]string, []string) {
			return nil, []string{"MSCCLPP_SOCKET_IFNAME=lo", "THESEUS_PROXY_LANES=3"}
		})
	})
}

// nodesMultiProcess runs nodes x per rank processes in mode "nodes" and
// checks what TestNodesMultiProcess says. spec (nil: every rank on
// loopback) gives node k's command prefix and environment.
func nodesMultiProcess(t *testing.T, nodes, per int, spec func(node int) (wrap, env []string)) {
	n := nodes * per
	start := time.Now()
	env := []string{"THESEUS_TIMEOUT=60000", "THESEUS_INITIAL_SCRATCH_SIZE=1MB", "THESEUS_DEBUG=INFO", "THESEUS_DEBUG_SUBSYS=INIT"}
	procs := startRanksWrapped(t, n, "nodes", func(r int) ([]string, []string) {
		own := []string{fmt.Sprintf("MSCCLPP_HOSTID=node%d", r/per)}
		if spec == nil {
			return nil, append(own, "MSCCLPP_SOCKET_IFNAME=lo")
		}
		w, e := spec(r / per)
		return w, append(own, e...)
	}, env...)
	wantDev := func(node int) string {
		if spec == nil {
			return "lo"
		}
		_, e := spec(node)
		for _, kv := range e {
			if v, ok := strings.CutPrefix(kv, "MSCCLPP_SOCKET_IFNAME="); ok {
				return v
			}
		}
		return ""
	}
	pids := map[int]int{} // pid -> rank
	imports := map[int][]int{}
	var checked, wrong int64
	for _, p := range procs {
		result, err := p.result()
		if err != nil || result == "" {
			t.Fatalf("rank %d process: %v\n%s", p.rank, err, p.output())
		}
		if e := field(result, "err"); e != "" {
			t.Errorf("rank %d: %s", p.rank, strings.SplitN(result, "err=", 2)[1])
		}
		// p2p=launches/connections/links: every rank connects with every
		// other (the AlltoAllv matrices), those of other nodes by links.
		var launches, conns, links int
		if _, err := fmt.Sscanf(field(result, "p2p"), "%d/%d/%d", &launches, &conns, &links); err != nil || launches == 0 || conns < n-1 || links != n-per {
			t.Errorf("rank %d: point-to-point launches/connections/links across nodes %q, want connections >= %d and %d links", p.rank, field(result, "p2p"), n-1, n-per)
		}
		c, _ := strconv.ParseInt(field(result, "checked"), 10, 64)
		w, _ := strconv.ParseInt(field(result, "wrong"), 10, 64)
		checked += c
		wrong += w
		pid, _ := strconv.Atoi(field(result, "pid"))
		pids[pid] = p.rank
		for _, s := range strings.Split(field(result, "imports"), ",") {
			if q, err := strconv.Atoi(s); err == nil {
				imports[p.rank] = append(imports[p.rank], q)
			}
		}
		out := p.output()
		if !regexp.MustCompile(`NET/UCX tcp/` + regexp.QuoteMeta(wantDev(p.rank/per))).MatchString(out) {
			t.Errorf("rank %d: the INIT log names no NET/UCX tcp transport:\n%s", p.rank, out)
		}
		if p.rank == 0 {
			t.Logf("rank 0: %s", result)
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "NET/UCX") {
					t.Log(l)
				}
			}
		}
	}
	for r, qs := range imports {
		for _, pid := range qs {
			q, ok := pids[pid]
			if !ok {
				t.Errorf("rank %d maps memory of process %d, which is no rank of the job", r, pid)
			} else if q/per != r/per {
				t.Errorf("rank %d (node %d) maps memory of rank %d (node %d): ranks of different nodes must share no memory", r, r/per, q, q/per)
			}
		}
		if len(qs) == 0 && per > 1 {
			t.Errorf("rank %d maps nothing of its node's ranks: the test shows nothing", r)
		}
	}
	t.Logf("%d nodes x %d ranks: %d cases each in %v, %d elements checked, #wrong = %d", nodes, per, len(nodeCases(n)),
		time.Since(start).Round(time.Millisecond), checked, wrong)
	if wrong != 0 {
		t.Fatalf("#wrong = %d", wrong)
	}
}

// TestNodesLanesMismatch: 2 nodes of 2 ranks, one process per rank, where
// the last rank sets THESEUS_PROXY_LANES=3 and the others keep the
// default (0: 4 / the ranks per node, 2 here). Every rank's init fails with ncclInvalidUsage naming rank 0
// and rank 3, both values and the variable, instead of a connection setup
// that waits until THESEUS_TIMEOUT (60 s here) for lanes its peer never
// opens: the error is the layout check's, not a timeout.
// The check needs no libucp (init fails before loading it), so the test
// runs where UCX is missing too.
func TestNodesLanesMismatch(t *testing.T) {
	const nodes, per = 2, 2
	procs := startRanksEnv(t, nodes*per, "lanes", func(r int) []string {
		e := []string{fmt.Sprintf("MSCCLPP_HOSTID=node%d", r/per)}
		if r == nodes*per-1 {
			e = append(e, "THESEUS_PROXY_LANES=3")
		}
		return e
	}, "THESEUS_TIMEOUT=60000", "THESEUS_INITIAL_SCRATCH_SIZE=1MB", "MSCCLPP_SOCKET_IFNAME=lo", "UCX_TLS=tcp")
	const want = `rank 0 (node 0, host "node0") uses THESEUS_PROXY_LANES=2 (the default: 4 / the ranks per node), rank 3 (node 1, host "node1") uses 3: every rank of a job across nodes must use the same`
	for _, p := range procs {
		result, _ := p.result() // (init fails: the process too)
		if result == "" {
			t.Fatalf("rank %d reported nothing\n%s", p.rank, p.output())
		}
		msg, _ := strings.CutPrefix(result, "MP result ")
		if !strings.HasSuffix(result, "[ncclInvalidUsage]") || !strings.Contains(result, "init: "+want) || !strings.Contains(result, "(ranks 0 3)") {
			t.Errorf("rank %d: %s\nwant init failing with ncclInvalidUsage: %s", p.rank, msg, want)
		}
		if strings.Contains(result, "timeout") || strings.Contains(result, "timed out") || strings.Contains(result, "did not answer") {
			t.Errorf("rank %d: a timeout, not the layout check: %s", p.rank, msg)
		}
		if p.rank == 0 {
			t.Log(msg)
		}
	}
}

// runLanesRank is a rank of TestNodesLanesMismatch whose init succeeded
// (the lanes were not checked): an allreduce across the nodes, whose
// result it reports.
func runLanesRank(c *Comm, rank, n int) {
	res := runCases(c, []devicetest.Case{{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 4099, NRanks: n, Seed: 1}})
	fmt.Printf("MP result rank=%d wrong=%d err=%v\n", rank, res.Wrong, res.Err)
	c.Destroy()
}

// TestNodesNetworkNamespaces is TestNodesMultiProcess's 2 nodes of 2
// ranks with each node in its own network namespace, joined by a veth
// pair (nodes that share no interface but the pair): the bootstrap and
// UCX's TCP both go over it. It needs root and iproute2; elsewhere it
// skips, saying so.
func TestNodesNetworkNamespaces(t *testing.T) {
	needUCX(t)
	p := netnstest.New(t, "tn", 232)
	nodesMultiProcess(t, 2, 2, func(node int) ([]string, []string) {
		return p.Exec(node), []string{"MSCCLPP_SOCKET_IFNAME=" + p.Dev[node], "MASTER_ADDR=" + p.Addr[0]}
	})
}

// TestNodesFault: a node is lost while 2 nodes of 2 ranks run allreduces
// (the hierarchical schedule: port channels between the nodes). Killed,
// its ranks' sockets close and the others fail at once; stopped (SIGSTOP:
// a node that stops answering, its connections open), the others' waits
// end at THESEUS_TIMEOUT. Either way every surviving rank returns
// ncclRemoteError naming a rank of the lost node, within THESEUS_TIMEOUT
// (and a margin), and nothing hangs. kill-sendrecv: the same with
// point-to-point between the nodes. A run where a survivor dies in UCX's
// own abort (ucxAbort) is run again.
func TestNodesFault(t *testing.T) {
	needUCX(t)
	for _, how := range []string{"kill", "stop"} {
		t.Run(how, func(t *testing.T) { nodesFaultRetried(t, how, "allreduce") })
	}
	// Point-to-point between the nodes (the engine over port channels).
	t.Run("kill-sendrecv", func(t *testing.T) { nodesFaultRetried(t, "kill", "sendrecv") })
}

// ucxAbort is what UCX (1.13 to at least 1.19) prints when it aborts a
// surviving process: its software RMA over TCP answers a put or atomic
// that the killed peer sent just before it died, and a failed answer is
// fatal inside UCX (ucp_request_try_send; docs/known-issues.md 25).
const ucxAbort = "Fatal: unexpected error: Endpoint timeout"

// nodesFaultRetried runs nodesFault again, up to 3 times in all, when a
// surviving rank died in UCX's own abort (ucxAbort), which no caller of
// UCX can prevent; every other failure fails the test at once.
func nodesFaultRetried(t *testing.T, how, op string) {
	const attempts = 3
	for i := 1; ; i++ {
		problems, aborted := nodesFault(t, how, op)
		if !aborted || i == attempts {
			for _, p := range problems {
				t.Error(p)
			}
			return
		}
		t.Logf("attempt %d of %d: a surviving rank died in UCX's abort (%q, docs/known-issues.md 25): again", i, attempts, ucxAbort)
	}
}

// nodesFault kills (or stops) the ranks of node 1 of 2 nodes of 2 ranks
// while they run op in a loop, and returns what is wrong with the
// survivors' reports, and whether a survivor died in UCX's abort.
func nodesFault(t *testing.T, how, op string) (problems []string, aborted bool) {
	const nodes, per = 2, 2
	const n = nodes * per
	const timeout = 4 * time.Second
	procs := startRanksEnv(t, n, "fault", func(r int) []string {
		return []string{fmt.Sprintf("MSCCLPP_HOSTID=node%d", r/per), "MSCCLPP_SOCKET_IFNAME=lo"}
	}, "THESEUS_TIMEOUT="+strconv.Itoa(int(timeout/time.Millisecond)), "THESEUS_INITIAL_SCRATCH_SIZE=1MB",
		"MP_FAULT_OP="+op, "MP_FAULT_PER="+strconv.Itoa(per))
	for _, p := range procs {
		select {
		case line, ok := <-p.lines:
			if !ok || !strings.HasPrefix(line, "MP ready") {
				t.Fatalf("rank %d: %q\n%s", p.rank, line, p.output())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("rank %d never got ready\n%s", p.rank, p.output())
		}
	}
	lostNode := 1
	start := time.Now()
	for _, p := range procs[lostNode*per : (lostNode+1)*per] {
		sig := syscall.SIGKILL
		if how == "stop" {
			sig = syscall.SIGSTOP
		}
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
	namesLost := func(fault string) bool {
		for _, f := range strings.Split(field(fault, "peers"), ",") {
			if q, err := strconv.Atoi(f); err == nil && q/per == lostNode {
				return true
			}
		}
		return false
	}
	faults := map[int]string{}
	for _, p := range procs[:lostNode*per] {
		fault := p.fault(t, start, timeout+20*time.Second)
		took := time.Since(start)
		<-p.done
		t.Logf("rank %d after %v: %s", p.rank, took.Round(time.Millisecond), fault)
		if fault == "" {
			if strings.Contains(p.output(), ucxAbort) {
				aborted = true
			}
			problems = append(problems, fmt.Sprintf("rank %d reported no error\n%s", p.rank, p.output()))
			continue
		}
		faults[p.rank] = fault
		if limit := timeout + 6*time.Second; took > limit {
			problems = append(problems, fmt.Sprintf("rank %d took %v, beyond THESEUS_TIMEOUT (%v)", p.rank, took, timeout))
		}
	}
	// Each survivor names a rank of the lost node with ncclRemoteError, or
	// only survivors that do ("rank 0's launch failed (see rank 0's
	// error)": a survivor whose wait on another survivor ended when that
	// one gave up on the frozen node first, as under load).
	for r, fault := range faults {
		ok := field(fault, "code") == "ncclRemoteError" && namesLost(fault)
		if !ok && field(fault, "code") == "ncclRemoteError" {
			ok = true
			for _, f := range strings.Split(field(fault, "peers"), ",") {
				q, err := strconv.Atoi(f)
				if err != nil || q/per == lostNode || !namesLost(faults[q]) {
					ok = false
				}
			}
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("rank %d: %q names neither a rank of node %d nor a survivor that does, with ncclRemoteError (survivors: %v)", r, fault, lostNode, faults))
		}
	}
	if how == "stop" {
		for _, p := range procs[lostNode*per:] {
			p.cmd.Process.Kill()
		}
	}
	return problems, aborted
}

// TestMemoryChannelAcrossNodes: a context whose schedules were written for
// one node (memory channels everywhere: commtest's generators without
// nlocalranks) on 2 simulated nodes: the call fails on every rank at once
// with ncclInvalidUsage naming the pair of ranks and the layout, and
// nothing waits for a peer.
func TestMemoryChannelAcrossNodes(t *testing.T) {
	needUCX(t)
	dir := t.TempDir()
	if err := commtest.WriteStandard(dir, 4); err != nil {
		t.Fatal(err)
	}
	comms := nodeComms(t, 2, 2, dir)
	start := time.Now()
	errs := onEach(comms, func(c *Comm) error {
		buf, err := c.MemAlloc(4 << 10)
		if err != nil {
			return err
		}
		return c.AllReduce(buf, buf, 1024, Float32, Sum, nil)
	})
	for r, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Code != InvalidUsage {
			t.Fatalf("rank %d: %v, want ncclInvalidUsage", r, err)
		}
		for _, want := range []string{"memory channel", "is on node", "2 nodes of 2 ranks", "port channels"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: %q lacks %q", r, err, want)
			}
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the failure took %v: a rank waited for a peer", took)
	}
	t.Log(errs[0])
}

// TestNodesWithoutUCX: 2 simulated nodes and no libucp (THESEUS_UCX_LIB
// names a file that does not exist): every rank's init fails with
// ncclSystemError and UCX's load error, which names the Debian package
// and THESEUS_UCX_LIB; nothing hangs.
func TestNodesWithoutUCX(t *testing.T) {
	procs := startRanksEnv(t, 4, "nodes", func(r int) []string {
		return []string{fmt.Sprintf("MSCCLPP_HOSTID=node%d", r/2)}
	}, "THESEUS_UCX_LIB=/nonexistent/libucp.so.0", "THESEUS_TIMEOUT=20000")
	for _, p := range procs {
		result, _ := p.result() // (init fails: the process too)
		for _, want := range []string{"ncclSystemError", "libucx0", "THESEUS_UCX_LIB", "/nonexistent/libucp.so.0", "2 nodes"} {
			if !strings.Contains(result, want) {
				t.Errorf("rank %d: %q lacks %q\n%s", p.rank, result, want, p.output())
			}
		}
	}
}

// TestMSCCLAcrossNodes: an MSCCL XML algorithm (transfer level, written
// for any node shape) on 2 simulated nodes of one rank each is compiled for
// the communicator's shape: its transfers between the nodes become port
// channels, and it computes right. (An MSCCL++ plan with port channels:
// the executor's TestMSCCLPPPortAcrossNodes.)
func TestMSCCLAcrossNodes(t *testing.T) {
	needUCX(t)
	dir := t.TempDir()
	b, err := os.ReadFile("../../examples/allreduce_ring_2rank_msccl.xml")
	if err != nil {
		t.Fatal(err)
	}
	attrs := `{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}` + "\n"
	scheds := `{"file":"ring.xml","collective":"allreduce","nranks":2,"name":"msccl_ring"}` + "\n"
	for name, data := range map[string][]byte{"ring.xml": b, "attribute_manifest.jsonl": []byte(attrs), "schedule_manifest.jsonl": []byte(scheds)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	comms := nodeComms(t, 2, 1, dir)
	var cases []devicetest.Case
	for i, count := range []int64{2, 1001, 65536} {
		cases = append(cases, devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: 2, InPlace: i%2 == 1, Seed: uint64(i + 1)})
	}
	res := onEach(comms, func(c *Comm) rankResult { return runCases(c, cases) })
	for r, x := range res {
		if x.Err != nil || x.Wrong != 0 || x.Cases != len(cases) || x.Schedules["ring.xml"] != len(cases) {
			t.Errorf("rank %d: %d cases, %d wrong, schedules %v: %v", r, x.Cases, x.Wrong, x.Schedules, x.Err)
		}
	}
}

// TestNodesPush: the push generator (compiler/gen: puts into the peers'
// scratch, the one that serves alltoall, gather and scatter beyond 128
// ranks on several nodes in the default context) on 2 simulated nodes of
// 2 ranks (every root) and 3 of 6 (a threadblock serving two peers) in this
// process, UCX over TCP, on a context of push entries alone: both
// arrangements, a short and a large count, right on every rank through
// port channels between the nodes.
func TestNodesPush(t *testing.T) {
	needUCX(t)
	dir := t.TempDir()
	attrs := `{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}` + "\n"
	var sm strings.Builder
	colls := []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter}
	for _, c := range colls {
		fmt.Fprintf(&sm, `{"gen":"push","collective":"%s","preference":"1","name":"%s_push"}`+"\n", c, c)
	}
	for name, s := range map[string]string{"attribute_manifest.jsonl": attrs, "schedule_manifest.jsonl": sm.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("2x2", func(t *testing.T) { pushCases(t, dir, 2, 2, colls, []int{0, 1, 2, 3}) })
	// 3 nodes of 6: 17 peers over 16 threadblocks, so one threadblock
	// serves two peers (alltoall; gather and scatter with a root on each
	// node).
	t.Run("3x6", func(t *testing.T) { pushCases(t, dir, 3, 6, colls, []int{0, 13}) })
}

// pushCases runs colls at each root of roots (alltoall: root 0 only) on
// nodes x per ranks of context dir, a short and a large count, and
// requires them right, run by the push entries.
func pushCases(t *testing.T, dir string, nodes, per int, colls []ir.Collective, roots []int) {
	t.Helper()
	n := nodes * per
	comms := nodeComms(t, nodes, per, dir)
	var cases []devicetest.Case
	for i, coll := range colls {
		for _, root := range roots {
			for _, count := range []int64{7, 100003} {
				if !coll.Rooted() && root > 0 {
					continue
				}
				cases = append(cases, devicetest.Case{Coll: coll, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: n,
					Root: root, InPlace: (i+root)%2 == 0, Seed: uint64(len(cases) + 1)})
			}
		}
	}
	res := onEach(comms, func(c *Comm) rankResult { return runCases(c, cases) })
	for r, x := range res {
		if x.Err != nil || x.Wrong != 0 || x.Cases != len(cases) {
			t.Errorf("rank %d: %d of %d cases, %d wrong: %v", r, x.Cases, len(cases), x.Wrong, x.Err)
		}
		for name := range x.Schedules {
			if !strings.HasSuffix(name, "_push") {
				t.Errorf("rank %d ran schedule %s", r, name)
			}
		}
		if r == 0 {
			t.Logf("rank %d: %d cases, schedules %v", r, x.Cases, x.Schedules)
		}
	}
}
