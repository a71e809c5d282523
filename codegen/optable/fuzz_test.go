package optable

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// fixup makes a mutated table pass the cheap checks (total size and CRC)
// so that the fuzzer reaches the record validation behind them.
func fixup(b []byte) []byte {
	c := append([]byte(nil), b...)
	if len(c) < HeaderBytes {
		return c
	}
	binary.LittleEndian.PutUint64(c[8:], uint64(len(c)))
	binary.LittleEndian.PutUint32(c[crcOffset:], 0)
	binary.LittleEndian.PutUint32(c[crcOffset:], crc32.Checksum(c, castagnoli))
	return c
}

// FuzzDecode checks that Decode never panics or over-allocates, and that
// whatever it accepts re-encodes to the same bytes (the encoding is
// canonical). Seeds: the test programs' tables (f.Add) and the files under
// testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, p := range testPrograms() {
		tabs, err := LowerAll(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, tab := range tabs[:1] {
			b, err := tab.MarshalBinary()
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	// An LL table with the self-fenced flag (MarkSelfFenced).
	if raw, err := LowerAllBinary(llProgram()); err != nil || MarkSelfFenced(raw[0]) != nil {
		f.Fatal("the self-fenced seed", err)
	} else {
		f.Add(raw[0])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, fixup(b)} {
			tab, err := Decode(in)
			if err != nil {
				continue
			}
			out, err := tab.MarshalBinary()
			if err != nil {
				t.Fatalf("Decode accepted a table that MarshalBinary rejects: %v", err)
			}
			if !bytes.Equal(in, out) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", in, out)
			}
		}
	})
}
