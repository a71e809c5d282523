package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// The hot-swap demonstration. The ranks issue back-to-back allreduces on a
// communicator of their own that reads a private copy of the context and
// agrees on it every hsPeriod requests. After request hsSlowAt a value of
// an exogenous attribute is appended to the copy's value log, after request
// hsBackAt the value that undoes it:
//
//   - slow_rank = n/2, then -1: the policies demote the schedules that relay
//     through the slow rank and promote one that avoids it, then return
//     (at 3 ranks or more: at 2 nobody relays);
//   - ll_max_bytes = 1 MiB, then 65536: the 512 KiB allreduce moves from the
//     Simple ring to the LL one-shot, then back (any nranks >= 2).
//
// Every rank records the schedule of every request and its host wall time,
// and every output is checked; the ranks' records are compared with a
// MAX-allreduce of the ids and of their negations, and each request's time
// is the maximum over the ranks (the collective ends when its slowest rank
// does).
//
// The publications fall mid-epoch on purpose: a rank cannot pass request
// hsSlowAt+1 before rank 0 has finished request hsSlowAt (each request is
// an allreduce), so every rank's next epoch (request 25 with the defaults)
// reads the new value and all of them switch there.
const (
	hsBytes    = 512 << 10
	hsRequests = 64
	hsPeriod   = 8
	hsSlowAt   = 20
	hsBackAt   = 44
)

// The attributes --hotswap-attr chooses from, and auto.
const (
	hsAuto     = "auto"
	hsSlowRank = "slow_rank"
	hsLLMax    = "ll_max_bytes"
)

// hsAttrs lists the attributes the demonstration can flip, in the order
// --hotswap-attr's help names them.
var hsAttrs = []string{hsSlowRank, hsLLMax}

// hsValues returns the value attr is published with after request hsSlowAt
// (away) and after hsBackAt (back), at n ranks: slow_rank marks the middle
// rank slow and then none; ll_max_bytes moves the LL/Simple crossover from
// its default (256 KiB in the default context) to 1 MiB, above the
// demonstration's 512 KiB, and then to 64 KiB, below it.
func hsValues(attr string, n int) (away, back int) {
	if attr == hsLLMax {
		return 1 << 20, 64 << 10
	}
	return n / 2, -1
}

// chooseHotSwapAttr resolves --hotswap-attr (flag) at n ranks, given
// whether every rank's context declares slow_rank and ll_max_bytes as
// exogenous ints. auto is slow_rank at 3 ranks or more (a rank that relays
// can be slow), ll_max_bytes at 1 or 2 ranks (nobody relays there, so
// slow_rank switches nothing) or when the context lacks slow_rank, and
// slow_rank again when it lacks ll_max_bytes. skipped says why the
// demonstration cannot run ("" when it can).
func chooseHotSwapAttr(flag string, n int, hasSlow, hasLL bool) (attr, skipped string) {
	has := map[string]bool{hsSlowRank: hasSlow, hsLLMax: hasLL}
	switch {
	case flag != hsAuto:
		attr = flag
	case !hasSlow && !hasLL:
		return "", "the selection context declares neither slow_rank nor ll_max_bytes as an exogenous int attribute"
	case n >= 3 && hasSlow || !hasLL:
		attr = hsSlowRank
	default:
		attr = hsLLMax
	}
	if !has[attr] {
		return "", "the selection context declares no exogenous int attribute " + attr
	}
	return attr, ""
}

// declaresExoInt reports whether the context's attribute manifest declares
// name as an exogenous int (an attribute the demonstration can publish).
func declaresExoInt(dir, name string) bool {
	f, err := os.Open(filepath.Join(dir, manifest.AttributeManifest))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), manifest.MaxLineBytes)
	for line := 1; sc.Scan(); line++ {
		a, ds := manifest.ParseAttribute(manifest.AttributeManifest, line, sc.Bytes(), manifest.Options{})
		if len(ds) == 0 && a.Name == name {
			return a.Origin.String() == "exo" && a.Type.String() == "int"
		}
	}
	return false
}

// copyContext copies the regular files of context dir src into dst (a new
// directory), keeping the layout, so that the demonstration can append to
// the copy's value log without touching src.
func copyContext(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// hsRank is one rank's record of the demonstration.
type hsRank struct {
	ids       []int64
	ns        []int64 // host wall time of each request, nanoseconds
	names     map[int64]string
	wrong     int64
	migration map[int]*MigrationInfo // rank 0: request → L1 migration at it
	reused    map[int]bool           // rank 0: request → switched to a materialised schedule
}

// runHotSwap runs this rank's part on demo communicator c. publish appends
// attr's next value to the context this rank's communicator reads (a no-op
// on ranks that share another rank's copy): away after request hsSlowAt,
// back after hsBackAt.
//
// Each request is timed on the host from just before the call to its
// return. The call has no stream, so it runs on the communicator's own
// stream and returns only after synchronising it (theseus.Comm.AllReduce
// with a nil Stream: the launch has completed on the device); the poison
// fill before it and the read and check of the output after it are not
// timed.
func runHotSwap(c *theseus.Comm, refs *references, attr string, away, back int, publish func(v int) error) (*hsRank, error) {
	n := c.NRanks()
	rank := c.Rank()
	count := int64(hsBytes / 4)
	key := refKey{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: n, Seed: 0x5eed}
	ref := refs.Get(key)
	defer refs.Done(key)
	mem := memIO{c}
	send, err := c.MemAlloc(hsBytes)
	if err != nil {
		return nil, err
	}
	defer c.MemFree(send)
	recv, err := c.MemAlloc(hsBytes)
	if err != nil {
		return nil, err
	}
	defer c.MemFree(recv)
	if err := mem.Write(send, ref.Input(rank)); err != nil {
		return nil, err
	}
	want := ref.Expected(rank)
	rec := &hsRank{names: map[int64]string{}, migration: map[int]*MigrationInfo{}, reused: map[int]bool{}}
	prev := c.Stats().Executor
	for i := 1; i <= hsRequests; i++ {
		if err := mem.Fill(recv, hsBytes, poison); err != nil {
			return nil, err
		}
		start := time.Now()
		err := c.AllReduce(send, recv, count, theseus.Float32, theseus.Sum, nil)
		elapsed := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("hot swap, request %d: %w", i, err)
		}
		rec.ns = append(rec.ns, max(elapsed.Nanoseconds(), 1))
		got, err := mem.Read(recv, hsBytes)
		if err != nil {
			return nil, err
		}
		rec.wrong += countWrong(got, want, 4)
		info := c.LastCall()
		id := int64(info.Schedule)
		rec.ids = append(rec.ids, id)
		rec.names[id] = scheduleName(info.Name)
		st := c.Stats().Executor
		if st.L1Migrations > prev.L1Migrations {
			m := st.LastMigration
			rec.migration[i] = &MigrationInfo{FromID: m.From, ToID: m.To, KeptSems: m.Kept, Rebased: m.Rebased,
				ChannelEnds: m.Created.ChannelEnds, Semaphores: m.Created.Semaphores, Messages: m.Created.BootstrapMessages}
		} else if st.L1Hits > prev.L1Hits {
			rec.reused[i] = true
		}
		prev = st
		switch i {
		case hsSlowAt:
			err = publish(away)
		case hsBackAt:
			err = publish(back)
		}
		if err != nil {
			return nil, fmt.Errorf("hot swap: publishing %s: %w", attr, err)
		}
	}
	return rec, nil
}

// summarizeHotSwap compares the ranks' records (a collective step on agg's
// communicator) and, on every rank, returns the demonstration's outcome as
// rank 0 saw it, with each request's time the maximum over the ranks.
func summarizeHotSwap(agg *aggregator, rec *hsRank, attr string, away, back int, where string) (*HotSwap, error) {
	r := len(rec.ids)
	neg := make([]int64, r)
	for i, id := range rec.ids {
		neg[i] = -id
	}
	hi, err := agg.Max(slices.Concat(rec.ids, neg, rec.ns))
	if err != nil {
		return nil, err
	}
	wrong, err := agg.Sum([]int64{rec.wrong})
	if err != nil {
		return nil, err
	}
	same := func(i int) bool { return hi[i] == -hi[r+i] }
	hs := &HotSwap{Attribute: attr, Collective: "allreduce", Bytes: hsBytes, Count: hsBytes / 4, Type: "float", RedOp: "sum",
		Requests: r, CheckPeriod: hsPeriod, First: rec.names[rec.ids[0]], Wrong: wrong[0], Consistent: true,
		// [] rather than null in JSON when nothing switches (1 rank,
		// slow_rank at 2): readers iterate it without a null check.
		Switches: []Switch{},
		Published: []Publish{{AfterRequest: hsSlowAt, Value: away, Where: where},
			{AfterRequest: hsBackAt, Value: back, Where: where}}}
	for _, ns := range hi[2*r:] {
		hs.TimesUS = append(hs.TimesUS, float64(ns)/1e3)
	}
	for i := range r {
		if !same(i) {
			hs.Consistent = false
		}
		if i == 0 || rec.ids[i] == rec.ids[i-1] && same(i) && same(i-1) {
			continue
		}
		s := Switch{Request: i + 1, From: rec.names[rec.ids[i-1]], To: rec.names[rec.ids[i]], Ranks: "all",
			Migration: rec.migration[i+1], Reused: rec.reused[i+1]}
		if !same(i) || !same(i-1) {
			s.Ranks = "not all (the ranks disagree)"
		}
		hs.Switches = append(hs.Switches, s)
	}
	timeSwitches(hs)
	return hs, nil
}

// timeSwitches fills each switch's timing from hs.TimesUS (request k at
// index k-1). The switch at request s ran the old schedule since the
// previous switch (or request 1) and the new one until the next switch (or
// the last request). Old is the median over the old schedule's requests
// before s, less the first of them (the cold start or the previous switch):
// its steady state. New is the median over the new schedule's requests
// after s. Cost is the switching request's time less New: what the switch
// added to the request that made it (selection at the epoch, first load,
// materialisation or migration, the first launch, and the epoch's context
// check, which EpochMedianUS measures apart: the median over the new
// schedule's later requests that start an epoch (request k with k-1 a
// multiple of hs.CheckPeriod). Medians are gonum's empirical (lower)
// median; an empty set leaves the median and the cost 0.
func timeSwitches(hs *HotSwap) {
	t := hs.TimesUS
	for k := range hs.Switches {
		sw := &hs.Switches[k]
		if sw.Request < 1 || sw.Request > len(t) {
			continue
		}
		prev, next := 1, len(t)+1
		if k > 0 {
			prev = hs.Switches[k-1].Request
		}
		if k+1 < len(hs.Switches) {
			next = hs.Switches[k+1].Request
		}
		old := t[min(prev, sw.Request-1) : sw.Request-1] // requests prev+1 .. s-1
		later := t[sw.Request:min(next-1, len(t))]       // requests s+1 .. next-1
		sw.OldRequests, sw.NewRequests = len(old), len(later)
		if len(old) > 0 {
			sw.OldFirst, sw.OldMedianUS = prev+1, median(old)
		}
		sw.SwitchUS = t[sw.Request-1]
		if len(later) > 0 {
			sw.NewLast, sw.NewMedianUS = next-1, median(later)
			sw.CostUS = math.Round((sw.SwitchUS-sw.NewMedianUS)*1e3) / 1e3 // whole ns, as measured
		}
		var epochs []float64
		for req := sw.Request + 1; req < next && hs.CheckPeriod > 0; req++ {
			if (req-1)%hs.CheckPeriod == 0 {
				sw.EpochRequests = append(sw.EpochRequests, req)
				epochs = append(epochs, t[req-1])
			}
		}
		if len(epochs) > 0 {
			sw.EpochMedianUS = median(epochs)
		}
	}
}

// median is the empirical median of x (gonum stat.Quantile at 0.5: the
// lower of the two middle values for an even count); x is not modified.
func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return stat.Quantile(0.5, stat.Empirical, s, nil)
}

// hsWhere describes where the demonstration publishes attr.
func hsWhere(multi bool, dir, attr string) string {
	if multi {
		return "appended to " + attr + ".jsonl in each rank's copy of the context"
	}
	return "appended to " + filepath.Join(dir, attr+".jsonl")
}

// agreeHotSwapAttr resolves --hotswap-attr (a collective step on the main
// communicator: every rank must run the same demonstration). Each rank
// reads which of the attributes its context dir declares; one SUM-allreduce
// counts the ranks that declare each, and an attribute counts as declared
// when every rank declares it.
func agreeHotSwapAttr(w *world, flag string, nranks int, dir string) (attr, skipped string, err error) {
	mine := make([]int64, len(hsAttrs))
	for i, a := range hsAttrs {
		if declaresExoInt(dir, a) {
			mine[i] = 1
		}
	}
	var got []int64
	err = w.each(func(i int, rb *rankBench) error {
		s, err := rb.agg.Sum(mine)
		if i == 0 {
			got = s
		}
		return err
	})
	if err != nil {
		return "", "", err
	}
	all := func(i int) bool { return got[i] == int64(nranks) }
	attr, skipped = chooseHotSwapAttr(flag, nranks, all(0), all(1))
	return attr, skipped, nil
}
