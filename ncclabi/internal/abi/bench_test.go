package abi

import "testing"

// nopComm is an engine communicator whose Run does nothing: the benchmarks
// measure the NCCL layer alone (lookup, argument checks, dispatch).
type nopComm struct{ *fakeComm }

func (nopComm) Run(op Op) (Served, error) { return Served{}, nil }

func benchLib(b *testing.B, backend string) (*Library, uintptr) {
	h := newHarness(&testing.T{}, backend, false)
	hs := h.initWorld(1, DefaultConfig())
	c, _ := h.l.lookup(hs[0], "bench")
	eng, sh := c.engine()
	c.es.Store(&engState{nopComm{eng.(*fakeComm)}, sh})
	return h.l, hs[0]
}

// BenchmarkCollCall: one ncclAllReduce outside a group, host backend (no
// device check).
func BenchmarkCollCall(b *testing.B) {
	l, h := benchLib(b, "host")
	th := newThread()
	op := Op{Coll: CollAllReduce, Send: 0x1000, Recv: 0x2000, Count: 1024, DataType: 7, Root: -1}
	b.ReportAllocs()
	for b.Loop() {
		o := op
		if r := l.Coll(th, h, &o); r != Success {
			b.Fatal(r)
		}
	}
}

// BenchmarkGroupedColl: GroupStart, one AllReduce, GroupEnd.
func BenchmarkGroupedColl(b *testing.B) {
	l, h := benchLib(b, "host")
	th := newThread()
	op := Op{Coll: CollAllReduce, Send: 0x1000, Recv: 0x2000, Count: 1024, DataType: 7, Root: -1}
	b.ReportAllocs()
	for b.Loop() {
		l.GroupStart(th)
		o := op
		l.Coll(th, h, &o)
		if r := l.GroupEnd(th); r != Success {
			b.Fatal(r)
		}
	}
}

// BenchmarkGetAsyncError: what PyTorch's watchdog calls every 100 ms.
func BenchmarkGetAsyncError(b *testing.B) {
	l, h := benchLib(b, "host")
	b.ReportAllocs()
	for b.Loop() {
		if st, r := l.GetAsyncError(h); st != Success || r != Success {
			b.Fatal(st, r)
		}
	}
}
