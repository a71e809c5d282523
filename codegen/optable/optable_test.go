package optable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestRecordSizes pins the record sizes and the offset of every field, the
// contract with cuda/kernel/optable.h.
func TestRecordSizes(t *testing.T) {
	sizes := []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"header", unsafe.Sizeof(wireHeader{}), 192},
		{"channel", unsafe.Sizeof(wireChannel{}), 32},
		{"tb", unsafe.Sizeof(wireTB{}), 16},
		{"op", unsafe.Sizeof(wireOp{}), 64},
		{"ref", unsafe.Sizeof(wireRef{}), 16},
		{"dep", unsafe.Sizeof(wireDep{}), 16},
	}
	for _, s := range sizes {
		if s.got != s.want || s.got%16 != 0 {
			t.Errorf("%s record: %d bytes, want %d (a multiple of 16)", s.name, s.got, s.want)
		}
	}
	offsets := map[string]uintptr{
		"op.Count": unsafe.Offsetof(wireOp{}.Count), "op.RefStart": unsafe.Offsetof(wireOp{}.RefStart),
		"op.DepStart": unsafe.Offsetof(wireOp{}.DepStart), "op.BarrierTBs": unsafe.Offsetof(wireOp{}.BarrierTBs),
		"ref.Off": unsafe.Offsetof(wireRef{}.Off), "ref.Channel": unsafe.Offsetof(wireRef{}.Channel),
		"channel.Init": unsafe.Offsetof(wireChannel{}.Init), "dep.Step": unsafe.Offsetof(wireDep{}.Step),
		"header.CRC": unsafe.Offsetof(wireHeader{}.CRC), "header.NumOps": unsafe.Offsetof(wireHeader{}.NumOps),
		"header.OffChanList": unsafe.Offsetof(wireHeader{}.OffChanList),
	}
	want := map[string]uintptr{
		"op.Count": 24, "op.RefStart": 16, "op.DepStart": 40, "op.BarrierTBs": 56,
		"ref.Off": 8, "ref.Channel": 4, "channel.Init": 16, "dep.Step": 8,
		"header.CRC": crcOffset, "header.NumOps": 96, "header.OffChanList": 168,
	}
	if d := cmp.Diff(want, offsets); d != "" {
		t.Errorf("field offsets (-want +got):\n%s", d)
	}
}

// reflectEncode writes every field of a wire struct at its Go offset,
// little-endian: the reference the hand-written put methods must match.
func reflectEncode(v any) []byte {
	rv := reflect.ValueOf(v)
	b := make([]byte, rv.Type().Size())
	var put func(off uintptr, f reflect.Value)
	put = func(off uintptr, f reflect.Value) {
		switch f.Kind() {
		case reflect.Array:
			for i := 0; i < f.Len(); i++ {
				put(off+uintptr(i)*f.Type().Elem().Size(), f.Index(i))
			}
		case reflect.Uint8:
			b[off] = uint8(f.Uint())
		case reflect.Uint16:
			binary.LittleEndian.PutUint16(b[off:], uint16(f.Uint()))
		case reflect.Uint32:
			binary.LittleEndian.PutUint32(b[off:], uint32(f.Uint()))
		case reflect.Int32:
			binary.LittleEndian.PutUint32(b[off:], uint32(f.Int()))
		case reflect.Uint64:
			binary.LittleEndian.PutUint64(b[off:], f.Uint())
		case reflect.Int64:
			binary.LittleEndian.PutUint64(b[off:], uint64(f.Int()))
		}
	}
	for i := 0; i < rv.NumField(); i++ {
		put(rv.Type().Field(i).Offset, rv.Field(i))
	}
	return b
}

// fill sets every field (and array element) of a wire struct to a distinct
// value so that a field written at the wrong offset shows.
func fill(p any) {
	rv := reflect.ValueOf(p).Elem()
	n := uint64(1)
	var set func(f reflect.Value)
	set = func(f reflect.Value) {
		switch f.Kind() {
		case reflect.Array:
			for i := 0; i < f.Len(); i++ {
				set(f.Index(i))
			}
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(n * 0x0102030405060708) // SetUint truncates to the field's width
		case reflect.Int32, reflect.Int64:
			f.SetInt(int64(n * 0x0102030405060708))
		}
		n++
	}
	for i := 0; i < rv.NumField(); i++ {
		set(rv.Field(i))
	}
}

func TestPutGetMatchStructLayout(t *testing.T) {
	check := func(name string, v any, put func([]byte), get func([]byte) any) {
		t.Helper()
		b := make([]byte, len(reflectEncode(v)))
		put(b)
		if d := cmp.Diff(reflectEncode(v), b); d != "" {
			t.Errorf("%s: put differs from the struct layout:\n%s", name, d)
		}
		if d := cmp.Diff(v, get(b)); d != "" {
			t.Errorf("%s: get(put(x)) != x:\n%s", name, d)
		}
	}
	var h wireHeader
	fill(&h)
	check("header", h, func(b []byte) { h.put(b) }, func(b []byte) any { var x wireHeader; x.get(b); return x })
	var c wireChannel
	fill(&c)
	check("channel", c, c.put, func(b []byte) any { var x wireChannel; x.get(b); return x })
	var tb wireTB
	fill(&tb)
	check("tb", tb, tb.put, func(b []byte) any { var x wireTB; x.get(b); return x })
	var op wireOp
	fill(&op)
	check("op", op, op.put, func(b []byte) any { var x wireOp; x.get(b); return x })
	var r wireRef
	fill(&r)
	check("ref", r, r.put, func(b []byte) any { var x wireRef; x.get(b); return x })
	var d wireDep
	fill(&d)
	check("dep", d, d.put, func(b []byte) any { var x wireDep; x.get(b); return x })
}

// TestWireCodes pins the wire values of every enum: they are the binary
// format and may not change without a version bump.
func TestWireCodes(t *testing.T) {
	ops := map[string]uint8{}
	for op, w := range wireOpcodes {
		ops[op.String()] = w
		if irOpcodes[w] != op {
			t.Errorf("wire code %d maps back to %v, want %v", w, irOpcodes[w], op)
		}
	}
	want := map[string]uint8{"nop": 0, "copy": 1, "reduce": 2, "signal": 3, "wait": 4, "flush": 5, "barrier": 6}
	if d := cmp.Diff(want, ops); d != "" {
		t.Errorf("opcodes (-want +got):\n%s", d)
	}
	str := func(n int, f func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	got := [][]string{
		str(len(wireCollectives), func(i int) string { return wireCollectives[i].String() }),
		str(len(wireProtocols), func(i int) string { return wireProtocols[i].String() }),
		str(len(wireBufKinds), func(i int) string { return wireBufKinds[i].String() }),
		str(len(wireChannelTypes), func(i int) string { return wireChannelTypes[i].String() }),
	}
	wantEnums := [][]string{
		{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv", "custom"},
		{"simple", "ll"},
		{"i", "o", "s"},
		{"memory", "port"},
	}
	if d := cmp.Diff(wantEnums, got); d != "" {
		t.Errorf("enum wire orders (-want +got):\n%s", d)
	}
}

// llProgram is a 2-rank LL allreduce written by hand: rank r sends its
// input as packets into the peer's scratch (remote packet dst), then a
// second threadblock, after a dependency on the first, reduces its input
// with the received packets; both threadblocks meet at a barrier. It covers
// every record kind and flag.
func llProgram() *ir.Program {
	b := irtest.New(ir.AllReduce, 2, 2).Name("ll_pairs").Protocol(ir.LL).Arrangements(true, true)
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	for r := 0; r < 2; r++ {
		rb := b.Rank(r).Chunks(0, 0, 2)
		t0 := rb.PrimTB()
		t0.Copy(2, irtest.I(0), irtest.Packet(irtest.Remote(irtest.S(0), 0))).Publish()
		t0.Signal(0).Wait(0).Flush(0)
		t0.Barrier(0, 2)
		t1 := rb.PrimTB()
		t1.Nop().Dep(0, 0)
		t1.Reduce(2, []ir.Ref{irtest.I(0), irtest.Packet(irtest.S(0))}, irtest.O(0))
		t1.Barrier(0, 2)
	}
	return b.Build()
}

func testPrograms() map[string]*ir.Program {
	return map[string]*ir.Program{
		"pairs2":  irtest.PairsAllReducePrimitive(2),
		"pairs5":  irtest.PairsAllReducePrimitive(5),
		"ll":      llProgram(),
		"single":  irtest.PairsAllReducePrimitive(1),
		"gather3": gatherProgram(),
	}
}

// gatherProgram is a rooted program (root 1): every rank puts its input
// into the root's output block through a channel; the root copies its own.
func gatherProgram() *ir.Program {
	b := irtest.New(ir.Gather, 3, 1).Root(1).Threads(512).SliceBytes(1 << 20).NLocalRanks(3)
	c0, _ := b.Connect(0, 1, ir.PortChannel, 0, 0)
	c2, _ := b.Connect(2, 1, ir.MemoryChannel, 1, 0)
	b.Rank(0).PrimTB().Copy(1, irtest.I(0), irtest.Remote(irtest.O(0), c0)).Signal(c0)
	b.Rank(2).PrimTB().Copy(1, irtest.I(0), irtest.Remote(irtest.O(2), c2)).Signal(c2)
	b.Rank(1).PrimTB().Copy(1, irtest.I(0), irtest.O(1)).Wait(0, 1)
	return b.Build()
}

func TestRoundTrip(t *testing.T) {
	for name, p := range testPrograms() {
		t.Run(name, func(t *testing.T) {
			tabs, err := LowerAll(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckPeers(tabs); err != nil {
				t.Fatal(err)
			}
			for r, tab := range tabs {
				b, err := tab.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				got, err := Decode(b)
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				if d := cmp.Diff(tab, got); d != "" {
					t.Errorf("rank %d: Decode(Marshal(t)) differs (-want +got):\n%s", r, d)
				}
				b2, err := got.MarshalBinary()
				if err != nil || !bytes.Equal(b, b2) {
					t.Errorf("rank %d: re-encoding differs (err %v)", r, err)
				}
			}
		})
	}
}

// TestLowerContents checks one lowered table field by field.
func TestLowerContents(t *testing.T) {
	got, err := Lower(llProgram(), 1)
	if err != nil {
		t.Fatal(err)
	}
	pkt := func(r ir.Ref) ir.Ref { r.Packet = true; return r }
	want := &Table{
		Rank: 1, NRanks: 2, Collective: ir.AllReduce, Protocol: ir.LL, Root: -1, ChunksPerBlock: 2,
		Chunks: [3]int64{2, 2, 2}, MaxScratchChunks: 2, InPlace: true, OutOfPlace: true,
		Channels: []Channel{{Peer: 0, PeerChannel: 0, Type: ir.MemoryChannel, Init: 0}},
		TBs: []TB{
			{Ops: []Op{
				{Code: ir.OpCopy, Publish: true, Count: 2, Srcs: []ir.Ref{{Buf: ir.Input, Chan: -1}},
					Dsts: []ir.Ref{pkt(ir.Ref{Buf: ir.Scratch, Chan: 0})}},
				{Code: ir.OpSignal, Chans: []int{0}},
				{Code: ir.OpWait, Chans: []int{0}},
				{Code: ir.OpFlush, Chans: []int{0}},
				{Code: ir.OpBarrier, Barrier: 0, BarrierTBs: 2},
			}},
			{Ops: []Op{
				{Code: ir.OpNop, Deps: []ir.Dep{{TB: 0, Step: 0}}},
				{Code: ir.OpReduce, Count: 2, Srcs: []ir.Ref{{Buf: ir.Input, Chan: -1}, pkt(ir.Ref{Buf: ir.Scratch, Chan: -1})},
					Dsts: []ir.Ref{{Buf: ir.Output, Chan: -1}}},
				{Code: ir.OpBarrier, Barrier: 0, BarrierTBs: 2},
			}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
}

// TestGolden pins the exact bytes of one table (hex dump in testdata).
func TestGolden(t *testing.T) {
	tab, err := Lower(llProgram(), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tab.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got := hexDump(b)
	path := filepath.Join("testdata", "ll_rank0.hex")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("bytes differ from %s (-want +got):\n%s", path, d)
	}
}

func hexDump(b []byte) string {
	var s strings.Builder
	for off := 0; off < len(b); off += 16 {
		s.WriteString(strings.TrimSpace(strings.Join(strings.Fields(spaced(b[off:min(off+16, len(b))])), " ")))
		s.WriteString("\n")
	}
	return s.String()
}

func spaced(b []byte) string {
	const hexd = "0123456789abcdef"
	var s strings.Builder
	for i, c := range b {
		if i > 0 && i%4 == 0 {
			s.WriteByte(' ')
		}
		s.WriteByte(hexd[c>>4])
		s.WriteByte(hexd[c&15])
	}
	return s.String()
}

// TestHeaderCurrent checks that the committed C header is what go generate
// writes.
func TestHeaderCurrent(t *testing.T) {
	path := filepath.Join("..", "..", filepath.FromSlash(HeaderPath))
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go generate ./codegen/optable)", err)
	}
	if d := cmp.Diff(string(CHeader()), string(got)); d != "" {
		t.Errorf("%s is stale; run go generate ./codegen/optable (-want +got):\n%s", HeaderPath, d)
	}
}

func TestLowerErrors(t *testing.T) {
	ring := irtest.RingAllReduce(3, ir.Simple)
	ring.File = "ring.json"
	ring.Ranks[0].TBs[0].Ops[0].Pos = ir.Pos{Line: 12, Col: 5}

	badPair := irtest.PairsAllReducePrimitive(3)
	badPair.Ranks[1].Channels[0].PeerChannel = 1

	badDep := llProgram()
	badDep.Ranks[0].TBs[0].Ops[0].Publish = false

	badRange := irtest.PairsAllReducePrimitive(2)
	badRange.Ranks[0].TBs[0].Ops[2].Srcs[1].Off = 2 // rank 1's i[2]: input has 2 chunks

	geom := irtest.PairsAllReducePrimitive(2)
	geom.Ranks[0].Chunks[ir.Input] = 3

	transferLater := irtest.PairsAllReducePrimitive(2)
	transferLater.Ranks[1].TBs[0].Ops[3] = ir.Op{Code: ir.OpSend, Srcs: []ir.Ref{irtest.I(0)}, Count: 1}

	simplePacket := irtest.PairsAllReducePrimitive(2)
	simplePacket.Ranks[0].Chunks[ir.Scratch] = 1
	simplePacket.Ranks[0].TBs[0].Ops = append(simplePacket.Ranks[0].TBs[0].Ops, ir.Op{Code: ir.OpCopy, Count: 1, Srcs: []ir.Ref{irtest.I(0)}, Dsts: []ir.Ref{irtest.Packet(irtest.S(0))}})

	cases := []struct {
		name  string
		p     *ir.Program
		rank  int
		code  diag.Code
		where string // substring of the diagnostic
	}{
		{"transfer op", ring, 1, diag.WrongLevel, "ring.json:12:5: error[TS0108]: rank 0 tb 0 step 0: transfer op send"},
		{"transfer op on another rank", transferLater, 0, diag.WrongLevel, "rank 1 tb 0 step 3: transfer op send"},
		{"rank out of range", irtest.PairsAllReducePrimitive(2), 2, diag.BadRank, "rank 2 outside 0..1"},
		{"channel pairing", badPair, 1, diag.ChannelPairing, "channel 0 names rank 0 channel 1"},
		{"dep not published", badDep, 0, diag.DepNotPublished, "rank 0 tb 1 step 0: dependency on tb 0 step 0, which does not publish"},
		{"remote range", badRange, 0, diag.ChunkRange, "rank 1's i[2:3] outside its 2 chunks"},
		{"geometry", geom, 0, diag.BadGeometry, "input has 3 chunks"},
		{"packet in simple", simplePacket, 0, diag.BadRef, "packet ref in a simple program"},
		{"nil program", nil, 0, diag.BadValue, "no program"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Lower(c.p, c.rank)
			var d diag.Diagnostic
			if !errors.As(err, &d) {
				t.Fatalf("error %v is not a diag.Diagnostic", err)
			}
			if d.Code != c.code || !strings.Contains(d.String(), c.where) {
				t.Errorf("got %q (code %s), want code %s containing %q", d.String(), d.Code, c.code, c.where)
			}
			if d.Hint == "" {
				t.Errorf("no hint in %q", d.String())
			}
		})
	}
	if _, err := LowerAll(ring); err == nil || !strings.Contains(err.Error(), "transfer op send") {
		t.Errorf("LowerAll(ring) = %v, want the transfer-op error", err)
	}
}

// TestValidateRules breaks one rule at a time on a valid table.
func TestValidateRules(t *testing.T) {
	base := func() *Table {
		tab, err := Lower(llProgram(), 0)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	cases := []struct {
		name   string
		break_ func(*Table)
		code   diag.Code
	}{
		{"nranks", func(t *Table) { t.NRanks = 0 }, diag.BadRank},
		{"rank", func(t *Table) { t.Rank = 2 }, diag.BadRank},
		{"collective", func(t *Table) { t.Collective = ir.NumCollectives }, diag.BadValue},
		{"root on allreduce", func(t *Table) { t.Root = 0 }, diag.BadRoot},
		{"chunks per block", func(t *Table) { t.ChunksPerBlock = 0 }, diag.BadGeometry},
		{"output chunks", func(t *Table) { t.Chunks[ir.Output] = 3 }, diag.BadGeometry},
		{"scratch chunks", func(t *Table) { t.Chunks[ir.Scratch] = -1 }, diag.BadGeometry},
		{"max scratch", func(t *Table) { t.MaxScratchChunks = 1 }, diag.BadGeometry},
		{"arrangement", func(t *Table) { t.InPlace, t.OutOfPlace = false, false }, diag.NoArrangement},
		{"peer", func(t *Table) { t.Channels[0].Peer = 2 }, diag.BadChannel},
		{"init", func(t *Table) { t.Channels[0].Init = -1 }, diag.BadValue},
		{"transfer op", func(t *Table) { t.TBs[0].Ops[1].Code = ir.OpSend }, diag.WrongLevel},
		{"bad opcode", func(t *Table) { t.TBs[0].Ops[1].Code = ir.NumOpcodes }, diag.BadValue},
		{"count 0", func(t *Table) { t.TBs[0].Ops[0].Count = 0 }, diag.BadCount},
		{"count on signal", func(t *Table) { t.TBs[0].Ops[1].Count = 1 }, diag.BadCount},
		{"reduce one src", func(t *Table) { t.TBs[1].Ops[1].Srcs = t.TBs[1].Ops[1].Srcs[:1] }, diag.BadCount},
		{"chans on copy", func(t *Table) { t.TBs[0].Ops[0].Chans = []int{0} }, diag.BadChannel},
		{"chan range", func(t *Table) { t.TBs[0].Ops[1].Chans = []int{1} }, diag.BadChannel},
		{"barrier count", func(t *Table) { t.TBs[0].Ops[4].BarrierTBs = 3 }, diag.BadBarrier},
		{"barrier fields on nop", func(t *Table) { t.TBs[1].Ops[0].Barrier = 1 }, diag.BadBarrier},
		{"dep on self", func(t *Table) { t.TBs[1].Ops[0].Deps = []ir.Dep{{TB: 1, Step: 0}} }, diag.BadDep},
		{"dep step", func(t *Table) { t.TBs[1].Ops[0].Deps = []ir.Dep{{TB: 0, Step: 9}} }, diag.BadDep},
		{"dep unpublished", func(t *Table) { t.TBs[1].Ops[0].Deps = []ir.Dep{{TB: 0, Step: 1}} }, diag.DepNotPublished},
		{"ref chan", func(t *Table) { t.TBs[0].Ops[0].Dsts[0].Chan = 5 }, diag.BadChannel},
		{"packet on input", func(t *Table) { t.TBs[0].Ops[0].Srcs[0].Packet = true }, diag.BadRef},
		{"local range", func(t *Table) { t.TBs[1].Ops[1].Dsts[0].Off = 1 }, diag.ChunkRange},
		{"offset overflow", func(t *Table) { t.TBs[0].Ops[0].Dsts[0].Off = math.MaxInt64 }, diag.ChunkRange},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := base()
			c.break_(tab)
			err := tab.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Code != c.code {
				t.Fatalf("Validate = %v, want code %s", err, c.code)
			}
			if _, err := tab.MarshalBinary(); err == nil {
				t.Errorf("MarshalBinary accepted an invalid table")
			}
		})
	}
}

func TestCheckPeers(t *testing.T) {
	tabs, err := LowerAll(irtest.PairsAllReducePrimitive(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPeers(tabs); err != nil {
		t.Fatal(err)
	}
	swapped := []*Table{tabs[1], tabs[0], tabs[2]}
	if err := CheckPeers(swapped); err == nil || !strings.Contains(err.Error(), "tables[0] is rank 1's table") {
		t.Errorf("swapped tables: %v", err)
	}
	big := *tabs[1]
	big.MaxScratchChunks = 5
	if err := CheckPeers([]*Table{tabs[0], &big, tabs[2]}); err == nil || !strings.Contains(err.Error(), "max scratch") {
		t.Errorf("max scratch mismatch: %v", err)
	}
	bad := *tabs[2]
	bad.Channels = append([]Channel(nil), tabs[2].Channels...)
	bad.Channels[1].PeerChannel = 0
	if err := CheckPeers([]*Table{tabs[0], tabs[1], &bad}); err == nil || !strings.Contains(err.Error(), "TS0103") {
		t.Errorf("bad pairing: %v", err)
	}
}
