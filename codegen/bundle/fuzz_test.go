package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// fuzzBundles are the valid bundles FuzzDecode edits, in a fixed order
// (FuzzDecode's pick indexes them): rings of 2 ranks in both protocols
// (one with its source text), a one-rank program with a size window, and
// an in-place broadcast with no ops.
func fuzzBundles(t testing.TB) [][]byte {
	var out [][]byte
	add := func(p *ir.Program, src []byte) {
		data, err := Encode(mustNew(t, p, src))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
	add(legalRing(t, 2, ir.Simple), nil)
	r2 := legalRing(t, 2, ir.LL)
	add(r2, []byte(r2.String()))
	win := irtest.New(ir.AllReduce, 1, 1).Build()
	win.NumThreads, win.MinBytes, win.MaxBytes, win.SliceBytes = 512, 1024, 1<<20, 4096
	add(win, []byte{})
	bc := irtest.New(ir.Broadcast, 2, 1).Root(1).Build()
	bc.InPlace = true
	add(bc, nil)
	// With specialised kernels (docs/bundle.md, "Kernels section").
	kb := mustNew(t, legalRing(t, 2, ir.LL), nil)
	kb.Kernels = []Kernel{{Rank: 0, DataType: ir.Float32, PTX: []byte("ptx 0")}, {Rank: 1, DataType: ir.Float32, PTX: []byte("ptx 1")}}
	data, err := Encode(kb)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, data)
	return out
}

// Bounds on one fuzz input's work: the raw bytes tried as a bundle and the
// edits applied to a seed bundle.
const (
	fuzzRawBytes  = 256
	fuzzEditBytes = 256
)

// fuzzInput is the bundle FuzzDecode decodes for its arguments: with pick
// below len(bundles), bundles[pick] edited by edits, taken four bytes at a
// time (op, offset low byte, offset high byte, value: op%3 0 xors the byte
// at offset mod the current length with value, 1 inserts value before it,
// 2 deletes it), then cut bytes dropped from its end; otherwise edits
// itself, raw. Inputs past the bounds give nil.
func fuzzInput(bundles [][]byte, pick uint8, cut uint16, edits []byte) []byte {
	if int(pick) >= len(bundles) {
		if len(edits) > fuzzRawBytes {
			return nil
		}
		return edits
	}
	if len(edits) > fuzzEditBytes {
		return nil
	}
	data := bytes.Clone(bundles[pick])
	for k := 0; k+4 <= len(edits); k += 4 {
		op, at, v := edits[k]%3, int(edits[k+1])|int(edits[k+2])<<8, edits[k+3]
		if len(data) == 0 {
			data = append(data, v)
			continue
		}
		at %= len(data)
		switch op {
		case 0:
			data[at] ^= v
		case 1:
			data = slices.Insert(data, at, v)
		default:
			data = slices.Delete(data, at, at+1)
		}
	}
	return data[:len(data)-min(int(cut), len(data))]
}

// fuzzCorpus is the committed corpus of FuzzDecode (written by -update):
// each seed bundle as it is and with a few edits, cut short, and raw
// malformed headers.
func fuzzCorpus(n int) map[string]fuzzArgs {
	c := map[string]fuzzArgs{
		"raw_empty":            {255, 0, []byte{}},
		"raw_truncated_header": {255, 0, []byte(Magic + "\x02\x00")},
		"raw_header_only":      {255, 0, append([]byte(Magic), make([]byte, HeaderBytes-len(Magic))...)},
	}
	for i := 0; i < n; i++ {
		c[fmt.Sprintf("bundle%d", i)] = fuzzArgs{uint8(i), 0, []byte{}}
		c[fmt.Sprintf("bundle%d_edited", i)] = fuzzArgs{uint8(i), 0, []byte{0, 60, 0, 0x80, 1, 90, 0, 7, 2, 120, 0, 0}}
		c[fmt.Sprintf("bundle%d_cut", i)] = fuzzArgs{uint8(i), 33, []byte{}}
	}
	return c
}

// fuzzArgs are FuzzDecode's arguments.
type fuzzArgs struct {
	pick  uint8
	cut   uint16
	edits []byte
}

func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, args := range fuzzCorpus(len(fuzzBundles(t))) {
		body := fmt.Sprintf("go test fuzz v1\nbyte('\\x%02x')\nuint16(%d)\n[]byte(%s)\n", args.pick, args.cut, strconv.Quote(string(args.edits)))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sectionStart is the offset of the first section of a well-formed bundle.
func sectionStart(data []byte) int {
	return HeaderBytes + int(binary.LittleEndian.Uint64(data[16:]))
}

// fixChecksums returns data with the section hashes of the index, the ID
// and the source hash recomputed where the lengths allow, so that the
// fuzzer's mutations of the head, the sections and the source reach the
// parser instead of stopping at a checksum.
func fixChecksums(data []byte) []byte {
	if len(data) < HeaderBytes {
		return data
	}
	c := bytes.Clone(data)
	n := binary.LittleEndian.Uint64(c[16:])
	if n > uint64(len(c)-HeaderBytes) {
		return c
	}
	head := c[HeaderBytes : HeaderBytes+int(n)]
	rest := c[HeaderBytes+int(n):]
	// The index is the last nranks*indexBytes bytes of the head; nranks is
	// after the name.
	if len(head) >= 4 {
		name := uint64(binary.LittleEndian.Uint32(head))
		if name <= uint64(len(head))-4 && uint64(len(head))-4-name >= 8 {
			nranks := uint64(binary.LittleEndian.Uint32(head[4+name+4:]))
			if nranks*indexBytes <= uint64(len(head)) {
				idx := head[uint64(len(head))-nranks*indexBytes:]
				for r := uint64(0); r < nranks; r++ {
					e := idx[r*indexBytes:]
					off, ln := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint64(e[8:])
					if off <= uint64(len(rest)) && ln <= uint64(len(rest))-off {
						sum := sha256.Sum256(rest[off : off+ln])
						copy(e[16:], sum[:])
					}
				}
				var total uint64
				for r := uint64(0); r < nranks; r++ {
					total += binary.LittleEndian.Uint64(idx[r*indexBytes+8:])
				}
				if total <= uint64(len(rest)) {
					src := rest[total:]
					if len(src) >= 8 {
						m := binary.LittleEndian.Uint64(src)
						if m <= uint64(len(src)-8) && uint64(len(src)-8)-m >= sha256.Size {
							sum := sha256.Sum256(src[8 : 8+m])
							copy(src[8+m:], sum[:])
						}
					}
				}
			}
		}
	}
	id := headID(head)
	copy(c[24:], id[:])
	return c
}

// FuzzDecode: Decode never panics, and whatever it accepts is canonical:
// it re-encodes to the same bytes with the same ID. Each input is decoded
// as given and with its checksums repaired (fixChecksums). The fuzzer's
// inputs stay small (a seed bundle's index and edits to it, or a short raw
// input: fuzzInput), so that it runs, and minimizes, thousands of them a
// second: minimizing a raw bundle of a few hundred bytes took seconds.
func FuzzDecode(f *testing.F) {
	bundles := fuzzBundles(f)
	for _, a := range fuzzCorpus(len(bundles)) {
		f.Add(a.pick, a.cut, a.edits)
	}
	f.Fuzz(func(t *testing.T, pick uint8, cut uint16, edits []byte) {
		data := fuzzInput(bundles, pick, cut, edits)
		if data == nil {
			return
		}
		check(t, data)
		check(t, fixChecksums(data))
	})
}

func check(t *testing.T, data []byte) {
	b, id, err := DecodeID(data)
	if err != nil {
		if b != nil {
			t.Fatalf("bundle and error: %v", err)
		}
		return
	}
	again, err := Encode(b)
	if err != nil {
		t.Fatalf("re-encode of an accepted bundle: %v", err)
	}
	if !bytes.Equal(again, data) {
		t.Fatalf("accepted bytes are not canonical")
	}
	if id2, err := b.ID(); err != nil || id2 != id {
		t.Fatalf("ID %v vs %v (%v)", id2, id, err)
	}
	_ = b.CheckTables() // must not panic
	// Open accepts exactly what Decode accepts, with the same ID, and
	// reads the same tables.
	o, oid, err := OpenID(bytes.NewReader(data), int64(len(data)))
	if err != nil || oid != id {
		t.Fatalf("Open of a bundle Decode accepts: %v (ID %v vs %v)", err, oid, id)
	}
	for r := range b.Tables {
		raw, err := o.TableBytes(r)
		if err != nil || !bytes.Equal(raw, b.Tables[r]) {
			t.Fatalf("Open: rank %d's section differs (%v)", r, err)
		}
	}
	if o.HasKernels() != (len(b.Kernels) > 0) {
		t.Fatalf("Open: kernels %v, Decode: %d", o.HasKernels(), len(b.Kernels))
	}
	for _, k := range b.Kernels {
		ptx, err := o.Kernel(k.Rank, k.DataType)
		if err != nil || !bytes.Equal(ptx, k.PTX) {
			t.Fatalf("Open: rank %d's %v kernel differs (%v)", k.Rank, k.DataType, err)
		}
	}
}
