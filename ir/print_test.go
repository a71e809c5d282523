package ir_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

func TestPrintExact(t *testing.T) {
	b := irtest.New(ir.Gather, 2, 1).Name("g").Root(1).Protocol(ir.LL).Window(0, 4096).Meta("k", "v \"q\"")
	c0, c1 := b.Connect(0, 1, ir.MemoryChannel, 1, 0)
	b.Rank(0).Chunks(1, 0, 0).PrimTB().
		Copy(1, irtest.I(0), irtest.Packet(irtest.Remote(irtest.S(0), c0))).Publish().
		Signal(c0).Dep(0, 0)
	b.Rank(1).Chunks(1, 2, 1).PrimTB().
		Wait(c1).
		Copy(1, irtest.Packet(irtest.S(0)), irtest.O(0)).
		Copy(1, irtest.I(0), irtest.O(1))
	b.Rank(1).TB(0, 0, 0).Reduce(3, []ir.Ref{irtest.O(0), irtest.I(0)}, irtest.O(0)).Barrier(2, 2)
	want := `program "g" gather nranks=2 chunks=1 protocol=ll root=1 maxbytes=4096 outofplace
meta "k" = "v \"q\""

rank 0 input=1 {
  channel 0 peer=1.0 memory init=1
  tb 0 {
    copy i[0] -> @0:s[0]/pkt publish
    signal @0 deps=(0,0)
  }
}

rank 1 input=1 output=2 scratch=1 {
  channel 0 peer=0.0 memory
  tb 0 {
    wait @0
    copy s[0]/pkt -> o[0]
    copy i[0] -> o[1]
  }
  tb 1 send=0 recv=0 chan=0 {
    reduce o[0+3], i[0+3] -> o[0+3]
    barrier id=2 tbs=2
  }
}
`
	p := b.Build()
	var buf bytes.Buffer
	if err := ir.Print(&buf, p); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, buf.String()); d != "" {
		t.Errorf("Print (-want +got):\n%s", d)
	}
	if p.String() != want {
		t.Error("String differs from Print")
	}
}

// TestPrintDefaults: values equal to the parser's defaults are omitted;
// others, including ones only a broken program has, are printed.
func TestPrintDefaults(t *testing.T) {
	cases := []struct {
		name string
		edit func(p *ir.Program)
		want string // header line
	}{
		{"non-rooted default", func(p *ir.Program) {}, `program "test" allreduce nranks=1 chunks=1 protocol=simple outofplace`},
		{"non-rooted with root", func(p *ir.Program) { p.Root = 0 }, `program "test" allreduce nranks=1 chunks=1 protocol=simple root=0 outofplace`},
		{"rooted default", func(p *ir.Program) { p.Collective = ir.Broadcast; p.Root = 0 }, `program "test" broadcast nranks=1 chunks=1 protocol=simple outofplace`},
		{"rooted without root", func(p *ir.Program) { p.Collective = ir.Scatter; p.Root = -1 }, `program "test" scatter nranks=1 chunks=1 protocol=simple root=-1 outofplace`},
		{"everything", func(p *ir.Program) {
			p.NLocalRanks, p.MinBytes, p.MaxBytes, p.NumThreads, p.SliceBytes, p.InPlace, p.OutOfPlace = 8, 1, 2, 3, 4, true, false
		}, `program "test" allreduce nranks=1 chunks=1 protocol=simple nlocalranks=8 minbytes=1 maxbytes=2 threads=3 slicebytes=4 inplace`},
		{"no arrangement", func(p *ir.Program) { p.OutOfPlace = false; p.Name = "a\tb" }, `program "a\tb" allreduce nranks=1 chunks=1 protocol=simple`},
	}
	for _, c := range cases {
		p := irtest.New(ir.AllReduce, 1, 1).Build()
		c.edit(p)
		if got, _, _ := strings.Cut(p.String(), "\n"); got != c.want {
			t.Errorf("%s: header\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

func TestPrintInvalid(t *testing.T) {
	cases := []struct {
		name, errWant, textWant string
		edit                    func(p *ir.Program)
	}{
		{"opcode", "undefined opcode 200", "    opcode(200)\n", func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[0].Code = 200 }},
		{"collective", "undefined collective 99", "collective(99)", func(p *ir.Program) { p.Collective = 99 }},
		{"protocol", "undefined protocol 9", "protocol=protocol(9)", func(p *ir.Program) { p.Protocol = 9 }},
		{"buffer", "undefined buffer 5", "copy buf(5)[0]", func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[1].Srcs[0].Buf = 5 }},
		{"channel type", "undefined channel type 7", "channeltype(7)", func(p *ir.Program) { p.Ranks[0].Channels[0].Type = 7 }},
	}
	for _, c := range cases {
		b := irtest.New(ir.AllReduce, 1, 1)
		b.Connect(0, 0, ir.MemoryChannel, 0, 0)
		b.Rank(0).PrimTB().Nop().Copy(1, irtest.I(0), irtest.O(0))
		p := b.Build()
		c.edit(p)
		var buf bytes.Buffer
		err := ir.Print(&buf, p)
		if err == nil || !strings.Contains(err.Error(), c.errWant) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.errWant)
		}
		if !strings.Contains(buf.String(), c.textWant) || !strings.HasSuffix(buf.String(), "}\n") {
			t.Errorf("%s: text lacks %q or is incomplete:\n%s", c.name, c.textWant, buf.String())
		}
	}
}

type failWriter struct{ n int }

var errDisk = errors.New("disk full")

func (w *failWriter) Write(b []byte) (int, error) {
	if w.n < len(b) {
		return 0, errDisk
	}
	w.n -= len(b)
	return len(b), nil
}

func TestPrintWriteError(t *testing.T) {
	p := irtest.RingAllReduce(64, ir.Simple)
	if err := ir.Print(&failWriter{n: 5000}, p); !errors.Is(err, errDisk) {
		t.Errorf("Print = %v, want %v", err, errDisk)
	}
}
