//go:build linux

package theseus

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

var fullMatrix = flag.Bool("theseus.full", false,
	"run the full collective matrix (every collective × datatype × redop × count × arrangement) instead of the representative subset")

// ncclType and ncclOp invert the IR mapping tables.
func ncclType(t ir.DataType) DataType {
	for d := DataType(0); d < NumTypes; d++ {
		if x, _ := d.IR(); x == t {
			return d
		}
	}
	return NumTypes
}

func ncclOp(o ir.RedOp) RedOp {
	for r := RedOp(0); r < NumOps; r++ {
		if x, _ := r.IR(); x == o {
			return r
		}
	}
	return NumOps
}

var allColls = []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast, ir.Reduce, ir.AllToAll, ir.Gather, ir.Scatter}

// alignedLarge is the "aligned large" count: a multiple of every chunk,
// slice and 16-byte unit the schedules use.
const alignedLarge = 1 << 20

// matrixCases lists the cases of the collective matrix for n ranks. Full:
// every collective × datatype × redop (reducing collectives) × count {0, 1,
// 7, 1000003, 2^20} × in place / out of place (roots rotate with the case).
// The default subset keeps every dimension but not their product (the
// interpreter needs seconds for a 16 MB reduce-scatter on two cores):
//
//   - every collective × every datatype at count 7, in both arrangements;
//   - every redop × every datatype for allreduce at count 7, and every
//     redop for reducescatter and reduce at count 1003 (float32);
//   - every collective at counts 0, 1, 7 in both arrangements and at 1000003
//     and 2^20 in one arrangement each (float32, sum);
//   - allreduce at count 4099 (a schedule that reads the peers' input
//     buffers, so registrations and staging) in four datatypes, both
//     arrangements.
func matrixCases(n int, full bool) []devicetest.Case {
	var cs []devicetest.Case
	add := func(coll ir.Collective, dt ir.DataType, op ir.RedOp, count int64, inplace bool) {
		cs = append(cs, devicetest.Case{Coll: coll, DataType: dt, RedOp: op, Count: count, NRanks: n,
			Root: len(cs) % n, InPlace: inplace, Seed: uint64(len(cs) + 1)})
	}
	counts := []int64{0, 1, 7, 1000003, alignedLarge}
	if full {
		for _, coll := range allColls {
			ops := []ir.RedOp{ir.Sum}
			if coll.Reduces() {
				ops = ir.AllRedOps()
			}
			for _, dt := range ir.AllDataTypes() {
				for _, op := range ops {
					for _, count := range counts {
						for _, inplace := range []bool{false, true} {
							add(coll, dt, op, count, inplace)
						}
					}
				}
			}
		}
		return cs
	}
	for _, coll := range allColls {
		for _, dt := range ir.AllDataTypes() {
			for _, inplace := range []bool{false, true} {
				add(coll, dt, ir.Sum, 7, inplace)
			}
		}
	}
	for _, dt := range ir.AllDataTypes() {
		for _, op := range ir.AllRedOps() {
			add(ir.AllReduce, dt, op, 7, (int(dt)+int(op))%2 == 0)
		}
	}
	for _, coll := range []ir.Collective{ir.ReduceScatter, ir.Reduce} {
		for _, op := range ir.AllRedOps() {
			add(coll, ir.Float32, op, 1003, op%2 == 1)
		}
	}
	for i, coll := range allColls {
		for _, count := range counts {
			if count < 1000 {
				add(coll, ir.Float32, ir.Sum, count, false)
				add(coll, ir.Float32, ir.Sum, count, true)
			} else {
				add(coll, ir.Float32, ir.Sum, count, (i+int(count))%2 == 0)
			}
		}
	}
	for _, dt := range []ir.DataType{ir.Float32, ir.Bfloat16, ir.Int64, ir.Fp8E5M2} {
		add(ir.AllReduce, dt, ir.Sum, 4099, false)
		add(ir.AllReduce, dt, ir.Sum, 4099, true)
	}
	return cs
}

// rankResult is one rank's outcome over a list of cases.
type rankResult struct {
	Checked, Wrong int64
	Cases          int
	Err            error
	// Schedules counts the cases each schedule ran (by file).
	Schedules map[string]int
}

// runCases runs cases on one rank, in order, in buffers reused from case
// to case (as nccl-tests does; fresh memory costs page faults that dwarf
// small collectives). Every third case passes Go memory (foreign to the
// backend) instead of MemAlloc memory, so that schedules reaching peers'
// buffers stage it.
func runCases(c *Comm, cases []devicetest.Case) rankResult {
	res := rankResult{Schedules: map[string]int{}}
	rank := c.Rank()
	var ar arena
	defer ar.free(c)
	for i, k := range cases {
		goMem := i%3 == 2
		b, err := ar.buffers(c, k, goMem)
		if err != nil {
			res.Err = fmt.Errorf("case %d %v: %w", i, k, err)
			return res
		}
		err = c.Collective(k.Coll, b.send, b.recv, k.Count, ncclType(k.DataType), ncclOp(k.RedOp), k.Root, nil)
		if err != nil {
			res.Err = fmt.Errorf("case %d %v (goMem %v): %w", i, k, goMem, err)
			return res
		}
		want := k.Expected(rank)
		w := devicetest.Wrong(b.out, want, k.DataType.Size())
		res.Checked += int64(len(want) / k.DataType.Size())
		res.Wrong += w
		res.Cases++
		if lc := c.LastCall(); !lc.Skipped {
			res.Schedules[lc.Name]++
		}
		if w != 0 && res.Err == nil {
			res.Err = fmt.Errorf("case %d %v (goMem %v, schedule %s): %d of %d elements wrong", i, k, goMem, c.LastCall().Name, w, len(want)/k.DataType.Size())
		}
	}
	runtime.KeepAlive(ar.goMem)
	return res
}

type caseBufs struct {
	send, recv Ptr
	out        []byte
}

// arena holds one rank's two buffers of each kind (backend, Go), grown as
// cases need.
type arena struct {
	dev    [2]Ptr
	devMem [2][]byte
	goMem  [2][]byte
	size   int64
}

func (a *arena) free(c *Comm) {
	for _, p := range a.dev {
		if p != 0 {
			c.MemFree(p)
		}
	}
	*a = arena{}
}

func (a *arena) grow(c *Comm, n int64) error {
	if n <= a.size {
		return nil
	}
	n = max(n, 2*a.size, 1<<12)
	a.free(c)
	for i := range 2 {
		p, err := c.MemAlloc(n)
		if err != nil {
			return err
		}
		a.dev[i] = p
		if a.devMem[i], err = c.HostBytes(p, n); err != nil {
			return err
		}
		// Go memory, 64-byte aligned as device allocations are (send and
		// receive must be congruent mod 16).
		raw := make([]byte, n+64)
		off := (64 - int(HostPtr(raw)%64)) % 64
		a.goMem[i] = raw[off : off+int(n)]
	}
	a.size = n
	return nil
}

// buffers lays out one rank's buffers for k, input written in and output
// filled with a pattern.
func (a *arena) buffers(c *Comm, k devicetest.Case, goMem bool) (caseBufs, error) {
	rank := c.Rank()
	in, out := k.Bytes(rank)
	if err := a.grow(c, max(in, out)); err != nil {
		return caseBufs{}, err
	}
	mem, base := a.devMem, a.dev
	if goMem {
		mem = a.goMem
		base = [2]Ptr{HostPtr(a.goMem[0]), HostPtr(a.goMem[1])}
	}
	input := k.Input(rank)
	var b caseBufs
	if size, inOff, outOff, ok := k.InPlaceLayout(rank); k.InPlace && ok {
		m := mem[0][:size]
		for i := range m {
			m[i] = 0xa5
		}
		copy(m[inOff:], input)
		if in > 0 {
			b.send = base[0] + Ptr(inOff)
		}
		if out > 0 {
			b.recv = base[0] + Ptr(outOff)
			b.out = m[outOff : outOff+out]
		}
		return b, nil
	}
	copy(mem[0], input)
	o := mem[1][:out]
	for i := range o {
		o[i] = 0xa5
	}
	if in > 0 {
		b.send = base[0]
	}
	if out > 0 {
		b.recv, b.out = base[1], o
	}
	return b, nil
}

// localComms makes n in-process ranks reading a Standard context.
func localComms(t testing.TB, n int, opts func(*Config)) ([]*Comm, string) {
	t.Helper()
	dir := t.TempDir()
	if err := commtest.WriteStandard(dir, n); err != nil {
		t.Fatal(err)
	}
	return commsIn(t, n, dir, opts), dir
}

// commsIn makes n in-process ranks on the host backend reading the
// context in dir (20 s timeout, 1 MiB initial scratch, then opts),
// destroyed when the test ends.
func commsIn(t testing.TB, n int, dir string, opts func(*Config)) []*Comm {
	t.Helper()
	cfg := Config{Backend: "host", ContextDir: dir}
	cfg.Options.Timeout = 20 * time.Second
	cfg.Options.InitialScratch = 1 << 20
	if opts != nil {
		opts(&cfg)
	}
	comms, err := NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	return comms
}

// onEach runs f on every rank concurrently.
func onEach[T any](comms []*Comm, f func(c *Comm) T) []T {
	return ranks.Each(len(comms), func(r int) T { return f(comms[r]) })
}
