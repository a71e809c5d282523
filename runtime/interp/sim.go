package interp

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
)

// SimOptions selects the cases Simulate runs. Zero values select defaults.
type SimOptions struct {
	// DataTypes defaults to all twelve NCCL types.
	DataTypes []ir.DataType
	// RedOps defaults to all five (reducing collectives only; other
	// collectives run once per data type).
	RedOps []ir.RedOp
	// Counts (elements per block) default to DefaultCounts.
	Counts []int64
	// Slices defaults to {1, 3} for Simple programs; LL programs always run
	// unsliced.
	Slices []int64
	// PacketTypes defaults to {LL16, LL8} for LL programs.
	PacketTypes []ir.PacketType
	// Roots (physical) of rooted collectives default to every rank for
	// nranks <= 4, else to {0, 1, program root + 1, nranks-1}.
	Roots []int
	// Launches is how many consecutive launches each case runs with fresh
	// inputs (default 2, so LL scratch halves and dependency epochs
	// alternate and semaphores carry over).
	Launches int
	// Seed seeds the inputs (0 is a fixed default).
	Seed uint64
	// Timeout bounds each wait (default 10 s).
	Timeout time.Duration
}

// CaseResult is the outcome of one simulated case.
type CaseResult struct {
	Collective ir.Collective
	DataType   ir.DataType
	RedOp      ir.RedOp // meaningful when Reduces
	Reduces    bool
	InPlace    bool
	Count      int64 // elements per block
	Slices     int64
	Protocol   ir.Protocol
	PacketType ir.PacketType // meaningful for LL
	Root       int           // physical root; -1 for unrooted collectives
	// Checked is the number of elements compared (every rank's output, and
	// every rank's input out of place, over all launches); Wrong how many of
	// them differ from the expected value, bit for bit (-1 when the run
	// failed with Err).
	Checked, Wrong int64
	// Elapsed is the time spent in Run, over all launches.
	Elapsed time.Duration
	Err     error
}

// String prints the case as one line: data type, redop, arrangement, count,
// slices (and packet type, root), #wrong and time.
func (c CaseResult) String() string {
	var b strings.Builder
	op := "-"
	if c.Reduces {
		op = c.RedOp.String()
	}
	arr := "out-of-place"
	if c.InPlace {
		arr = "in-place"
	}
	fmt.Fprintf(&b, "%-13s %-8s %-4s %-12s count=%-8d slices=%d", c.Collective, c.DataType, op, arr, c.Count, c.Slices)
	if c.Protocol == ir.LL {
		fmt.Fprintf(&b, " %s", c.PacketType)
	}
	if c.Root >= 0 {
		fmt.Fprintf(&b, " root=%d", c.Root)
	}
	if c.Err != nil {
		fmt.Fprintf(&b, "  #wrong=error  time=%v  error: %v", c.Elapsed.Round(time.Microsecond), firstLine(c.Err.Error()))
		return b.String()
	}
	fmt.Fprintf(&b, "  #wrong=%d  time=%v", c.Wrong, c.Elapsed.Round(time.Microsecond))
	return b.String()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// OK reports whether the case ran and every element matched.
func (c CaseResult) OK() bool { return c.Err == nil && c.Wrong == 0 }

// DefaultCounts are the counts Simulate uses for p by default: 0, 1, 7, a
// medium count that no alignment divides, and a larger count that is a
// multiple of C * maxSlices * 16 (every piece a whole number of 16-byte
// units for every type), bounded so the case stays small in memory.
func DefaultCounts(p *ir.Program, maxSlices int64) []int64 {
	unit := p.ChunksPerBlock * max(maxSlices, 1) * 16
	perElem := int64(p.NRanks) * ir.MaxBlocks(p.Collective, p.NRanks) * 8 * 2
	budget := min(int64(1)<<16, (16<<20)/perElem)
	large := max(budget/unit, 1) * unit
	medium := large/2 + 13
	counts := []int64{0, 1, 7, medium, large}
	slices.Sort(counts)
	return slices.Compact(counts)
}

// Simulate runs program p (primitive level) in the host interpreter over a
// matrix of cases and checks every rank's result against a direct
// computation of the collective (NCCL 2.25 semantics, root rotation
// included): for each data type × reduction op (reducing collectives) ×
// supported arrangement × count × slices (× packet type for LL × root for
// rooted collectives), it fills every rank's input with random values
// chosen so that every reduction order gives the same result (small
// integers for sum and avg, ±2^k and 0 for prod with bounded exponents,
// arbitrary non-NaN values without -0 for max and min, arbitrary bits when
// nothing is reduced), runs SimOptions.Launches launches, and counts the
// elements that differ bit for bit. Out of place it also checks that
// inputs are left unchanged (NCCL's const send buffer).
//
// Errors (returned, not per case): p does not lower (for example a
// transfer-level program: run compiler/legalize first), p is a custom
// collective (it has no postcondition to compare with), or bad options.
// Execution errors and timeouts are reported per case in CaseResult.Err.
func Simulate(p *ir.Program, opts SimOptions) ([]CaseResult, error) {
	if p == nil {
		return nil, fmt.Errorf("interp: nil program")
	}
	if p.Collective == ir.Custom {
		return nil, fmt.Errorf("interp: %s is a custom collective, which has no postcondition to simulate against", p.Name)
	}
	tables, err := optable.LowerAll(p)
	if err != nil {
		return nil, err
	}
	o := opts
	if o.DataTypes == nil {
		o.DataTypes = ir.AllDataTypes()
	}
	if o.RedOps == nil {
		o.RedOps = ir.AllRedOps()
	}
	if !p.Collective.Reduces() {
		o.RedOps = []ir.RedOp{ir.Sum}
	}
	if p.Protocol == ir.LL {
		o.Slices = []int64{1}
		if o.PacketTypes == nil {
			o.PacketTypes = []ir.PacketType{ir.LL16, ir.LL8}
		}
	} else {
		o.PacketTypes = []ir.PacketType{ir.LL16}
		if o.Slices == nil {
			o.Slices = []int64{1, 3}
		}
	}
	for _, s := range o.Slices {
		if s < 1 {
			return nil, fmt.Errorf("interp: slices %d < 1", s)
		}
	}
	if o.Counts == nil {
		o.Counts = DefaultCounts(p, slices.Max(o.Slices))
	}
	roots := []int{-1}
	if p.Collective.Rooted() {
		roots = o.Roots
		if roots == nil {
			roots = defaultRoots(p)
		}
		for _, r := range roots {
			if r < 0 || r >= p.NRanks {
				return nil, fmt.Errorf("interp: root %d outside 0..%d", r, p.NRanks-1)
			}
		}
	}
	if o.Launches <= 0 {
		o.Launches = 2
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	var arrangements []bool
	if p.OutOfPlace {
		arrangements = append(arrangements, false)
	}
	if p.InPlace {
		arrangements = append(arrangements, true)
	}
	var out []CaseResult
	caseNo := uint64(0)
	for _, dt := range o.DataTypes {
		if dt >= ir.NumDataTypes {
			return nil, fmt.Errorf("interp: unknown data type %v", dt)
		}
		for _, op := range o.RedOps {
			if op >= ir.NumRedOps {
				return nil, fmt.Errorf("interp: unknown reduction op %v", op)
			}
			for _, inPlace := range arrangements {
				for _, count := range o.Counts {
					for _, s := range o.Slices {
						for _, pt := range o.PacketTypes {
							for _, root := range roots {
								caseNo++
								c := CaseResult{Collective: p.Collective, DataType: dt, RedOp: op, Reduces: p.Collective.Reduces(),
									InPlace: inPlace, Count: count, Slices: s, Protocol: p.Protocol, PacketType: pt, Root: root}
								runCase(tables, &c, o, caseNo)
								out = append(out, c)
							}
						}
					}
				}
			}
		}
	}
	return out, nil
}

func defaultRoots(p *ir.Program) []int {
	n := p.NRanks
	if n <= 4 {
		r := make([]int, n)
		for i := range r {
			r[i] = i
		}
		return r
	}
	rs := []int{0, 1, (p.Root + 1) % n, n - 1}
	slices.Sort(rs)
	return slices.Compact(rs)
}

func runCase(tables []*optable.Table, c *CaseResult, o SimOptions, caseNo uint64) {
	t0 := tables[0]
	n := t0.NRanks
	req := Request{Count: c.Count, DataType: c.DataType, RedOp: c.RedOp, Root: max(c.Root, 0), InPlace: c.InPlace,
		PacketType: c.PacketType, Slices: c.Slices, Timeout: o.Timeout}
	w, err := NewWorld(tables)
	if err != nil {
		c.Err, c.Wrong = err, -1
		return
	}
	req.Launch = 1
	if err := w.AllocBuffers(req); err != nil {
		c.Err, c.Wrong = err, -1
		return
	}
	rng := rand.New(rand.NewPCG(o.Seed^0x9e3779b97f4a7c15, caseNo))
	es := int64(c.DataType.Size())
	for l := 1; l <= o.Launches; l++ {
		req.Launch = uint64(l)
		// Inputs: fresh values; outputs poisoned so unwritten elements show.
		inputs := make([][]byte, n)
		for p := range n {
			b := &w.Bufs[p]
			if len(b.Output) > 0 {
				for i := range b.Output {
					b.Output[i] = 0xa5
				}
			}
		}
		for p := range n {
			b := &w.Bufs[p]
			fillInput(rng, b.Input, c.DataType, c.RedOp, c.Reduces, n, p)
			inputs[p] = slices.Clone(b.Input)
		}
		start := time.Now()
		err := Run(context.Background(), tables, req, w)
		c.Elapsed += time.Since(start)
		if err != nil {
			c.Err, c.Wrong = err, -1
			return
		}
		for p := range n {
			want := expected(t0, req, inputs, p)
			if want == nil {
				continue
			}
			c.Checked += int64(len(want)) / es
			c.Wrong += countWrong(w.Bufs[p].Output, want, es)
		}
		if !c.InPlace {
			for p := range n {
				c.Checked += int64(len(inputs[p])) / es
				c.Wrong += countWrong(w.Bufs[p].Input, inputs[p], es)
			}
		}
	}
}

func countWrong(got, want []byte, es int64) int64 {
	if len(got) != len(want) {
		return int64(max(len(got), len(want))) / es
	}
	var wrong int64
	for i := int64(0); i < int64(len(want)); i += es {
		if string(got[i:i+es]) != string(want[i:i+es]) {
			wrong++
		}
	}
	return wrong
}

// expected computes physical rank p's output directly from the inputs
// (NCCL 2.25 semantics; the root is physical), or nil when the rank has no
// output.
func expected(t *optable.Table, req Request, inputs [][]byte, p int) []byte {
	n := t.NRanks
	bb := int(req.Count) * req.DataType.Size() // bytes per block
	block := func(b []byte, i int) []byte { return b[i*bb : (i+1)*bb] }
	reduce := func(blk func(q int) []byte) []byte {
		srcs := make([][]byte, n)
		for q := range srcs {
			srcs[q] = blk(q)
		}
		out := make([]byte, bb)
		if err := numeric.Reduce(req.DataType, req.RedOp, out, srcs); err != nil {
			panic(err) // unreachable: types and lengths are valid here
		}
		if req.RedOp == ir.Avg {
			if err := numeric.Divide(req.DataType, out, n); err != nil {
				panic(err)
			}
		}
		return out
	}
	R := req.Root
	switch t.Collective {
	case ir.AllReduce:
		return reduce(func(q int) []byte { return inputs[q] })
	case ir.ReduceScatter:
		return reduce(func(q int) []byte { return block(inputs[q], p) })
	case ir.Reduce:
		if p != R {
			return nil
		}
		return reduce(func(q int) []byte { return inputs[q] })
	case ir.AllGather:
		return slices.Concat(inputs...)
	case ir.Gather:
		if p != R {
			return nil
		}
		return slices.Concat(inputs...)
	case ir.Broadcast:
		return slices.Clone(inputs[R])
	case ir.Scatter:
		return slices.Clone(block(inputs[R], p))
	case ir.AllToAll:
		out := make([]byte, 0, n*bb)
		for q := 0; q < n; q++ {
			out = append(out, block(inputs[q], p)...)
		}
		return out
	case ir.SendRecv:
		return slices.Clone(inputs[(p+n-1)%n])
	}
	return nil
}

// exactInt is the largest M such that every integer in [-M, M] is exact in
// the floating-point type.
func exactInt(dt ir.DataType) int64 {
	switch dt {
	case ir.Float16:
		return 2048
	case ir.Bfloat16:
		return 256
	case ir.Fp8E4M3:
		return 16
	case ir.Fp8E5M2:
		return 8
	case ir.Float32:
		return 1 << 24
	}
	return 1 << 53
}

// prodExp bounds the sum of |exponents| of ±2^k prod inputs so that every
// partial product stays a normal number.
func prodExp(dt ir.DataType) int {
	switch dt {
	case ir.Float16, ir.Fp8E5M2:
		return 14
	case ir.Fp8E4M3:
		return 6
	case ir.Bfloat16, ir.Float32:
		return 100
	}
	return 1000
}

// fillInput writes values into b such that every order of reduction gives
// the same result (see Simulate). Sum and avg: integers whose absolute
// values over the n ranks add up to at most exactInt (each rank draws from
// its 1/n share of that budget, so every partial sum is exact); prod: ±1,
// ±2^k and 0 with exponents bounded the same way; max and min: any bit
// pattern except NaN, with -0 made +0 (max(+0, -0) depends on the order) and
// e5m2 infinities avoided (they saturate). Integers take any value (their
// arithmetic wraps, which is associative).
func fillInput(rng *rand.Rand, b []byte, dt ir.DataType, op ir.RedOp, reduces bool, n, rank int) {
	es := dt.Size()
	if !reduces || !dt.IsFloat() {
		for i := 0; i < len(b); i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], rng.Uint64())
			copy(b[i:], w[:])
		}
		return
	}
	for i := 0; i+es <= len(b); i += es {
		var v float64
		switch op {
		case ir.Sum, ir.Avg:
			share := max(exactInt(dt)/int64(n), 1)
			// With more ranks than exact integers, only exactInt of them
			// (rotating with the element) contribute ±1, the rest 0.
			if e := int64(i / es); exactInt(dt) < int64(n) && (int64(rank)+e)%int64(n) >= exactInt(dt) {
				share = 0
			}
			v = float64(rng.Int64N(2*share+1) - share)
		case ir.Prod:
			k := prodExp(dt) / n
			switch {
			case rng.IntN(20) == 0:
				v = 0
			case k == 0 || rng.IntN(2) == 0:
				v = 1
			default:
				v = math.Ldexp(1, rng.IntN(2*k+1)-k)
			}
			if rng.IntN(2) == 0 {
				v = -v
			}
		default: // max, min
			putRandomNonNaN(rng, b[i:i+es], dt)
			continue
		}
		putFloat(b[i:i+es], dt, v)
	}
}

func putFloat(b []byte, dt ir.DataType, v float64) {
	switch dt {
	case ir.Float16:
		binary.LittleEndian.PutUint16(b, numeric.F32ToF16(float32(v)))
	case ir.Bfloat16:
		binary.LittleEndian.PutUint16(b, numeric.F32ToBF16(float32(v)))
	case ir.Fp8E4M3:
		b[0] = numeric.F32ToE4M3(float32(v))
	case ir.Fp8E5M2:
		b[0] = numeric.F32ToE5M2(float32(v))
	case ir.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case ir.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

func putRandomNonNaN(rng *rand.Rand, b []byte, dt ir.DataType) {
	for {
		var x float64
		switch dt {
		case ir.Float16:
			h := uint16(rng.Uint32())
			binary.LittleEndian.PutUint16(b, h)
			x = float64(numeric.F16ToF32(h))
		case ir.Bfloat16:
			h := uint16(rng.Uint32())
			binary.LittleEndian.PutUint16(b, h)
			x = float64(numeric.BF16ToF32(h))
		case ir.Fp8E4M3:
			b[0] = uint8(rng.Uint32())
			x = float64(numeric.E4M3ToF32(b[0]))
		case ir.Fp8E5M2:
			b[0] = uint8(rng.Uint32())
			x = float64(numeric.E5M2ToF32(b[0]))
			if math.IsInf(x, 0) {
				continue
			}
		case ir.Float32:
			u := rng.Uint32()
			binary.LittleEndian.PutUint32(b, u)
			x = float64(math.Float32frombits(u))
		case ir.Float64:
			u := rng.Uint64()
			binary.LittleEndian.PutUint64(b, u)
			x = math.Float64frombits(u)
		}
		if math.IsNaN(x) {
			continue
		}
		if x == 0 {
			clear(b) // +0
		}
		return
	}
}
