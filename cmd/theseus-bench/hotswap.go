package main

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// The hot-swap demonstration. The ranks issue back-to-back allreduces on a
// communicator of their own that reads a private copy of the context and
// agrees on it every hsPeriod requests. After request hsSlowAt the value
// slow_rank = hsSlow is appended to the copy's slow_rank log, after
// request hsBackAt the value -1: the policies demote the schedules that
// relay through the slow rank and promote one that avoids it, then return.
// Every rank records the schedule of every request, and every output is
// checked; the ranks' records are compared with a MAX-allreduce of the ids
// and of their negations.
//
// The publications fall mid-epoch on purpose: a rank cannot pass request
// hsSlowAt+1 before rank 0 has finished request hsSlowAt (each request is
// an allreduce), so every rank's next epoch (request 25 with the defaults)
// reads the new value and all of them switch there.
const (
	hsSlowAttr = "slow_rank"
	hsBytes    = 256 << 10
	hsRequests = 64
	hsPeriod   = 8
	hsSlowAt   = 20
	hsBackAt   = 44
)

// hsSlow is the rank the demonstration marks slow: the middle rank.
func hsSlow(n int) int { return n / 2 }

// declaresSlowRank reports whether the context's attribute manifest declares
// slow_rank as an exogenous int (the attribute the demonstration
// publishes).
func declaresSlowRank(dir string) bool {
	f, err := os.Open(filepath.Join(dir, manifest.AttributeManifest))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), manifest.MaxLineBytes)
	for line := 1; sc.Scan(); line++ {
		a, ds := manifest.ParseAttribute(manifest.AttributeManifest, line, sc.Bytes(), manifest.Options{})
		if len(ds) == 0 && a.Name == hsSlowAttr {
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
	names     map[int64]string
	wrong     int64
	migration map[int]*MigrationInfo // rank 0: request → L1 migration at it
	reused    map[int]bool           // rank 0: request → switched to a materialised schedule
}

// runHotSwap runs this rank's part on demo communicator c. publish appends
// a value to the context this rank's communicator reads (a no-op on ranks
// that share another rank's copy).
func runHotSwap(c *theseus.Comm, refs *references, publish func(v int) error) (*hsRank, error) {
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
		if err := c.AllReduce(send, recv, count, theseus.Float32, theseus.Sum, nil); err != nil {
			return nil, fmt.Errorf("hot swap, request %d: %w", i, err)
		}
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
			err = publish(hsSlow(n))
		case hsBackAt:
			err = publish(-1)
		}
		if err != nil {
			return nil, fmt.Errorf("hot swap: publishing %s: %w", hsSlowAttr, err)
		}
	}
	return rec, nil
}

// summarizeHotSwap compares the ranks' records (a collective step on agg's
// communicator) and, on every rank, returns the demonstration's outcome as
// rank 0 saw it.
func summarizeHotSwap(agg *aggregator, rec *hsRank, where string) (*HotSwap, error) {
	neg := make([]int64, len(rec.ids))
	for i, id := range rec.ids {
		neg[i] = -id
	}
	hi, err := agg.Max(append(append([]int64(nil), rec.ids...), neg...))
	if err != nil {
		return nil, err
	}
	wrong, err := agg.Sum([]int64{rec.wrong})
	if err != nil {
		return nil, err
	}
	r := len(rec.ids)
	same := func(i int) bool { return hi[i] == -hi[r+i] }
	hs := &HotSwap{Collective: "allreduce", Bytes: hsBytes, Count: hsBytes / 4, Type: "float", RedOp: "sum",
		Requests: r, CheckPeriod: hsPeriod, First: rec.names[rec.ids[0]], Wrong: wrong[0], Consistent: true,
		Published: []Publish{{AfterRequest: hsSlowAt, Value: hsSlow(agg.c.NRanks()), Where: where},
			{AfterRequest: hsBackAt, Value: -1, Where: where}}}
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
	return hs, nil
}

// hsWhere describes where the demonstration publishes.
func hsWhere(multi bool, dir string) string {
	if multi {
		return "appended to " + hsSlowAttr + ".jsonl in each rank's copy of the context"
	}
	return "appended to " + filepath.Join(dir, hsSlowAttr+".jsonl")
}
