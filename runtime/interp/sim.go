package interp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/reference"
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
	// OnCase, when set, is called after each case with its result, how
	// many cases are done (1-based) and how many there are (theseusc sim
	// prints a line per case as it finishes).
	OnCase func(c CaseResult, done, total int)
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
			if p.SliceBytes >= ir.Unsliced {
				o.Slices = []int64{1} // the program must never be replayed (ir.Unsliced)
			}
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
	total := len(o.DataTypes) * len(o.RedOps) * len(arrangements) * len(o.Counts) * len(o.Slices) * len(o.PacketTypes) * len(roots)
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
								if o.OnCase != nil {
									o.OnCase(c, int(caseNo), total)
								}
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
			reference.Fill(b.Input, c.DataType, c.RedOp, c.Reduces, n, p, rng.Uint64)
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
			want := reference.Output(t0.Collective, n, p, req.Root, req.Count, req.DataType, req.RedOp, func(q int) []byte { return inputs[q] })
			if want == nil {
				continue
			}
			c.Checked += int64(len(want)) / es
			c.Wrong += reference.Wrong(w.Bufs[p].Output, want, int(es))
		}
		if !c.InPlace {
			for p := range n {
				c.Checked += int64(len(inputs[p])) / es
				c.Wrong += reference.Wrong(w.Bufs[p].Input, inputs[p], int(es))
			}
		}
	}
}
