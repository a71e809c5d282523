package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

var update = flag.Bool("update", false, "rewrite the golden files and fuzz seeds")

var cmpBundle = cmp.Options{cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(Bundle{})}

// opTables lowers p with codegen/optable and encodes every rank's table.
func opTables(t testing.TB, p *ir.Program) [][]byte {
	t.Helper()
	ts, err := optable.LowerAll(p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(ts))
	for r, tb := range ts {
		if out[r], err = tb.MarshalBinary(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func legalRing(t testing.TB, n int, proto ir.Protocol) *ir.Program {
	t.Helper()
	q, ds := legalize.Legalize(irtest.RingAllReduce(n, proto))
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	return q
}

func mustNew(t testing.TB, p *ir.Program, src []byte) *Bundle {
	t.Helper()
	b, err := New(p, opTables(t, p), src)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, withSrc := range []bool{false, true} {
		for _, p := range []*ir.Program{legalRing(t, 4, ir.Simple), legalRing(t, 3, ir.LL), irtest.PairsAllReducePrimitive(3)} {
			t.Run(fmt.Sprintf("%s/%v/src=%v", p.Name, p.Protocol, withSrc), func(t *testing.T) {
				var src []byte
				if withSrc {
					src = []byte(p.String())
				}
				b := mustNew(t, p, src)
				data, err := Encode(b)
				if err != nil {
					t.Fatal(err)
				}
				got, id, err := DecodeID(data)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(b, got, cmpBundle); d != "" {
					t.Errorf("Decode(Encode(b)) (-want +got):\n%s", d)
				}
				if (got.Source != nil) != withSrc {
					t.Errorf("source present = %v, want %v", got.Source != nil, withSrc)
				}
				want, err := b.ID()
				if err != nil || id != want {
					t.Errorf("ID = %v (%v), want %v", id, err, want)
				}
				again, err := Encode(got)
				if err != nil || !bytes.Equal(again, data) {
					t.Errorf("Encode(Decode(data)) differs from data (err %v)", err)
				}
			})
		}
	}
}

func TestIDIgnoresSourceOnly(t *testing.T) {
	p := legalRing(t, 3, ir.Simple)
	plain := mustNew(t, p, nil)
	withSrc := mustNew(t, p, []byte(p.String()))
	a, _ := plain.ID()
	b, _ := withSrc.ID()
	if a != b {
		t.Errorf("embedding the source changed the ID: %v vs %v", a, b)
	}
	if len(a.String()) != 64 || a.Short() != a.String()[:12] {
		t.Errorf("ID strings %q / %q", a.String(), a.Short())
	}
	// Every metadata field, resource and table byte is part of the ID.
	muts := map[string]func(b *Bundle){
		"name":       func(b *Bundle) { b.Meta.Name += "x" },
		"protocol":   func(b *Bundle) { b.Meta.Protocol = ir.LL },
		"inplace":    func(b *Bundle) { b.Meta.InPlace = false },
		"window":     func(b *Bundle) { b.Meta.MaxBytes = 1 << 20 },
		"threads":    func(b *Bundle) { b.Meta.NumThreads = 512 },
		"slice":      func(b *Bundle) { b.Meta.SliceBytes = 4096 },
		"nlocal":     func(b *Bundle) { b.Meta.NLocalRanks = 1 },
		"chunks":     func(b *Bundle) { b.Meta.ChunksPerBlock = 6 },
		"scratch":    func(b *Bundle) { b.Ranks[1].Chunks[ir.Scratch]++ },
		"init":       func(b *Bundle) { b.Ranks[0].Channels[0].Init++ },
		"tb ops":     func(b *Bundle) { b.Ranks[2].TBs[0].OpsHash ^= 1 },
		"table byte": func(b *Bundle) { b.Tables[2] = append(bytes.Clone(b.Tables[2][:3]), 'X') },
		"registration": func(b *Bundle) {
			b.Ranks[0].Registrations = append(b.Ranks[0].Registrations, Registration{Peer: 2, Buf: ir.Output})
		},
	}
	for name, mut := range muts {
		c := mustNew(t, p, nil)
		mut(c)
		id, err := c.ID()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if id == a {
			t.Errorf("changing %s kept the ID", name)
		}
	}
}

func TestSummarize(t *testing.T) {
	// Pairs allreduce: every rank reads every peer's input through the
	// channel to it, so it imports each peer's input registration.
	got := Summarize(irtest.PairsAllReducePrimitive(3))
	for r, res := range got {
		var want []Registration
		for q := range 3 {
			if q != r {
				want = append(want, Registration{Peer: q, Buf: ir.Input})
			}
		}
		if d := cmp.Diff(want, res.Registrations); d != "" {
			t.Errorf("rank %d registrations (-want +got):\n%s", r, d)
		}
		wantCh := []ChannelEnd{{Peer: 0}, {Peer: 1}}
		if r == 0 {
			wantCh = []ChannelEnd{{Peer: 1}, {Peer: 2}}
		} else if r == 1 {
			wantCh = []ChannelEnd{{Peer: 0}, {Peer: 2, PeerChannel: 1}}
		} else {
			wantCh = []ChannelEnd{{Peer: 0, PeerChannel: 1}, {Peer: 1, PeerChannel: 1}}
		}
		if d := cmp.Diff(wantCh, res.Channels); d != "" {
			t.Errorf("rank %d channels (-want +got):\n%s", r, d)
		}
		// 2 signals/waits, 3 reduces, 2 signals/waits.
		if len(res.TBs) != 1 || res.TBs[0].Ops != 7 {
			t.Errorf("rank %d threadblocks %+v", r, res.TBs)
		}
	}
	// The legalised ring only writes peers' scratch: no registrations.
	for r, res := range Summarize(legalRing(t, 4, ir.Simple)) {
		if len(res.Registrations) != 0 {
			t.Errorf("ring rank %d registrations %v", r, res.Registrations)
		}
		if res.Chunks != [ir.NumBufKinds]int64{4, 4, 6} {
			t.Errorf("ring rank %d chunks %v", r, res.Chunks)
		}
	}
	// Op hashes tell changed threadblocks apart and ignore positions.
	p := irtest.PairsAllReducePrimitive(3)
	h := HashOps(p.Ranks[0].TBs[0].Ops)
	p.Ranks[0].TBs[0].Ops[2].Pos = ir.Pos{Line: 9, Col: 9}
	if HashOps(p.Ranks[0].TBs[0].Ops) != h {
		t.Error("a position changed the op hash")
	}
	p.Ranks[0].TBs[0].Ops[2].Srcs[1].Off = 2
	if HashOps(p.Ranks[0].TBs[0].Ops) == h {
		t.Error("a changed ref kept the op hash")
	}
	if HashOps(nil) == HashOps([]ir.Op{{Code: ir.OpNop}}) {
		t.Error("an extra nop kept the op hash")
	}
}

func TestNewErrors(t *testing.T) {
	ring := irtest.RingAllReduce(3, ir.Simple)
	if _, err := New(ring, make([][]byte, 3), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("transfer-level program: %v", err)
	}
	q := legalRing(t, 3, ir.Simple)
	if _, err := New(q, opTables(t, q)[:2], nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("too few tables: %v", err)
	}
	if _, err := New(nil, nil, nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("nil program: %v", err)
	}
	bad := q.Clone()
	bad.Ranks[1].Channels[0].PeerChannel = 1
	if _, err := New(bad, opTables(t, q), nil); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "name it back") {
		t.Errorf("unpaired channel: %v", err)
	}
	// A root on an allreduce is ignored (TS0114 is a warning): the bundle
	// records none.
	rooted := q.Clone()
	rooted.Root = 0
	if b, err := New(rooted, opTables(t, q), nil); err != nil || b.Meta.Root != -1 {
		t.Errorf("root on allreduce: %v, root %v", err, b)
	}
}

func TestDecodeErrors(t *testing.T) {
	p := legalRing(t, 3, ir.Simple)
	data, err := Encode(mustNew(t, p, []byte(p.String())))
	if err != nil {
		t.Fatal(err)
	}
	// Every truncation is an error, never a panic.
	for n := 0; n < len(data); n++ {
		if _, err := Decode(data[:n]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	// Every single-byte change is an error: the header fields are checked,
	// the head is covered by the ID, each section by its hash in the index,
	// the source by its hash. (Bit 1 of the flags, the verified record, is
	// not covered: flipping bit 6 of byte 10 is an unknown flag.)
	for i := 0; i < len(data); i++ {
		c := bytes.Clone(data)
		c[i] ^= 0x40
		if _, err := Decode(c); err == nil {
			t.Fatalf("byte %d flipped: no error", i)
		}
	}
	set := func(off int, v ...byte) []byte {
		c := bytes.Clone(data)
		copy(c[off:], v)
		return c
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"magic", set(0, 'X'), ErrFormat},
		{"version 1", set(8, 1), ErrVersion},
		{"version 3", set(8, 3), ErrVersion},
		{"flags", set(10, 4), ErrFormat},
		{"reserved", set(12, 1), ErrFormat},
		{"head length", set(16, 0xff, 0xff, 0xff), ErrFormat},
		{"id", set(30, ^data[30]), ErrChecksum},
		{"head", set(HeaderBytes+6, ^data[HeaderBytes+6]), ErrChecksum},
		{"section", set(sectionStart(data)+5, ^data[sectionStart(data)+5]), ErrChecksum},
		{"source", set(len(data)-40, ^data[len(data)-40]), ErrChecksum},
		{"trailing", append(bytes.Clone(data), 0), ErrFormat},
	}
	for _, c := range cases {
		if _, err := Decode(c.data); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// A stored ID that differs past its first 12 hex digits: the message
	// prints enough digits to show the difference (it used to print the
	// same 12 twice).
	_, err = Decode(set(30, ^data[30]))
	var got, hdr string
	if err != nil {
		msg := err.Error()
		if i := strings.Index(msg, "hashes to "); i >= 0 {
			fmt.Sscanf(strings.ReplaceAll(msg[i:], ",", " "), "hashes to %s the header says %s", &got, &hdr)
		}
	}
	if got == "" || got == hdr || len(got) != 14 || got[:12] != hdr[:12] {
		t.Errorf("checksum message %q: hashes %q and %q", err, got, hdr)
	}
}

// A body that is well-formed but invalid (hash recomputed) is ErrFormat.
func TestDecodeInvalidBody(t *testing.T) {
	p := legalRing(t, 2, ir.Simple)
	b := mustNew(t, p, nil)
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1's first channel: after the metadata (4+len(name)+36) and rank
	// 0's record. Make its peer channel 7 (rank 0 has 2 channels).
	meta := 4 + len(p.Name) + metaFixedBytes
	rank0 := 24 + 4 + 2*channelBytes + 4 + 4 + tbBytes
	off := HeaderBytes + meta + rank0 + 24 + 4 + 4
	data[off] = 7
	data = fixChecksums(data)
	_, err = Decode(data)
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "does not name it back") {
		t.Errorf("Decode: got %v", err)
	}
	_, err = Open(bytes.NewReader(data), int64(len(data)))
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "does not name it back") {
		t.Errorf("Open: got %v", err)
	}
}

func TestTables(t *testing.T) {
	for _, p := range []*ir.Program{legalRing(t, 4, ir.Simple), legalRing(t, 3, ir.LL), irtest.PairsAllReducePrimitive(3)} {
		b := mustNew(t, p, nil)
		if err := b.CheckTables(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		tb, err := b.Table(1)
		if err != nil || tb.Rank != 1 || len(tb.Channels) != len(p.Ranks[1].Channels) {
			t.Errorf("%s: Table(1) = %+v, %v", p.Name, tb, err)
		}
	}
	// A summary that disagrees with its table passes Decode (the ID covers
	// it) but not Table.
	p := irtest.PairsAllReducePrimitive(3)
	muts := map[string]func(b *Bundle){
		"init": func(b *Bundle) {
			b.Ranks[0].Channels[0].Init = 5
		},
		"ops":            func(b *Bundle) { b.Ranks[0].TBs[0].Ops++ },
		"hash":           func(b *Bundle) { b.Ranks[0].TBs[0].OpsHash++ },
		"scratch":        func(b *Bundle) { b.Ranks[0].Chunks[ir.Scratch] = 9 },
		"registrations":  func(b *Bundle) { b.Ranks[0].Registrations = b.Ranks[0].Registrations[1:] },
		"meta":           func(b *Bundle) { b.Meta.NumThreads = 256 },
		"swapped tables": func(b *Bundle) { b.Tables[0], b.Tables[1] = b.Tables[1], b.Tables[0] },
		"garbage table":  func(b *Bundle) { b.Tables[0] = []byte("not a table") },
	}
	for name, mut := range muts {
		b := mustNew(t, p, nil)
		mut(b)
		data, err := Encode(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := d.Table(0); err == nil {
			t.Errorf("%s: Table(0) accepted a table that disagrees with the summary", name)
		}
		if err := d.CheckTables(); err == nil {
			t.Errorf("%s: CheckTables accepted it", name)
		}
	}
	if _, err := mustNew(t, p, nil).Table(3); !errors.Is(err, ErrFormat) {
		t.Errorf("Table(3) = %v", err)
	}
}

// TestGolden pins the byte layout of docs/bundle.md on a 2-rank ring: a
// change of layout must be deliberate (run with -update and bump Version).
func TestGolden(t *testing.T) {
	p := legalRing(t, 2, ir.Simple)
	b := mustNew(t, p, []byte("program \"x\"\n"))
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	got := hex.Dump(data)
	path := filepath.Join("testdata", "ring2.tsb.hex")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("encoding changed (-golden +got):\n%s", d)
	}
}

// TestLarge: a 64-rank bundle encodes, decodes and checks.
func TestLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large")
	}
	p := legalRing(t, 64, ir.Simple)
	data, err := Encode(mustNew(t, p, nil))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Decode(data)
	if err != nil || len(b.Ranks) != 64 {
		t.Fatalf("decode: %v", err)
	}
	if err := b.CheckTables(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSummarize measures the resource summary of a legalised ring
// allreduce (64 ranks: 24k primitive ops; 1024 ranks: 6.3M).
func BenchmarkSummarize(b *testing.B) {
	for _, n := range []int{64, 1024} {
		p := legalRing(b, n, ir.Simple)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Summarize(p)
			}
		})
	}
}

// BenchmarkEncodeDecode measures Encode, Decode and CheckTables of the
// 64-rank ring's bundle.
func BenchmarkEncodeDecode(b *testing.B) {
	p := legalRing(b, 64, ir.Simple)
	bd := mustNew(b, p, nil)
	data, _ := Encode(bd)
	b.Run("encode/n=64", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Encode(bd); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/n=64", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := Decode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("checktables/n=64", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := bd.CheckTables(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEncodeLargeTables: tables over parallelHash are hashed on several
// goroutines; the index holds each table's SHA-256, the ID is that of the
// head, and Decode (which checks every hash) accepts the bytes.
func TestEncodeLargeTables(t *testing.T) {
	b := mustNew(t, legalRing(t, 2, ir.Simple), []byte("source"))
	big := make([]byte, parallelHash+12345)
	for i := range big {
		big[i] = byte(i * 7)
	}
	b.Tables[1] = big // opaque to Encode and Decode
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	head := data[HeaderBytes:sectionStart(data)]
	idx := head[len(head)-2*indexBytes:]
	if sum := sha256.Sum256(big); !bytes.Equal(idx[indexBytes+16:2*indexBytes], sum[:]) {
		t.Error("rank 1's index entry does not hold its table's SHA-256")
	}
	id := headID(head)
	if !bytes.Equal(data[24:HeaderBytes], id[:]) {
		t.Fatal("the stored ID is not the head's")
	}
	if got, err := b.ID(); err != nil || got != id {
		t.Errorf("ID() = %v, %v; want %v", got, err, id)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Tables[1], big) || !bytes.Equal(back.Source, []byte("source")) {
		t.Error("decoded table or source differs")
	}
}

// countingReader is an io.ReaderAt over data that records the bytes read.
type countingReader struct {
	data []byte
	mu   sync.Mutex
	read int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	c.read += int64(len(p))
	c.mu.Unlock()
	return bytes.NewReader(c.data).ReadAt(p, off)
}

// TestOpen: Open reads the header and the head only; each section is read
// when its rank's table is asked for, once, and checked against its hash.
func TestOpen(t *testing.T) {
	p := legalRing(t, 8, ir.Simple)
	b := mustNew(t, p, []byte(p.String()))
	b.Verified = true
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	cr := &countingReader{data: data}
	o, id, err := OpenID(cr, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := b.ID()
	if id != want || !o.Verified || o.Source != nil {
		t.Errorf("Open: ID %v (want %v), verified %v, source %v", id, want, o.Verified, o.Source != nil)
	}
	if d := cmp.Diff(b.Ranks, o.Ranks, cmpBundle); d != "" || o.Meta != b.Meta {
		t.Errorf("Open: summaries or metadata differ:\n%s", d)
	}
	headEnd := int64(sectionStart(data))
	if cr.read > headEnd+8 { // header, head, and the source's length
		t.Errorf("Open read %d bytes; the header and head are %d", cr.read, headEnd)
	}
	before := cr.read
	tb, err := o.Table(3)
	if err != nil || tb.Rank != 3 {
		t.Fatalf("Table(3) = %v, %v", tb, err)
	}
	if got := cr.read - before; got != int64(len(b.Tables[3])) {
		t.Errorf("Table(3) read %d bytes; its section is %d", got, len(b.Tables[3]))
	}
	if _, err := o.TableBytes(3); err != nil || cr.read-before != int64(len(b.Tables[3])) {
		t.Errorf("a second TableBytes(3) read again (%v)", err)
	}
	if o.Tables[4] != nil {
		t.Error("rank 4's section was read")
	}
	if got, err := o.ID(); err != nil || got != id {
		t.Errorf("ID of the opened bundle = %v, %v", got, err)
	}
	// Ranks read concurrently (the race detector watches this).
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := o.Table(r); err != nil {
				t.Errorf("Table(%d): %v", r, err)
			}
		}()
	}
	wg.Wait()
	if err := o.CheckTables(); err != nil {
		t.Error(err)
	}
	again, err := Encode(o)
	b.Source = nil // Open does not read the source
	plain, _ := Encode(b)
	if err != nil || !bytes.Equal(again, plain) {
		t.Errorf("Encode of the opened bundle differs (%v)", err)
	}
	// A corrupt section: Open succeeds (it does not read it), Table fails.
	c := bytes.Clone(data)
	c[sectionStart(data)+len(b.Tables[0])+len(b.Tables[1])+9] ^= 1
	o2, err := Open(bytes.NewReader(c), int64(len(c)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o2.Table(0); err != nil {
		t.Errorf("rank 0: %v", err)
	}
	if _, err := o2.Table(2); !errors.Is(err, ErrChecksum) {
		t.Errorf("rank 2's corrupt section: %v", err)
	}
	// Every truncation, and a trailing byte, fails Open.
	for n := 0; n < len(data); n += 97 {
		if _, err := Open(bytes.NewReader(data[:n]), int64(n)); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
	if _, err := Open(bytes.NewReader(append(bytes.Clone(data), 0)), int64(len(data)+1)); !errors.Is(err, ErrFormat) {
		t.Errorf("trailing byte: %v", err)
	}
}

// TestVerifiedNotInID: the verified flag round-trips and leaves the ID.
func TestVerifiedNotInID(t *testing.T) {
	b := mustNew(t, legalRing(t, 3, ir.Simple), nil)
	a, _ := b.ID()
	b.Verified = true
	v, _ := b.ID()
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Decode(data)
	if a != v || err != nil || !d.Verified {
		t.Errorf("IDs %v / %v, decoded verified %v (%v)", a, v, d != nil && d.Verified, err)
	}
}

// TestWriteTo: WriteTo writes exactly Encode's bytes, with and without a
// source, and reports a failing writer.
func TestWriteTo(t *testing.T) {
	for _, src := range [][]byte{nil, []byte("program ...")} {
		b := mustNew(t, legalRing(t, 3, ir.LL), src)
		want, err := Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := b.WriteTo(&buf)
		if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
			t.Errorf("source %q: WriteTo wrote %d bytes (err %v), want Encode's %d", src, n, err, len(want))
		}
		if _, err := b.WriteTo(failAfter{10}); err == nil || err.Error() != "disk full" {
			t.Errorf("failing writer: %v", err)
		}
	}
	bad := mustNew(t, legalRing(t, 2, ir.Simple), nil)
	bad.Meta.NRanks = 0
	var buf bytes.Buffer
	if n, err := bad.WriteTo(&buf); !errors.Is(err, ErrInvalid) || n != 0 || buf.Len() != 0 {
		t.Errorf("invalid bundle: %d bytes, %v", n, err)
	}
}

// failAfter fails every write, after taking at most n bytes of it.
type failAfter struct{ n int }

func (f failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return f.n, errors.New("disk full")
	}
	return len(p), errors.New("disk full")
}
