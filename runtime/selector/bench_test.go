package selector

import (
	"context"
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// benchContext builds a context of n allreduce schedules with typical
// policies: a size window plus an exo condition for usability, and a
// preference mixing the message size with exo values.
func benchContext(b *testing.B, n int) *harness {
	h := newHarness(b)
	h.s.opt.CheckPeriod = 1000
	h.standardAttrs()
	h.attr(`{"name":"slow_rank","type":"int","origin":"exo","default":-1}`)
	h.attr(`{"name":"load","type":"float","origin":"exo","default":0.5}`)
	h.attr(`{"name":"bw","type":"vector","origin":"exo","default":[10,20,30,40]}`)
	for i := 0; i < n; i++ {
		f := fmt.Sprintf("s%d.json", i)
		h.file(f, allreduce8())
		h.sched(fmt.Sprintf(`{"file":%q,"collective":"allreduce","nranks":8,`+
			`"usable":"msgsize >= %d && msgsize <= 1099511627776 && slow_rank != %d",`+
			`"preference":"%d - log2(msgsize) * load + bw[%d %% 4]"}`, f, i%64, i%8, i%97, i))
	}
	return h
}

// BenchmarkSelectHit: a repeated request, answered from the cache. The
// check period is the default 1000, so the cost of an epoch (reading the
// files for news, one agreement, comparing the snapshot) is included,
// amortised over 1000 requests.
func BenchmarkSelectHit(b *testing.B) {
	h := benchContext(b, 100)
	r := req(ir.AllReduce, 1<<20)
	h.sel(r)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		h.s.Select(ctx, r)
	}
}

// BenchmarkSelectMiss: every request is new (a distinct count), so each
// Select evaluates every candidate's usability and preference and inserts
// the result into the cache.
func BenchmarkSelectMiss(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("schedules=%d", n), func(b *testing.B) {
			h := benchContext(b, n)
			h.s.opt.CheckPeriod = 1 << 30 // measure selection alone
			r := req(ir.AllReduce, 1<<20)
			if id := h.sel(r); id == None {
				b.Fatal("nothing selected")
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			count := int64(1 << 20)
			for b.Loop() {
				count++
				r.Count = count
				h.s.Select(ctx, r)
			}
		})
	}
}

// BenchmarkEpoch: the periodic snapshot agreement with nothing new in the
// context (the steady state): reading every file for appended lines, one
// agreement, and the comparison with the installed snapshot.
func BenchmarkEpoch(b *testing.B) {
	h := benchContext(b, 100)
	h.sel(req(ir.AllReduce, 1<<20))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := h.s.epoch(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEpochPipelined: BenchmarkEpoch with a Pipelined agreement (an
// in-process group of one rank), as a communicator's selector runs it:
// collect the previous epoch's result, read the files, start the round,
// and prove that the round cannot change the snapshot (stable), so that
// the rank need not wait for it.
func BenchmarkEpochPipelined(b *testing.B) {
	h := benchContext(b, 100)
	h.s.opt.Agreement = NewInProcessGroup(1)[0]
	h.sel(req(ir.AllReduce, 1<<20))
	ctx := context.Background()
	if err := h.s.epoch(ctx); err != nil {
		b.Fatal(err)
	}
	if h.s.Stats().Pipelined != 1 {
		b.Fatalf("the epoch waited for its agreement: %+v", h.s.Stats())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := h.s.epoch(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
