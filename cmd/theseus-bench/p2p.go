package main

import (
	"fmt"
	"math/rand"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/ir"
)

// The point-to-point rows (docs/theseus-bench.md, "Point-to-point"):
// sendrecv, nccl-tests' ring (each rank sends its buffer to the next and
// receives the previous one's, one ncclSend and one ncclRecv in a group),
// and alltoallv over counts matrices of three shapes. Neither has an
// in-place form (nccl-tests does not check in-place sendrecv), so their
// in-place columns are N/A.

// collAlltoAllv stands for ncclAlltoAllv among the bench's collectives
// (it is no IR collective: the point-to-point engine runs it).
const collAlltoAllv = ir.NumCollectives

// p2pColls are the point-to-point rows --coll accepts besides allColls;
// "all" does not include them.
var p2pColls = map[string]ir.Collective{"sendrecv": ir.SendRecv, "alltoallv": collAlltoAllv}

// collName is a row's collective column.
func collName(c ir.Collective) string {
	if c == collAlltoAllv {
		return "alltoallv"
	}
	return c.String()
}

// The alltoallv matrix shapes (--matrix), shown in the redop column.
var matrixKinds = []string{"random", "skewed", "zero"}

func parseMatrices(s string) ([]redop, error) {
	var out []redop
	for _, f := range strings.Split(s, ",") {
		k := strings.ToLower(strings.TrimSpace(f))
		if k == "all" {
			out = out[:0]
			for _, m := range matrixKinds {
				out = append(out, redop{Name: m})
			}
			return out, nil
		}
		found := false
		for _, m := range matrixKinds {
			if m == k {
				out, found = append(out, redop{Name: m}), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown matrix %q (want random, skewed, zero, a comma-separated list, or all)", f)
		}
	}
	return out, nil
}

// alltoallvMatrix is the counts matrix (elements, row = sender) of kind
// for n ranks each sending count elements in all: random splits each
// row at random (about a quarter of the cells empty); skewed sends 90% of
// each row to 4 hot experts (ranks 0..3) and spreads the rest, as MoE
// routing does; zero is empty. The same on every rank.
func alltoallvMatrix(kind string, n int, count int64, seed uint64) []int64 {
	m := make([]int64, n*n)
	if kind == "zero" || count == 0 {
		return m
	}
	rng := rand.New(rand.NewSource(int64(seed)*131 + int64(n)))
	for i := range n {
		row := m[i*n : i*n+n]
		w := make([]float64, n)
		var tot float64
		for j := range w {
			switch kind {
			case "skewed":
				hot := min(4, n)
				if j < hot {
					w[j] = 0.9 / float64(hot)
				} else {
					w[j] = 0.1 / float64(max(n-hot, 1))
				}
			default:
				if rng.Intn(4) != 0 {
					w[j] = rng.Float64()
				}
			}
			tot += w[j]
		}
		var given int64
		for j := range row {
			if tot > 0 {
				row[j] = int64(float64(count) * w[j] / tot)
			}
			given += row[j]
		}
		for j := 0; given < count; j = (j + 1) % n { // the rounding's remainder, to cells the shape uses
			if w[j] > 0 || tot == 0 {
				row[j]++
				given++
			}
		}
	}
	return m
}

// p2pByte is byte i of what rank src sends rank dst in check run rep.
func p2pByte(src, dst int, rep uint64, i int64) byte {
	return byte(int64(src*37+dst*11) + int64(rep)*3 + i*7 + i>>8)
}

// runP2PRow runs a sendrecv or alltoallv row on this rank and aggregates
// it (a collective step, as runRow).
func (b *rankBench) runP2PRow(p *plan, rs rowSpec) (Row, error) {
	n, me := b.c.NRanks(), b.c.Rank()
	es := int64(rs.Type.T.Size())
	count := rs.Size / es
	row := Row{Collective: collName(rs.Coll), Bytes: count * es, Count: count, Type: rs.Type.Name, RedOp: rs.Op.Name, Root: -1}
	send, recv := b.send, b.recv
	var call func() error
	var expect func(rep uint64) []byte
	var input func(rep uint64) []byte
	recvBytes := count * es
	switch rs.Coll {
	case ir.SendRecv:
		row.RedOp = "none"
		next, prev := (me+1)%n, (me+n-1)%n
		call = func() error {
			b.c.GroupStart()
			b.c.Send(send, count, rs.Type.T, next, nil)
			b.c.Recv(recv, count, rs.Type.T, prev, nil)
			return b.c.GroupEnd()
		}
		input = func(rep uint64) []byte { return pattern(me, next, rep, count*es) }
		expect = func(rep uint64) []byte { return pattern(prev, me, rep, count*es) }
	default:
		if rs.Op.Name == "zero" {
			row.Bytes, row.Count = 0, 0
		}
		m := alltoallvMatrix(rs.Op.Name, n, count, p.Seed)
		recvBytes = 0
		for i := range n {
			recvBytes += m[i*n+me] * es
		}
		// The receive buffer holds this rank's column (a hot expert's is
		// larger than the size), and the matrix's device copy.
		r, err := b.c.MemAlloc(max(recvBytes, 16))
		if err != nil {
			return row, err
		}
		defer b.c.MemFree(r)
		recv = r
		gpu, err := b.c.MemAlloc(int64(8 * n * n))
		if err != nil {
			return row, err
		}
		defer b.c.MemFree(gpu)
		raw := make([]byte, 8*n*n)
		for i, v := range m {
			putInt64(raw[8*i:], v)
		}
		if err := b.mem.Write(gpu, raw); err != nil {
			return row, err
		}
		call = func() error { return b.c.AlltoAllv(send, recv, m, gpu, rs.Type.T, nil) }
		input = func(rep uint64) []byte {
			var out []byte
			for j := range n {
				out = append(out, pattern(me, j, rep, m[me*n+j]*es)...)
			}
			return out
		}
		expect = func(rep uint64) []byte {
			var out []byte
			for i := range n {
				out = append(out, pattern(i, me, rep, m[i*n+me]*es)...)
			}
			return out
		}
	}
	iters, warmup := iterations(row.Bytes, p.Iters, p.Warmup, p.ItersOK, p.WarmOK, p.Check > 0)
	wrong := int64(-1)
	if p.Check > 0 {
		wrong = 0
		for rep := range uint64(p.Check) {
			if err := b.mem.Fill(recv, recvBytes, poison); err != nil {
				return row, err
			}
			if err := b.mem.Write(send, input(rep)); err != nil {
				return row, err
			}
			if err := call(); err != nil {
				return row, fmt.Errorf("%s %d B %s %s: %w", row.Collective, row.Bytes, rs.Type.Name, row.RedOp, err)
			}
			got, err := b.mem.Read(recv, recvBytes)
			if err != nil {
				return row, err
			}
			wrong += countWrong(got, expect(rep), int(es))
		}
	}
	for range warmup {
		if err := call(); err != nil {
			return row, err
		}
	}
	start := time.Now()
	for range iters {
		if err := call(); err != nil {
			return row, err
		}
	}
	sec := time.Since(start).Seconds() / float64(max(iters, 1))
	info := b.c.LastCall()
	sum, err := b.agg.Sum([]int64{int64(sec * 1e9), wrong, int64(info.Schedule), int64(info.Schedule) * int64(info.Schedule)})
	if err != nil {
		return row, err
	}
	x := Result{TimeUS: float64(sum[0]) / float64(n) / 1e3, Iters: iters, Warmup: warmup, ScheduleID: info.Schedule,
		Schedule:   p2pScheduleName(info.Name),
		Consistent: sum[2] == int64(n)*int64(info.Schedule) && sum[3] == int64(n)*int64(info.Schedule)*int64(info.Schedule)}
	if p.Check > 0 {
		w := sum[1]
		x.Wrong = &w
	}
	x.AlgBW, x.BusBW = bandwidth(rs.Coll, row.Count, int(es), n, x.TimeUS/1e6)
	row.OutOfPlace = x
	row.InPlace = Result{NA: true, Schedule: x.Schedule, ScheduleID: x.ScheduleID, Consistent: true}
	return row, nil
}

// p2pScheduleName is the schedule column of a point-to-point row: "p2p",
// or the "gen": "p2p" entry's name in parentheses.
func p2pScheduleName(name string) string {
	if i := strings.Index(name, "("); i >= 0 && strings.HasSuffix(name, ")") {
		if inner := name[i+1 : len(name)-1]; inner != "built-in parameters" {
			return "p2p:" + strings.ReplaceAll(inner, " ", "_")
		}
	}
	return "p2p"
}

// pattern is n bytes of what src sends dst in check run rep.
func pattern(src, dst int, rep uint64, n int64) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = p2pByte(src, dst, rep, int64(i))
	}
	return out
}
