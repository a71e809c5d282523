package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// fuzzSeeds are valid bundles of several shapes; the committed corpus in
// testdata/fuzz/FuzzDecode holds them (written by -update) plus a few
// malformed inputs.
func fuzzSeeds(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	add := func(name string, p *ir.Program, src []byte) {
		data, err := Encode(mustNew(t, p, src))
		if err != nil {
			t.Fatal(err)
		}
		seeds[name] = data
	}
	add("ring2_simple", legalRing(t, 2, ir.Simple), nil)
	r3 := legalRing(t, 3, ir.LL)
	add("ring3_ll_source", r3, []byte(r3.String()))
	pairs := irtest.PairsAllReducePrimitive(3)
	pairs.NumThreads, pairs.MinBytes, pairs.MaxBytes, pairs.SliceBytes = 512, 1024, 1<<20, 4096
	add("pairs3_window", pairs, []byte{})
	bc := irtest.New(ir.Broadcast, 2, 1).Root(1).Build()
	bc.InPlace = true
	add("broadcast2_empty", bc, nil)
	seeds["truncated_header"] = []byte(Magic + "\x02\x00")
	seeds["empty"] = []byte{}
	return seeds
}

func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz/FuzzDecode")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range fuzzSeeds(t) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n", strconv.Quote(string(data)))
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
// as given and with its checksums repaired (fixChecksums).
func FuzzDecode(f *testing.F) {
	for _, data := range fuzzSeeds(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
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
}
