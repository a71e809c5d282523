package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// Defaults of the nccl-tests flags. Iterations and warmup iterations not
// given on the command line scale down with the size (iterations).
const (
	defMinBytes = 8
	defMaxBytes = 64 << 20
	defFactor   = 2
	defIters    = 20
	defWarmup   = 5
	// iterBudget and warmupBudget are the bytes (message size × runs) that
	// the scaled timed and warmup runs of one size aim at.
	iterBudget   = 4 << 20
	warmupBudget = 1 << 20
	// maxBytesLimit bounds -e: each rank allocates two buffers of that size.
	maxBytesLimit = 16 << 30
	// maxSizes bounds the number of sizes one run walks.
	maxSizes = 4096
)

// dtype is one datatype as nccl-tests names it.
type dtype struct {
	Name string // nccl-tests' name (float, half, ...)
	T    theseus.DataType
}

// ncclTypes are nccl-tests' datatypes, in its order (test_typenames).
var ncclTypes = []dtype{
	{"int8", theseus.Int8}, {"uint8", theseus.Uint8}, {"int32", theseus.Int32}, {"uint32", theseus.Uint32},
	{"int64", theseus.Int64}, {"uint64", theseus.Uint64}, {"half", theseus.Float16}, {"float", theseus.Float32},
	{"double", theseus.Float64}, {"bfloat16", theseus.Bfloat16}, {"f8e4m3", theseus.Float8e4m3}, {"f8e5m2", theseus.Float8e5m2},
}

// typeAliases are other accepted spellings (the IR's names and C's).
var typeAliases = map[string]string{
	"char": "int8", "int": "int32", "float16": "half", "fp16": "half", "float32": "float", "fp32": "float",
	"float64": "double", "fp64": "double", "bf16": "bfloat16", "fp8e4m3": "f8e4m3", "fp8e5m2": "f8e5m2",
}

// redop is one reduction as nccl-tests names it.
type redop struct {
	Name string
	Op   theseus.RedOp
}

var ncclOps = []redop{{"sum", theseus.Sum}, {"prod", theseus.Prod}, {"max", theseus.Max}, {"min", theseus.Min}, {"avg", theseus.Avg}}

// allColls is every collective the bench runs, in its order: the reducing
// ones, then those that move data (the two groups read different input
// streams, see references).
var allColls = []ir.Collective{ir.AllReduce, ir.ReduceScatter, ir.Reduce,
	ir.AllGather, ir.AllToAll, ir.Broadcast, ir.Gather, ir.Scatter}

func parseTypes(s string) ([]dtype, error) {
	var out []dtype
	for _, f := range strings.Split(s, ",") {
		k := strings.ToLower(strings.TrimSpace(f))
		if k == "all" {
			return append([]dtype(nil), ncclTypes...), nil
		}
		if a, ok := typeAliases[k]; ok {
			k = a
		}
		found := false
		for _, t := range ncclTypes {
			if t.Name == k {
				out, found = append(out, t), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown datatype %q (want one of %s, or all)", f, typeNames())
		}
	}
	return out, nil
}

func typeNames() string {
	var n []string
	for _, t := range ncclTypes {
		n = append(n, t.Name)
	}
	return strings.Join(n, ", ")
}

func parseOps(s string) ([]redop, error) {
	var out []redop
	for _, f := range strings.Split(s, ",") {
		k := strings.ToLower(strings.TrimSpace(f))
		if k == "all" {
			return append([]redop(nil), ncclOps...), nil
		}
		found := false
		for _, o := range ncclOps {
			if o.Name == k {
				out, found = append(out, o), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown reduction %q (want sum, prod, max, min, avg, or all; NCCL's mulsum is not supported)", f)
		}
	}
	return out, nil
}

func parseColls(s string) ([]ir.Collective, error) {
	var out []ir.Collective
	for _, f := range strings.Split(s, ",") {
		k := strings.TrimSpace(f)
		if strings.EqualFold(k, "all") {
			return append([]ir.Collective(nil), allColls...), nil
		}
		if c, ok := p2pColls[strings.ToLower(k)]; ok {
			out = append(out, c)
			continue
		}
		c, err := ir.ParseCollective(k)
		if err != nil {
			return nil, fmt.Errorf("unknown collective %q (want %s, a comma-separated list, or all)", k, collNames())
		}
		if !slices.Contains(allColls, c) {
			return nil, fmt.Errorf("collective %s is not benchmarked (want %s, a comma-separated list, or all)", c, collNames())
		}
		out = append(out, c)
	}
	return out, nil
}

// collNames lists the collectives the bench runs (allColls).
func collNames() string {
	var n []string
	for _, c := range allColls {
		n = append(n, c.String())
	}
	return strings.Join(n, ", ") + " (and, outside all, sendrecv and alltoallv)"
}

// parseBytes reads a size as nccl-tests does (a number with an optional
// K, M or G suffix, 1024-based), also accepting KB/MB/GB and KiB/MiB/GiB.
func parseBytes(s string) (int64, error) {
	n, err := env.ParseSize(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("bad size %q: want bytes, optionally with K, M or G", s)
	}
	return n, nil
}

// sizes lists the requested sizes in bytes as nccl-tests walks them: from
// min to max, multiplying by factor when factor > 1, else adding step. At
// most maxSizes sizes.
func sizes(min, max, factor, step int64) ([]int64, error) {
	switch {
	case min < 0 || max < min:
		return nil, fmt.Errorf("bad size range %d..%d bytes", min, max)
	case max > maxBytesLimit:
		return nil, fmt.Errorf("maxbytes %d is over the limit of %d bytes", max, int64(maxBytesLimit))
	case factor < 1:
		return nil, fmt.Errorf("-f %d: the step factor must be >= 1 (1: add the step in bytes, -i)", factor)
	case factor == 1 && step <= 0:
		return nil, fmt.Errorf("the step factor (-f) must be > 1, or the step in bytes (-i) > 0")
	case factor > 1 && min == 0:
		return nil, fmt.Errorf("minbytes 0 never grows by a factor: give -b >= 1, or a step in bytes (-i) with -f 1")
	}
	var out []int64
	for s := min; s <= max; {
		if len(out) == maxSizes {
			return nil, fmt.Errorf("more than %d sizes from %d to %d bytes: use a larger step", maxSizes, min, max)
		}
		out = append(out, s)
		next := s + step
		if factor > 1 {
			if s > max/factor {
				break
			}
			next = s * factor
		}
		if next <= s {
			break
		}
		s = next
	}
	return out, nil
}

// iterations returns the timed and warmup runs for a message of size
// bytes: the given counts when set on the command line, else the defaults
// scaled so that runs × size stays near iterBudget (timed) and
// warmupBudget (warmup), with at least one timed run, and at least one
// warmup run unless a check run (which comes first) already warms up.
func iterations(size int64, iters, warmup int, itersSet, warmupSet, check bool) (int, int) {
	scale := func(def int, budget int64, floor int) int {
		n := int64(def)
		if size > 0 {
			n = min(n, budget/size)
		}
		return int(max(n, int64(floor)))
	}
	if !itersSet {
		iters = scale(iters, iterBudget, 1)
	}
	if !warmupSet {
		floor := 1
		if check {
			floor = 0
		}
		warmup = scale(warmup, warmupBudget, floor)
	}
	return iters, warmup
}
