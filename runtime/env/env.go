// Package env is the one place where Theseus reads its environment
// variables. Every variable is a typed Param declared once in this file's
// registry, recognised under both the THESEUS_ and MSCCLPP_ prefixes (the
// MSCCLPP_ one wins when both are set, as the seed README specifies), read
// once on first use and cached. docs/env.md is generated from the registry
// (a test keeps it current).
package env

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is the type of a parameter's value.
type Kind uint8

const (
	String Kind = iota
	Int
	Size // bytes: a number, or a number ending in KB, MB or GB (powers of 1024)
	Bool // 1/0, true/false, yes/no, on/off
	Enum
)

func (k Kind) String() string {
	return [...]string{"string", "int", "size", "bool", "enum"}[k]
}

// Param declares one variable. Name is the suffix after the prefix (for
// example "DEBUG" for THESEUS_DEBUG / MSCCLPP_DEBUG).
type Param struct {
	Name    string
	Kind    Kind
	Default string
	Values  []string // allowed values of an Enum (compared case-insensitively)
	Doc     string
	// Listed is the prefix the seed README lists the variable under
	// (THESEUS_ or MSCCLPP_); both prefixes are always recognised.
	Listed string
}

// The registry. Keep it sorted by prefix then name; docs/env.md follows it.
var (
	Debug          = reg(Param{Name: "DEBUG", Kind: Enum, Values: []string{"VERSION", "WARN", "INFO", "ABORT", "TRACE"}, Doc: "Debug level (NCCL-style). Unset: errors only.", Listed: "THESEUS_"})
	DebugSubsys    = reg(Param{Name: "DEBUG_SUBSYS", Kind: String, Default: "INIT", Doc: "Comma-separated subsystems among INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, CALL, EXECUTOR, NCCL, SELECTOR and ALL; a leading ^ enables all but those listed.", Listed: "THESEUS_"})
	DebugFile      = reg(Param{Name: "DEBUG_FILE", Kind: String, Doc: "Write debug logs to this file instead of stdout; %h expands to the host name and %p to the process id.", Listed: "THESEUS_"})
	NCCLLibPath    = reg(Param{Name: "NCCL_LIB_PATH", Kind: String, Doc: "Path of the real NCCL library used as fallback (dlopen).", Listed: "THESEUS_"})
	SelContext     = reg(Param{Name: "SELECTION_CONTEXT", Kind: String, Doc: "Selection context directory. Unset: $HOME/.theseus/contexts/default if it exists, else PREFIX/share/theseus/contexts/default beside the library, else the built-in default (docs/selection-context.md, Which context).", Listed: "THESEUS_"})
	NpkitDumpDir   = reg(Param{Name: "NPKIT_DUMP_DIR", Kind: String, Doc: "Accepted for compatibility; Theseus has no NPKit build.", Listed: "THESEUS_"})
	CheckPeriod    = reg(Param{Name: "CONTEXT_CHECK_PERIOD", Kind: Int, Default: "1000", Doc: "Ranks agree on the selection-context snapshot every K collective requests (and when a communicator is created; point-to-point calls are not requests).", Listed: "THESEUS_"})
	VectorMaxLen   = reg(Param{Name: "VECTOR_ATTRIBUTE_MAX_LENGTH", Kind: Int, Default: "1024", Doc: "Maximum number of elements of a vector-valued attribute.", Listed: "THESEUS_"})
	InitScratch    = reg(Param{Name: "INITIAL_SCRATCH_SIZE", Kind: Size, Default: "16MB", Doc: "Initial size of the communicator's shared scratch buffer; it grows when a request needs more.", Listed: "THESEUS_"})
	AltScratch     = reg(Param{Name: "ALTERNATE_SCRATCH_BUFFER", Kind: Bool, Default: "0", Doc: "Alternate between two scratch halves so back-to-back requests never share scratch (doubles its size).", Listed: "THESEUS_"})
	LLProtocol     = reg(Param{Name: "LL_PROTOCOL", Kind: Enum, Default: "LL16", Values: []string{"LL8", "LL16"}, Doc: "Packet format of the low-latency protocol.", Listed: "THESEUS_"})
	SharedDevice   = reg(Param{Name: "ALLOW_SHARED_DEVICE", Kind: Bool, Default: "0", Doc: "Allow several ranks on one GPU (separate processes under MPS).", Listed: "THESEUS_"})
	Timeout        = reg(Param{Name: "TIMEOUT", Kind: Int, Default: "60000", Doc: "Milliseconds a rank waits for a peer (bootstrap, semaphores, flags) before reporting an error naming the peer. Values above 8640000000 (100 days) wait 100 days.", Listed: "THESEUS_"})
	Backend        = reg(Param{Name: "BACKEND", Kind: Enum, Default: "cuda", Values: []string{"cuda", "host"}, Doc: "Execution backend of the NCCL library: cuda, or host (the CPU reference, for tests without a GPU).", Listed: "THESEUS_"})
	AuditTarget    = reg(Param{Name: "NCCL_AUDIT_TARGET", Kind: String, Doc: "Path of libtheseus_nccl.so that the LD_AUDIT shim redirects libnccl.so and libnccl.so.2 to (read by the C shim). Default: the shim's own directory.", Listed: "THESEUS_"})
	PTXDir         = reg(Param{Name: "PTX_DIR", Kind: String, Doc: "Directory of executor-kernel modules (theseus_<datatype>.ptx) that the CUDA backend loads instead of its embedded ones, for example a measurement build (cuda/kernel/build.sh bench: the same executor with other tuning knobs or launch-phase timestamps, results unchanged). Supported because it is the only way to run such a build under clients that cannot be rebuilt (nccl-tests, PyTorch, other processes of a job). Read when a process first uses a datatype; a datatype missing there is an error then.", Listed: "THESEUS_"})
	WorkSharing    = reg(Param{Name: "WORK_SHARING", Kind: Bool, Default: "1", Doc: "CUDA backend: a launch whose ops are independent copies and reduces of this rank's own buffers (a one-rank communicator's, the bandwidth test's) runs on the theseus_units entry: its bytes in 64 KiB units that each threadblock takes as it finishes the last (on as many threadblocks as the GPU holds), instead of each threadblock running its own ops; 0 keeps the schedule's split.", Listed: "THESEUS_"})
	NThreads       = reg(Param{Name: "NTHREADS", Kind: Int, Doc: "CUDA backend: threads per threadblock for op tables that do not set threads_per_block (as NCCL_NTHREADS sets NCCL's): a multiple of 32 from 32 to 1024, at every message size; a kernel's launches take at most its launch bound (512 threads for the executor and the point-to-point engine). Unset (or any other value): for an LL table one thread per 8-byte packet payload of the chunk a threadblock moves, a multiple of 32 from 64 to 512; for a Simple table 256 for blocks of at most 2 KiB per rank, 512 above. Point-to-point launches take it too, after a context's threads; unset, 256 when the launch's largest transfer is at most 4 KiB, 512 above (docs/p2p.md, \"Threads\").", Listed: "THESEUS_"})
	Replay         = reg(Param{Name: "REPLAY", Kind: Bool, Default: "1", Doc: "NCCL library on the CUDA backend: a data call that repeats one of the communicator's last 16 calls on the same stream and schedule (same arguments, outside a group, no INFO COLL log, one rank of the communicator per process) is launched from C without entering Go, until the selector's next epoch (docs/ncclabi.md, \"Launches from C\"); 0, false, no or off sends every call through Go. Empty or unparsable: the default.", Listed: "THESEUS_"})
	TimeLaunches   = reg(Param{Name: "TIME_LAUNCHES", Kind: Bool, Default: "0", Doc: "CUDA backend: account the time spent inside cuLaunchKernel per stream, in Go and in the C launcher (two clock reads per launch), which theseusCommLaunchTime reports. A supported feature, off by default for its cost: how an application (or ncclabi's callbench.c) separates the library's host time per call from the driver's launch time without a profiler.", Listed: "THESEUS_"})
	UCXLib         = reg(Param{Name: "UCX_LIB", Kind: String, Doc: "Path of the UCX libucp that the cross-node transport opens (dlopen) instead of libucp.so.0 from the system's library path (Debian package libucx0): for another UCX build, for example one with CUDA support.", Listed: "THESEUS_"})
	A2AVCheck      = reg(Param{Name: "ALLTOALLV_CHECK", Kind: Bool, Default: "0", Doc: "ncclAlltoAllv's checking mode: every launch compares the GPU counts matrix it reads with the CPU matrix the call passed (this rank's row and column) and fails with ncclInvalidArgument on the first difference, naming the cell. Off, the GPU matrix governs within the CPU matrix's totals (docs/p2p.md, \"AlltoAllv\"). Read when a communicator is created.", Listed: "THESEUS_"})
	LLFence        = reg(Param{Name: "LL_FENCE", Kind: Bool, Default: "0", Doc: "1 fences every launch of an LL schedule, as before self-fenced schedules (the compiler's proof that a schedule's own packets order its scratch reuse: docs/executor.md, \"Fences\"); 0 leaves their repeated launches unfenced. An A/B switch for measurements and a safety valve. In a job across nodes every rank must use the same value (checked at init: ncclInvalidUsage); a value that is not a boolean fails communicator init (ncclInvalidArgument).", Listed: "THESEUS_"})
	P2PHelp        = reg(Param{Name: "P2P_HELP", Kind: Bool, Default: "1", Doc: "CUDA backend, point-to-point engine: a send lane's zero-copy write into a receive buffer is shared, in pieces of whole chunks up to 512 KiB, with the launch's receive lanes while they wait and after their receives (docs/p2p.md, \"Helping\"); 0 leaves each send lane to copy its share alone (the bytes written are the same). Read when a process prepares its first point-to-point launch: an A/B switch for measurements. A value that is not a boolean fails communicator init (ncclInvalidArgument) naming the variable.", Listed: "THESEUS_"})
	Trace          = reg(Param{Name: "TRACE", Kind: String, Doc: "Write a Chrome/Perfetto trace (traceEvents JSON, for ui.perfetto.dev or chrome://tracing) of every communicator's calls to this file: host spans per call (validate, select, materialise, migrate, prepare, launch, sync) and each threadblock's ops as the GPU (%globaltimer) or the host interpreter ran them. %p expands to the process id and %h to the host name (one file per process). Written when the process's last traced communicator is destroyed (docs/trace.md).", Listed: "THESEUS_"})
	TraceOps       = reg(Param{Name: "TRACE_OPS", Kind: Int, Default: "65536", Doc: "With THESEUS_TRACE: the op records (32 bytes each, host-mapped on CUDA) a rank's launches may write between two points where the communicator has waited for them (a synchronous call, Finalize, Destroy); records past it are counted as dropped in the trace.", Listed: "THESEUS_"})
	Specialized    = reg(Param{Name: "SPECIALIZED", Kind: Bool, Default: "1", Doc: "CUDA backend: launch a schedule's specialised kernels (its op table compiled into the executor as constants: theseusc compile --specialize, docs/specialize.md) where its bundle carries one for the rank and datatype, and the kernels the library carries for the default context's one-channel LL allreduce of 2, 4 and 8 ranks (runtime/speckernels); 0 runs the generic executor everywhere.", Listed: "THESEUS_"})
	Executor       = reg(Param{Name: "EXECUTOR", Kind: Enum, Default: "launch", Values: []string{"launch", "persistent"}, Doc: "How a communicator's launches reach the device: launch (one kernel launch per call), or persistent (a resident executor per communicator and datatype fed through a queue in host memory, each call ordered with its stream by stream memory operations instead of a kernel launch; calls captured into a CUDA graph, and launches of more threadblocks than THESEUS_PERSISTENT_BLOCKS, are still kernel launches). Docs: docs/executor-modes.md.", Listed: "THESEUS_"})
	PersistBlocks  = reg(Param{Name: "PERSISTENT_BLOCKS", Kind: Int, Default: "1", Doc: "THESEUS_EXECUTOR=persistent: threadblocks of each resident executor kernel, 1 to 32 (each holds part of one multiprocessor while it runs); launches of more threadblocks are kernel launches.", Listed: "THESEUS_"})
	PersistThreads = reg(Param{Name: "PERSISTENT_THREADS", Kind: Int, Default: "256", Doc: "THESEUS_EXECUTOR=persistent: threads per threadblock of the resident executor kernel (a multiple of 32 up to 512, the executor's launch bound); every launch it runs uses them.", Listed: "THESEUS_"})
	PersistIdle    = reg(Param{Name: "PERSISTENT_IDLE_US", Kind: Int, Default: "10000", Doc: "THESEUS_EXECUTOR=persistent: microseconds a resident executor waits without work before it exits (the next call starts it again); 0 waits until the communicator is destroyed. While it runs, every cudaFree of the process waits for it.", Listed: "THESEUS_"})
	ProxySpin      = reg(Param{Name: "PROXY_SPIN", Kind: Int, Default: "2000", Doc: "Microseconds the port-channel proxy (cross-node transport) keeps polling its FIFOs and UCX after its last work before it sleeps (10 us doubling to 1 ms, woken by the next post or launch): longer keeps a kernel's descriptors and a peer's incoming signals from waiting for a sleeping proxy, at the cost of a core. The proxy's bounded waits from Go (a free FIFO slot, a descriptor's completion, a signal) spin as long (counted from their last round of the proxy that did work: data they wait for is arriving), then sleep a sixteenth of the time waited so far (10 us to 1 ms), so that waiting ranks do not starve the proxies and ranks they wait for when ranks outnumber cores. 0 or more (values beyond 100 days mean 100 days); a malformed or negative value fails communicator init (ncclInvalidArgument) naming the variable.", Listed: "THESEUS_"})
	ProxyLanes     = reg(Param{Name: "PROXY_LANES", Kind: Int, Default: "0", Doc: "Parallel connections of the port-channel proxy to each peer on another node, 1 to 16, or 0 (the default): 4 / the ranks per node, at least 1 (over TCP one proxy moves about 1.5-2 GB/s each way, its UCX progress copying every byte; on one H200 hosting 2 simulated nodes 4 proxies a node were best: docs/transport.md, \"Figures\"). Each lane is its own UCX context, worker and progress goroutine (over TCP, its own socket), and a schedule's channel ends are spread over them, so that several threadblocks' puts cross in parallel. Every rank of a job across nodes must use the same value: communicator init compares them and fails on every rank (ncclInvalidUsage) naming two ranks that differ and both values. Anything else than 1 to 16 fails communicator init (ncclInvalidArgument) naming the variable.", Listed: "THESEUS_"})
	ProxyStage     = reg(Param{Name: "PROXY_STAGE_BYTES", Kind: Size, Default: "16MB", Doc: "Pinned host staging buffer of each port-channel connection (per lane) on the staged path (device memory, a UCX build without CUDA support), cut into pieces of 1 MiB (two halves when smaller than 2 MiB): the device-to-host copy of a piece overlaps the puts of the pieces before it, and the proxy waits only when every piece is still on the wire. 2MB reproduces the two-half buffer of before. At least 2 bytes (a malformed or smaller value fails communicator init, ncclInvalidArgument, naming the variable); at most 1 GiB is used.", Listed: "THESEUS_"})
	ProxyBatch     = reg(Param{Name: "PROXY_STAGE_BATCH", Kind: Bool, Default: "1", Doc: "On the staged path (device memory, a UCX build without CUDA support), the proxy starts the device-to-host copies of every staged put it drains in one round on one stream and waits for them once, instead of one synchronous copy per put; 0 copies each put synchronously as before. A value that is not a boolean fails communicator init (ncclInvalidArgument) naming the variable.", Listed: "THESEUS_"})
	ProxyStaging   = reg(Param{Name: "PROXY_STAGING", Kind: Enum, Default: "kernel", Values: []string{"kernel", "proxy"}, Doc: "On the staged path (device memory, a UCX build without CUDA support), who copies what a port channel puts from device memory into pinned host memory: kernel, the executor kernel itself (each threadblock into its 512 KiB of a staging buffer of the rank, two halves in turn; the proxy only calls UCX), or proxy, the proxy's device-to-host copies (THESEUS_PROXY_STAGE_BYTES, THESEUS_PROXY_STAGE_BATCH; the path before kernel staging, about 200 us a copy under MPS). Threadblocks past the 32nd use the proxy's copies. Another value fails communicator init (ncclInvalidArgument) naming the variable.", Listed: "THESEUS_"})
	SliceBytes     = reg(Param{Name: "SLICE_BYTES", Kind: Size, Default: "1MB", Doc: "Default bytes of one chunk per pipeline slice for Simple schedules that do not set slice_bytes; at least 128. Every rank must use the same value (checked at communicator init: ncclInvalidUsage naming the ranks).", Listed: "THESEUS_"})

	HCADevices   = reg(Param{Name: "HCA_DEVICES", Kind: String, Doc: "Comma-separated RNIC names (dev or dev:port, port 1 by default); local rank k uses the k-th. The cross-node transport passes the rank's NIC to UCX (UCX_NET_DEVICES, unless that is set); a list shorter than the ranks of a node is an error.", Listed: "MSCCLPP_"})
	GIDIndex     = reg(Param{Name: "GID_INDEX", Kind: Int, Default: "0", Doc: "GID index of the RNICs (RoCE); when set, the cross-node transport passes it to UCX (UCX_IB_GID_INDEX, unless that is set).", Listed: "MSCCLPP_"})
	HostID       = reg(Param{Name: "HOSTID", Kind: String, Doc: "Host identity used to group ranks into nodes. Default: the host name plus boot id.", Listed: "MSCCLPP_"})
	SocketIfname = reg(Param{Name: "SOCKET_IFNAME", Kind: String, Doc: "Network interface (a name prefix) of the bootstrap TCP network and of UCX's TCP transport (the matching interfaces go into UCX_NET_DEVICES, unless that is set). Default: auto-detected.", Listed: "MSCCLPP_"})
	SocketFamily = reg(Param{Name: "SOCKET_FAMILY", Kind: Enum, Values: []string{"AF_INET", "AF_INET6"}, Doc: "Restrict the bootstrap network, and UCX's TCP transport (UCX_TCP_AF_PRIO, unless that is set), to IPv4 or IPv6.", Listed: "MSCCLPP_"})
)

var (
	registry []*Param
	mu       sync.Mutex
	cache    = map[string]value{}
	// lookup is os.LookupEnv; tests replace it.
	lookup = os.LookupEnv
)

type value struct {
	raw string
	set bool
	src string // the variable it came from
}

func reg(p Param) *Param {
	registry = append(registry, &p)
	return &p
}

// All returns the registry in declaration order.
func All() []*Param { return append([]*Param(nil), registry...) }

// Raw returns the value and whether it was set, applying prefix precedence
// (MSCCLPP_ over THESEUS_). It caches the first read; Reset clears it.
func (p *Param) Raw() (string, bool) {
	v := p.read()
	return v.raw, v.set
}

// Source is the variable name the value came from, or "" if unset.
func (p *Param) Source() string { return p.read().src }

func (p *Param) read() value {
	mu.Lock()
	defer mu.Unlock()
	if v, ok := cache[p.Name]; ok {
		return v
	}
	v := value{}
	if s, ok := lookup("MSCCLPP_" + p.Name); ok {
		v = value{raw: s, set: true, src: "MSCCLPP_" + p.Name}
	} else if s, ok := lookup("THESEUS_" + p.Name); ok {
		v = value{raw: s, set: true, src: "THESEUS_" + p.Name}
	}
	cache[p.Name] = v
	return v
}

// String returns the value, or the default when unset.
func (p *Param) String() string {
	if s, ok := p.Raw(); ok {
		return s
	}
	return p.Default
}

// Int parses the value (or default) as a base-10 int64. Errors name the
// variable.
func (p *Param) Int() (int64, error) {
	s := p.String()
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not an integer", p.name(), s)
	}
	return n, nil
}

// Size parses the value (or default) as bytes: a number, or a number with
// a KB, MB or GB suffix (1024-based; K, M, G and KiB/MiB/GiB too).
func (p *Param) Size() (int64, error) {
	n, err := ParseSize(p.String())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.name(), err)
	}
	return n, nil
}

// Bool parses the value (or default).
func (p *Param) Bool() (bool, error) {
	s := strings.ToLower(strings.TrimSpace(p.String()))
	switch s {
	case "1", "true", "yes", "on":
		return true, nil
	case "", "0", "false", "no", "off":
		return false, nil
	}
	return false, fmt.Errorf("%s=%q: not a boolean (1/0)", p.name(), s)
}

// Enum returns the value (or default) in its canonical spelling, checked
// against Values.
func (p *Param) Enum() (string, error) {
	s := strings.TrimSpace(p.String())
	if s == "" {
		s = p.Default // set but empty: as unset
	}
	if s == "" {
		return "", nil
	}
	for _, v := range p.Values {
		if strings.EqualFold(v, s) {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s=%q: want one of %s", p.name(), s, strings.Join(p.Values, ", "))
}

func (p *Param) name() string {
	if src := p.Source(); src != "" {
		return src
	}
	return p.Listed + p.Name
}

// ParseSize parses "1048576", "16MB", "1.5GB", "64K", "2GiB". Units are
// powers of 1024. Errors on negative numbers, unknown units and overflow.
func ParseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	if t == "" {
		return 0, fmt.Errorf("empty size")
	}
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suf) {
			mult = u.m
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suf))
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f >= 0) { // NaN too (int64(NaN) is negative on amd64)
		return 0, fmt.Errorf("bad size %q (want a number of bytes, optionally ending in KB, MB or GB)", s)
	}
	v := f * float64(mult)
	if v >= 1<<62 {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return int64(v), nil
}

// MaxTimeout is the longest wait THESEUS_TIMEOUT gives (100 days): larger
// values mean this, so that the runtime's multiples of the timeout (up to
// ten times it) stay within a time.Duration.
const MaxTimeout = 100 * 24 * time.Hour

// TimeoutDuration is ms milliseconds (a THESEUS_TIMEOUT value) as a
// duration, at most MaxTimeout; ms <= 0 gives 0.
func TimeoutDuration(ms int64) time.Duration {
	if ms <= 0 {
		return 0
	}
	if ms > int64(MaxTimeout/time.Millisecond) {
		return MaxTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// TimeoutOrDefault is THESEUS_TIMEOUT as a duration (TimeoutDuration), or
// its default, 60 s, when it is unset, malformed or not positive: for the
// waits that have no caller to report a bad value to.
func TimeoutOrDefault() time.Duration {
	ms, err := Timeout.Int()
	if err != nil || ms <= 0 {
		ms = 60000
	}
	return TimeoutDuration(ms)
}

// Reset forgets cached values (tests, and after fork-like re-exec).
func Reset() {
	mu.Lock()
	cache = map[string]value{}
	mu.Unlock()
}

// SetLookupForTest replaces the environment source and resets the cache;
// it returns a function that restores the original.
func SetLookupForTest(f func(string) (string, bool)) (restore func()) {
	mu.Lock()
	old := lookup
	lookup = f
	cache = map[string]value{}
	mu.Unlock()
	return func() {
		mu.Lock()
		lookup = old
		cache = map[string]value{}
		mu.Unlock()
	}
}

// Doc renders the registry as the Markdown of docs/env.md.
func Doc() string {
	var b strings.Builder
	b.WriteString("# Environment variables\n\n")
	b.WriteString("Generated from `runtime/env` (`go test ./runtime/env -update` rewrites it). Every variable is\n")
	b.WriteString("recognised under both the `THESEUS_` and `MSCCLPP_` prefixes; when both are set, the `MSCCLPP_`\n")
	b.WriteString("one wins. Values are read once, at first use. Sizes accept a number of bytes or a number ending\n")
	b.WriteString("in KB, MB or GB (powers of 1024). A variable of one of several values (a `/`-separated type) that is set\n")
	b.WriteString("but empty takes its default, as if unset.\n\n")
	b.WriteString("| variable | type | default | meaning |\n|---|---|---|---|\n")
	ps := All()
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Listed > ps[j].Listed })
	for _, p := range ps {
		typ := p.Kind.String()
		if p.Kind == Enum {
			typ = strings.Join(p.Values, " / ")
		}
		def := p.Default
		if def == "" {
			def = "-"
		}
		fmt.Fprintf(&b, "| `%s%s` | %s | %s | %s |\n", p.Listed, p.Name, typ, def, p.Doc)
	}
	return b.String()
}
