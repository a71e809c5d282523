package bundle

import (
	"bytes"
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

// TestKernels: a bundle's specialised kernels round-trip through Encode,
// Decode, WriteTo and Open (read on demand), do not change the ID, and
// are refused when out of order, of another table, or tampered with.
func TestKernels(t *testing.T) {
	p := legalRing(t, 2, ir.LL)
	plain := mustNew(t, p, nil)
	id0, err := plain.ID()
	if err != nil {
		t.Fatal(err)
	}
	b := mustNew(t, p, nil)
	b.Kernels = []Kernel{{Rank: 0, DataType: ir.Float32, PTX: []byte("rank 0 float32")},
		{Rank: 0, DataType: ir.Bfloat16, PTX: []byte("rank 0 bfloat16")}, {Rank: 1, DataType: ir.Float32, PTX: []byte("rank 1")}}
	SortKernels(b.Kernels)
	data, err := Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	var w bytes.Buffer
	if _, err := b.WriteTo(&w); err != nil || !bytes.Equal(w.Bytes(), data) {
		t.Fatalf("WriteTo differs from Encode (%v)", err)
	}
	d, id, err := DecodeID(data)
	if err != nil {
		t.Fatal(err)
	}
	if id != id0 {
		t.Error("kernels changed the ID")
	}
	o, err := Open(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range b.Kernels {
		for _, got := range []*Bundle{d, o} {
			ptx, err := got.Kernel(k.Rank, k.DataType)
			if err != nil || !bytes.Equal(ptx, k.PTX) {
				t.Errorf("rank %d %v: %q (%v), want %q", k.Rank, k.DataType, ptx, err, k.PTX)
			}
		}
	}
	if ptx, err := o.Kernel(1, ir.Bfloat16); ptx != nil || err != nil {
		t.Errorf("a kernel the bundle lacks: %q %v", ptx, err)
	}
	// Out of order.
	bad := mustNew(t, p, nil)
	bad.Kernels = []Kernel{b.Kernels[1], b.Kernels[0]}
	if _, err := Encode(bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("unsorted kernels: %v", err)
	}
	// Tampered PTX: Decode refuses it; Open only when the kernel is read.
	tam := bytes.Clone(data)
	i := bytes.Index(tam, []byte("rank 1"))
	tam[i] ^= 1
	if _, err := Decode(tam); !errors.Is(err, ErrChecksum) {
		t.Errorf("tampered kernel: Decode %v", err)
	}
	ot, err := Open(bytes.NewReader(tam), int64(len(tam)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ot.Kernel(1, ir.Float32); !errors.Is(err, ErrChecksum) {
		t.Errorf("tampered kernel: Open's Kernel %v", err)
	}
	// A kernel of another table: its entry's table hash is not the
	// section's.
	ks := sectionStart(data) + len(b.Tables[0]) + len(b.Tables[1]) // the kernels section (no source)
	other := bytes.Clone(data)
	other[ks+4+8] ^= 1
	if _, err := Decode(other); !errors.Is(err, ErrChecksum) {
		t.Errorf("a kernel of another table: Decode %v", err)
	}
	if _, err := Open(bytes.NewReader(other), int64(len(other))); !errors.Is(err, ErrChecksum) {
		t.Errorf("a kernel of another table: Open %v", err)
	}
}
