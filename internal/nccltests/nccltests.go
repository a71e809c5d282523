// Package nccltests reads the text output of NVIDIA's nccl-tests
// (all_reduce_perf, all_gather_perf, reduce_scatter_perf, broadcast_perf,
// alltoall_perf, …; the format of nccl-tests 2.x, src/util.cu) and of
// theseus-bench (the same columns plus a schedule column,
// docs/theseus-bench.md) into typed results: the header facts (tool and
// version, parameters, ranks and devices), one Row per data line, and the
// footer.
//
// The format, as nccl-tests 2.19 prints it:
//
//	# nccl-tests version 2.19.6 nccl-headers=22501 nccl-library=22501
//	# Collective test starting: all_reduce_perf
//	# nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 8(factor) warmup iters: 3 iters: 10 agg iters: 1 validation: 1 graph: 0 unalign: 0
//	# Using devices
//	#  Rank  0 Group  0 Pid   2651 on         vm device  0 [0000:00:06] NVIDIA H200
//	#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
//	           8             2     float     sum      -1    53.55    0.00    0.00       0    53.88    0.00    0.00       0
//	# Out of bounds values : 0 OK
//	# Avg bus bandwidth    : 3.59628
//	# Collective test concluded: all_reduce_perf
//
// A data row is size (bytes), count (elements), type, redop ("none" when
// the collective does not reduce), root (-1 when it has none), then time
// (µs), algbw (GB/s), busbw (GB/s) and #wrong ("N/A" under -c 0), out of
// place then in place. With per-iteration timing (-I 1) each arrangement
// adds i_min, i_max, i_p99 (µs) and i_cv% (IterStats). Text after the last
// column is the schedule (theseus-bench) or the timestamp (nccl-tests
// -T/--report_timestamps), named by the column header.
//
// Lines that are neither comments ("#…") nor rows — log lines of the
// library or the launcher, interleaved with the table — are kept in
// Output.Noise and do not stop the parse. A line is a row when its first
// two fields are unsigned integers; such a line must then be a whole row,
// else it is an error.
package nccltests

import (
	"strings"
)

// Tool is the program that wrote an output.
type Tool int

const (
	// ToolUnknown: no header line told (rows only).
	ToolUnknown Tool = iota
	// NCCLTests: NVIDIA's nccl-tests ("# nccl-tests version" or
	// "# Collective test starting:").
	NCCLTests
	// TheseusBench: cmd/theseus-bench's text format ("# theseus-bench:").
	TheseusBench
)

func (t Tool) String() string {
	switch t {
	case NCCLTests:
		return "nccl-tests"
	case TheseusBench:
		return "theseus-bench"
	}
	return "unknown"
}

// Output is one parsed output file.
type Output struct {
	// File is the name the output was parsed under (errors carry it).
	File string
	Tool Tool
	// Version is nccl-tests' version ("2.19.6"); "" when absent.
	Version string
	// NCCLHeaders and NCCLLibrary are NCCL_VERSION_CODE values from the
	// version line (22501 is NCCL 2.25.1): the headers nccl-tests was
	// built with and the library it ran with; 0 when absent.
	NCCLHeaders, NCCLLibrary int
	// Backend is theseus-bench's backend ("host", "cuda"); "" otherwise.
	Backend string
	// NRanks is the number of ranks: distinct "#  Rank" lines (nccl-tests)
	// or the header's count (theseus-bench); 0 when the output does not
	// say. nccl-tests cuts a process's device list at 2,048 characters, so
	// with very many GPUs per process the count can be short.
	NRanks int
	// Devices are the "#  Rank" lines, one per rank, in order.
	Devices []Device
	// Params is the parameter line ("# nThread …" or theseus-bench's
	// "# minBytes …").
	Params Params
	// CPUTime is set when the time columns are CPU time (nccl-tests -C 1:
	// the column header says "cputime").
	CPUTime bool
	// Tests are the collective tests in output order: nccl-tests'
	// "# Collective test starting: NAME" lines, theseus-bench's
	// "# <collective>" headings.
	Tests []Test
	// Rows are the data rows in output order.
	Rows []Row
	// Footer is the last footer (for concatenated nccl-tests runs, the
	// last run's).
	Footer Footer
	// Noise are the lines that are neither comments nor rows.
	Noise []Line
}

// Device is one "#  Rank" line: "#  Rank %2d Group %2d Pid %6d on %10s
// device %2d [%04x:%02x:%02x] %s" (nccl-tests src/util.cu; Group and the
// bracketed PCI id are optional, older versions print neither or a
// shorter id).
type Device struct {
	Line   int
	Rank   int
	Group  int
	Pid    int
	Host   string
	Device int    // CUDA device ordinal
	PCI    string // "0000:00:06", without the brackets
	Name   string // "NVIDIA H200"
}

// Params is the parameter line. Fields the line lacks stay 0.
type Params struct {
	Line               int // 0 when the output has no parameter line
	NThread, NGpus     int
	MinBytes, MaxBytes int64
	// StepFactor (sizes multiply, "step: 8(factor)") or StepBytes
	// (sizes add, "step: 1048576(bytes)").
	StepFactor, StepBytes int64
	WarmupIters, Iters    int
	AggIters              int
	Validation            int // -c: checked runs, 0 = unchecked (#wrong N/A)
	// Graph is -G: CUDA graph launches per size; 0 = eager launches.
	Graph   int
	Unalign int
}

// Test is the start of one collective's rows.
type Test struct {
	Line int
	// Name as printed: "all_reduce_perf" (nccl-tests), "allreduce"
	// (theseus-bench).
	Name string
	// Collective is Name's canonical form (Canonical): "allreduce".
	Collective string
}

// Row is one data line.
type Row struct {
	Line int
	// Collective is the canonical collective (Canonical) of the Test the
	// row follows; with no Test before it, the collective the file name
	// names (CollectiveInName).
	Collective string
	// Bytes is the size column: the larger of the send and receive
	// buffers of a rank, in bytes (nccl-tests: max(sendBytes,
	// expectedBytes)).
	Bytes int64
	// Count is the count column, in elements.
	Count int64
	// Type and RedOp as printed ("float", "sum"; RedOp "none" for
	// collectives that do not reduce).
	Type, RedOp string
	// Root is the root rank, -1 for collectives without one.
	Root       int
	OutOfPlace Result
	InPlace    Result
	// Schedule is theseus-bench's schedule column as printed: one
	// schedule, or "out-of-place / in-place" when they differ, a "!"
	// marking ranks that ran different schedules; "-" when nothing ran.
	Schedule string
	// Timestamp is nccl-tests' timestamp column ("2025-01-31 12:00:00")
	// under -T/--report_timestamps.
	Timestamp string
}

// Result is one arrangement (out of place or in place) of a row.
type Result struct {
	// TimeUS is the time of one call in µs (CPU time under -C 1).
	TimeUS float64
	// AlgBW and BusBW are in GB/s (10^9 bytes/s), nccl-tests' algbw and
	// busbw (doc/PERFORMANCE.md). nccl-tests prints two decimals, so
	// small sizes read 0.00.
	AlgBW, BusBW float64
	// Wrong is #wrong, the wrong elements summed over the ranks; nil when
	// not checked ("N/A", -c 0).
	Wrong *int64
	// Iter is the per-iteration summary (-I 1); nil without it.
	Iter *IterStats
}

// IterStats are nccl-tests' per-iteration columns (-I 1).
type IterStats struct {
	MinUS, MaxUS, P99US float64 // i_min, i_max, i_p99 in µs
	CVPct               float64 // i_cv%: coefficient of variation in %
}

// Footer is the summary after a run's rows.
type Footer struct {
	Line int // of the last footer line; 0 when there is none
	// Wrong is "# Out of bounds values : N" (nccl-tests) or
	// "# Wrong elements : N" (theseus-bench); nil when absent.
	Wrong *int64
	// AvgBusBW is "# Avg bus bandwidth : X" in GB/s: the mean busbw over
	// every result of the run; nil when absent.
	AvgBusBW *float64
}

// Line is one line of the input.
type Line struct {
	Line int
	Text string
}

// Collectives are the canonical names of the collectives nccl-tests and
// theseus-bench test.
var Collectives = []string{"allreduce", "allgather", "reducescatter", "alltoall", "alltoallv",
	"broadcast", "reduce", "gather", "scatter", "sendrecv", "hypercube"}

// Canonical returns the canonical form of a test or collective name: lower
// case, a "_perf" or "_perf_mpi" suffix removed, '_' and '-' removed ("all_reduce_perf",
// "AllReduce" and "allreduce" are all "allreduce"). It does not check that
// the name is one of Collectives.
func Canonical(name string) string {
	s := strings.ToLower(strings.TrimSpace(name))
	if i := strings.LastIndexAny(s, `/\`); i >= 0 {
		s = s[i+1:]
	}
	s = strings.TrimSuffix(s, "_mpi") // some builds suffix the MPI variant
	s = strings.TrimSuffix(s, "_perf")
	return strings.NewReplacer("_", "", "-", "").Replace(s)
}

// Known reports whether the canonical form of name is one of Collectives.
func Known(name string) bool {
	c := Canonical(name)
	for _, k := range Collectives {
		if c == k {
			return true
		}
	}
	return false
}

// CollectiveInName returns the longest of Collectives that the file name
// (its base name, lower case, without '_' and '-') contains, or "":
// "nccl-g1-reduce_scatter.txt" names "reducescatter".
func CollectiveInName(file string) string {
	base := file
	if i := strings.LastIndexAny(base, `/\`); i >= 0 {
		base = base[i+1:]
	}
	base = strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(base))
	best := ""
	for _, c := range Collectives {
		if len(c) > len(best) && strings.Contains(base, c) {
			best = c
		}
	}
	return best
}
