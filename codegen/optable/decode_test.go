package optable

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

func TestDecodeErrors(t *testing.T) {
	tab, err := Lower(llProgram(), 0)
	if err != nil {
		t.Fatal(err)
	}
	good, err := tab.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var h wireHeader
	h.get(good)
	le := binary.LittleEndian
	mut := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return fixup(b)
	}
	op0 := h.OffOps
	op1 := h.OffOps + OpBytes
	ref0 := h.OffRefs
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "shorter than the 192-byte header"},
		{"magic", mut(func(b []byte) { b[0] = 'X' }), "bad magic"},
		{"version", mut(func(b []byte) { le.PutUint16(b[4:], 2) }), "byte 4: unsupported format version 2 (this build reads version 1)"},
		{"header size", mut(func(b []byte) { le.PutUint16(b[6:], 128) }), "header size 128"},
		{"truncated", good[:len(good)-16], "header says"},
		{"crc", func() []byte { b := append([]byte(nil), good...); b[len(b)-1] ^= 1; return b }(), "CRC-32C"},
		{"reserved", mut(func(b []byte) { b[186] = 1 }), "reserved header fields"},
		{"flags", mut(func(b []byte) { b[20] |= 16 }), "unknown header flags"},
		{"self-fenced and fenced", mut(func(b []byte) { b[20] |= 8 | 4 }), "self-fenced is only for an LL program"},
		{"huge op count", mut(func(b []byte) { le.PutUint64(b[96:], 1<<60) }), "do not fill"},
		{"offsets", mut(func(b []byte) { le.PutUint64(b[136:], h.OffTBs+16) }), "not the canonical ones"},
		{"collective", mut(func(b []byte) { b[32] = 10 }), "unknown collective code 10"},
		{"tb op range", mut(func(b []byte) { le.PutUint64(b[h.OffTBs+TBBytes:], 4) }), "tb 1: ops [4, +3) do not follow"},
		{"opcode", mut(func(b []byte) { b[op0] = 7 }), "unknown opcode 7"},
		{"op flags", mut(func(b []byte) { b[op0+1] = 2 }), "unknown op flags"},
		{"ref start", mut(func(b []byte) { le.PutUint64(b[op1+16:], 0) }), "tb 0 step 1: refs [0, +0) do not follow"},
		{"too many refs", mut(func(b []byte) { le.PutUint32(b[op0+8:], 9) }), "do not follow"},
		{"remote flag", mut(func(b []byte) { b[ref0+1] = RefFlagRemote }), "remote flag and channel -1 disagree"},
		{"buffer code", mut(func(b []byte) { b[ref0] = 3 }), "unknown buffer code 3"},
		{"channel type", mut(func(b []byte) { b[h.OffChannels+8] = 2 }), "unknown channel type 2"},
		{"validation", mut(func(b []byte) { le.PutUint64(b[op0+24:], 0) }), "TS0105: tb 0 step 0: copy of 0 chunks"},
		{"chan list padding", mut(func(b []byte) { b[len(b)-1] = 1 }), "padding is not zero"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.in)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Decode = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestNoCapOnOpsPerTB(t *testing.T) {
	// 70000 ops in one threadblock (over any 16-bit limit) round-trip.
	tab := &Table{Rank: 0, NRanks: 1, Collective: ir.AllReduce, Root: -1, ChunksPerBlock: 1, Chunks: [3]int64{1, 1, 0}, OutOfPlace: true}
	ops := make([]Op, 70000)
	for i := range ops {
		ops[i] = Op{Code: 0}
	}
	tab.TBs = []TB{{Ops: ops}}
	b, err := tab.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.TBs[0].Ops) != 70000 {
		t.Errorf("decoded %d ops", len(got.TBs[0].Ops))
	}
}

// TestMarkFence: the fence flag survives a round trip and keeps the
// table valid (CRC rewritten).
func TestMarkFence(t *testing.T) {
	p := irtest.PairsAllReducePrimitive(2)
	raw, err := LowerAllBinary(p)
	if err != nil {
		t.Fatal(err)
	}
	if tb, err := Decode(raw[0]); err != nil || tb.FenceLaunches {
		t.Fatalf("before: %v, fence %v", err, tb != nil && tb.FenceLaunches)
	}
	if err := MarkFence(raw[0]); err != nil {
		t.Fatal(err)
	}
	tb, err := Decode(raw[0])
	if err != nil || !tb.FenceLaunches {
		t.Fatalf("after: %v, fence %v", err, tb != nil && tb.FenceLaunches)
	}
	again, err := tb.MarshalBinary()
	if err != nil || !bytes.Equal(again, raw[0]) {
		t.Fatalf("re-encoding differs: %v", err)
	}
	if err := MarkFence(raw[0][:10]); err == nil {
		t.Error("MarkFence accepted a truncated table")
	}
}

// TestMarkSelfFenced: the self-fenced flag survives a round trip on an LL
// table; on a Simple table, or on one marked FenceLaunches, it is refused
// and the table is left as it was.
func TestMarkSelfFenced(t *testing.T) {
	raw, err := LowerAllBinary(llProgram())
	if err != nil {
		t.Fatal(err)
	}
	if err := MarkSelfFenced(raw[0]); err != nil {
		t.Fatal(err)
	}
	tb, err := Decode(raw[0])
	if err != nil || !tb.SelfFenced || tb.FenceLaunches {
		t.Fatalf("after: %v, table %+v", err, tb)
	}
	again, err := tb.MarshalBinary()
	if err != nil || !bytes.Equal(again, raw[0]) {
		t.Fatalf("re-encoding differs: %v", err)
	}
	if err := MarkFence(raw[0]); err == nil || !strings.Contains(err.Error(), "self-fenced is only for") {
		t.Errorf("MarkFence on a self-fenced table: %v", err)
	}
	simple, err := LowerAllBinary(irtest.PairsAllReducePrimitive(2))
	if err != nil {
		t.Fatal(err)
	}
	before := bytes.Clone(simple[0])
	if err := MarkSelfFenced(simple[0]); err == nil {
		t.Error("MarkSelfFenced accepted a Simple table")
	}
	if !bytes.Equal(before, simple[0]) {
		t.Error("a refused MarkSelfFenced changed the table")
	}
}
