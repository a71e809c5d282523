package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	collref "github.com/theseus-ccl/theseus/runtime/interp/reference"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// poison is the byte written over a rank's output before a check run, so
// that an output the schedule never writes cannot pass for a correct one.
const poison = 0xA5

// plan is what every rank runs, identical on every rank.
type plan struct {
	Colls []ir.Collective
	Types []dtype
	Ops   []redop
	// Matrices are the alltoallv rows' matrix shapes (p2p.go), shown in
	// the redop column.
	Matrices []redop
	Sizes    []int64
	Root     int
	Iters    int
	Warmup   int
	ItersOK  bool // -n given: no scaling
	WarmOK   bool // -w given: no scaling
	Check    int
	Seed     uint64
}

// rowSpec is one row to run.
type rowSpec struct {
	Coll ir.Collective
	Type dtype
	Op   redop
	Size int64 // requested size in bytes
}

// rows lists the plan's rows in order: per collective, per datatype, per
// reduction (collectives that reduce), per size.
func (p *plan) rows() []rowSpec {
	var out []rowSpec
	for _, c := range p.Colls {
		ops := p.Ops
		switch {
		case c == collAlltoAllv:
			ops = p.Matrices
		case !c.Reduces():
			ops = []redop{{"none", theseus.Sum}}
		}
		for _, t := range p.Types {
			for _, o := range ops {
				for _, s := range p.Sizes {
					out = append(out, rowSpec{c, t, o, s})
					if c == collAlltoAllv && o.Name == "zero" {
						break // an empty matrix moves nothing whatever the size: one row
					}
				}
			}
		}
	}
	return out
}

// rankBench is one rank's side of the benchmark.
type rankBench struct {
	c    *theseus.Comm
	mem  memIO
	agg  *aggregator
	refs *references
	// send and recv are this rank's buffers, bufBytes bytes each (the
	// largest message size), allocated once as nccl-tests does.
	send, recv theseus.Ptr
	bufBytes   int64
	// st, when set, is the stream the calls are enqueued on: the warmup
	// and the timed runs back to back, each loop's time including one
	// wait for the stream at its end (as nccl-tests times them); nil: each
	// call waits for its launch (the communicator's own stream).
	st theseus.Stream
}

func newRankBench(c *theseus.Comm, refs *references, bufBytes int64) (*rankBench, error) {
	b := &rankBench{c: c, mem: memIO{c}, refs: refs, bufBytes: max(bufBytes, 16)}
	var err error
	if b.send, err = c.MemAlloc(b.bufBytes); err != nil {
		return nil, err
	}
	if b.recv, err = c.MemAlloc(b.bufBytes); err != nil {
		c.MemFree(b.send)
		return nil, err
	}
	if b.agg, err = newAggregator(c); err != nil {
		c.MemFree(b.send)
		c.MemFree(b.recv)
		return nil, err
	}
	return b, nil
}

// Free releases the buffers (after the communicators that used them are
// destroyed, seed Known Issue 1).
func (b *rankBench) Free() {
	b.c.MemFree(b.send)
	b.c.MemFree(b.recv)
	b.agg.Free()
}

// layout is where one arrangement puts a rank's input and output.
type layout struct {
	send, recv theseus.Ptr
	inBytes    int64
	outBytes   int64
	// base and span are the bytes poisoned before a check run: the whole
	// in-place buffer, or the output.
	base theseus.Ptr
	span int64
}

func (b *rankBench) layoutOf(k collref.Case) layout {
	in, out := k.Bytes(b.c.Rank())
	if k.InPlace {
		if size, inOff, outOff, ok := k.InPlaceLayout(b.c.Rank()); ok {
			return layout{send: b.recv + theseus.Ptr(inOff), recv: b.recv + theseus.Ptr(outOff), inBytes: in, outBytes: out,
				base: b.recv, span: size}
		}
	}
	return layout{send: b.send, recv: b.recv, inBytes: in, outBytes: out, base: b.recv, span: out}
}

// call runs the collective once: synchronously, or enqueued on st.
func (b *rankBench) call(k collref.Case, l layout, t dtype, o redop) error {
	return b.c.Collective(k.Coll, l.send, l.recv, k.Count, t.T, o.Op, k.Root, b.st)
}

// wait waits for st's launches (nothing without st: each call waited).
func (b *rankBench) wait() error {
	if b.st == nil {
		return nil
	}
	return b.st.Synchronize()
}

// checkRun writes fresh inputs, runs once and counts the wrong elements of
// this rank's output.
func (b *rankBench) checkRun(ref *reference, k collref.Case, l layout, t dtype, o redop) (int64, error) {
	rank := b.c.Rank()
	if err := b.mem.Fill(l.base, l.span, poison); err != nil {
		return 0, err
	}
	if err := b.mem.Write(l.send, ref.Input(rank)); err != nil {
		return 0, err
	}
	if err := b.call(k, l, t, o); err != nil {
		return 0, err
	}
	if err := b.wait(); err != nil {
		return 0, err
	}
	want := ref.Expected(rank)
	got, err := b.mem.Read(l.recv, l.outBytes)
	if err != nil {
		return 0, err
	}
	return countWrong(got, want, t.T.Size()), nil
}

// arrangement runs one arrangement of a row: check runs, warmup runs, timed
// runs. It returns this rank's time per call, wrong elements (-1 when not
// checked) and the schedule of the last call.
func (b *rankBench) arrangement(p *plan, ref *reference, k collref.Case, t dtype, o redop, iters, warmup int) (sec float64, wrong int64, sched theseus.CallInfo, err error) {
	l := b.layoutOf(k)
	wrong = -1
	if p.Check > 0 {
		wrong = 0
		for range p.Check {
			w, err := b.checkRun(ref, k, l, t, o)
			if err != nil {
				return 0, 0, sched, err
			}
			wrong += w
		}
	}
	for range warmup {
		if err := b.call(k, l, t, o); err != nil {
			return 0, 0, sched, err
		}
	}
	if err := b.wait(); err != nil {
		return 0, 0, sched, err
	}
	start := time.Now()
	for range iters {
		if err := b.call(k, l, t, o); err != nil {
			return 0, 0, sched, err
		}
	}
	if err := b.wait(); err != nil {
		return 0, 0, sched, err
	}
	sec = time.Since(start).Seconds() / float64(max(iters, 1))
	return sec, wrong, b.c.LastCall(), nil
}

// runRow runs one row on this rank and aggregates it over the ranks (a
// collective step: every rank calls it for the same rows in the same
// order). Every rank returns the same Row.
func (b *rankBench) runRow(p *plan, rs rowSpec) (Row, error) {
	if rs.Coll == ir.SendRecv || rs.Coll == collAlltoAllv {
		return b.runP2PRow(p, rs)
	}
	n := b.c.NRanks()
	es := rs.Type.T.Size()
	sh := shapeOf(rs.Coll, rs.Size, es, n)
	dt, _ := rs.Type.T.IR()
	op, _ := rs.Op.Op.IR()
	root := -1
	if rs.Coll.Rooted() {
		root = p.Root
	}
	key := refKey{Coll: rs.Coll, DataType: dt, RedOp: op, Count: sh.Count, NRanks: n, Root: max(root, 0), Seed: p.Seed}
	if !rs.Coll.Reduces() {
		key.RedOp = ir.Sum
	}
	ref := b.refs.Get(key)
	defer b.refs.Done(key)
	iters, warmup := iterations(sh.Bytes, p.Iters, p.Warmup, p.ItersOK, p.WarmOK, p.Check > 0)
	row := Row{Collective: rs.Coll.String(), Bytes: sh.Bytes, Count: sh.Count, Type: rs.Type.Name, RedOp: rs.Op.Name, Root: root}
	// One SUM-allreduce carries every rank's numbers: times in ns, wrong
	// counts, and the schedule ids with their squares (equal sums of id and
	// id² over the ranks mean every rank ran the same schedule).
	vec := make([]int64, 0, 8)
	var infos [2]theseus.CallInfo
	for i, inPlace := range []bool{false, true} {
		k := collref.Case{Coll: key.Coll, DataType: key.DataType, RedOp: key.RedOp, Count: key.Count, NRanks: n,
			Root: key.Root, InPlace: inPlace, Seed: key.Seed}
		sec, wrong, info, err := b.arrangement(p, ref, k, rs.Type, rs.Op, iters, warmup)
		if err != nil {
			return row, fmt.Errorf("%s %d B %s %s %s: %w", rs.Coll, sh.Bytes, rs.Type.Name, rs.Op.Name, arrName(inPlace), err)
		}
		infos[i] = info
		id := int64(info.Schedule)
		if info.Skipped {
			id = -1
		}
		vec = append(vec, int64(sec*1e9), wrong, id, id*id)
	}
	sum, err := b.agg.Sum(vec)
	if err != nil {
		return row, fmt.Errorf("aggregating %s %d B: %w", rs.Coll, sh.Bytes, err)
	}
	for i := range 2 {
		s := sum[4*i : 4*i+4]
		id := int64(infos[i].Schedule)
		if infos[i].Skipped {
			id = -1
		}
		x := Result{TimeUS: float64(s[0]) / float64(n) / 1e3, Iters: iters, Warmup: warmup,
			ScheduleID: int(id), Schedule: scheduleName(infos[i].Name),
			Consistent: s[2] == int64(n)*id && s[3] == int64(n)*id*id}
		if infos[i].Skipped {
			x.Schedule, x.ScheduleID = "-", -1
		}
		if p.Check > 0 {
			w := s[1]
			x.Wrong = &w
		}
		x.AlgBW, x.BusBW = bandwidth(rs.Coll, sh.Count, es, n, x.TimeUS/1e6)
		if i == 0 {
			row.OutOfPlace = x
		} else {
			row.InPlace = x
		}
	}
	runtime.KeepAlive(ref)
	return row, nil
}

func arrName(inPlace bool) string {
	if inPlace {
		return "in place"
	}
	return "out of place"
}

// aggregator combines small int64 vectors over the ranks with the
// communicator itself (an in-place SUM-allreduce of int64), so the same
// code serves ranks as goroutines and ranks as processes.
type aggregator struct {
	c   *theseus.Comm
	mem memIO
	buf theseus.Ptr
}

// aggBytes is the aggregator's buffer: 512 int64 per call.
const aggBytes = 4096

func newAggregator(c *theseus.Comm) (*aggregator, error) {
	p, err := c.MemAlloc(aggBytes)
	if err != nil {
		return nil, err
	}
	return &aggregator{c: c, mem: memIO{c}, buf: p}, nil
}

func (a *aggregator) Free() { a.c.MemFree(a.buf) }

// Sum returns the element-wise sum of v over the ranks.
func (a *aggregator) Sum(v []int64) ([]int64, error) {
	return a.reduce(v, theseus.Sum)
}

// Max returns the element-wise maximum of v over the ranks.
func (a *aggregator) Max(v []int64) ([]int64, error) {
	return a.reduce(v, theseus.Max)
}

func (a *aggregator) reduce(v []int64, op theseus.RedOp) ([]int64, error) {
	out := make([]int64, len(v))
	const per = aggBytes / 8
	for lo := 0; lo < len(v); lo += per {
		hi := min(lo+per, len(v))
		raw := make([]byte, 8*(hi-lo))
		for i, x := range v[lo:hi] {
			putInt64(raw[8*i:], x)
		}
		if err := a.mem.Write(a.buf, raw); err != nil {
			return nil, err
		}
		if err := a.c.AllReduce(a.buf, a.buf, int64(hi-lo), theseus.Int64, op, nil); err != nil {
			return nil, err
		}
		got, err := a.mem.Read(a.buf, int64(len(raw)))
		if err != nil {
			return nil, err
		}
		for i := range hi - lo {
			out[lo+i] = getInt64(got[8*i:])
		}
	}
	return out, nil
}

func putInt64(b []byte, v int64) {
	u := uint64(v)
	for i := range 8 {
		b[i] = byte(u >> (8 * i))
	}
}

func getInt64(b []byte) int64 {
	var u uint64
	for i := range 8 {
		u |= uint64(b[i]) << (8 * i)
	}
	return int64(u)
}
