package speckernels_test

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/specialize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
	"github.com/theseus-ccl/theseus/runtime/speckernels"
)

// TestEmbeddedCurrent: the archive holds every shape of Shapes, each
// rank's kernels built from the table the runtime generates today (a
// generator or lowering change shows here, without clang; a kernel source
// change only in .ci/run's genspec -check), each module a checked
// specialised kernel with one theseus_spec entry.
func TestEmbeddedCurrent(t *testing.T) {
	for _, sh := range speckernels.Shapes {
		set := speckernels.Lookup(sh)
		if set == nil {
			t.Fatalf("%v: not in the archive", sh)
		}
		tabs, err := schedfile.GeneratedTables(sh.Algo, sh.Coll, sh.Proto, sh.Channels, sh.NRanks, sh.NLocalRanks)
		if err != nil {
			t.Fatal(err)
		}
		for r, tab := range tabs {
			if sum, ok := set.TableSum(r); !ok || sum != sha256.Sum256(tab) {
				t.Errorf("%v rank %d: the archive's table hash %x (%v) is not the generated table's %x: go generate ./runtime/speckernels", sh, r, sum, ok, sha256.Sum256(tab))
			}
			for _, dt := range speckernels.DataTypes {
				ptx, err := set.Kernel(r, dt, tab)
				if err != nil || ptx == nil {
					t.Fatalf("%v rank %d %v: %v, %d bytes", sh, r, dt, err, len(ptx))
				}
				if err := specialize.Check(ptx); err != nil {
					t.Errorf("%v rank %d %v: %v", sh, r, dt, err)
				}
			}
		}
		if _, ok := set.TableSum(len(tabs)); ok {
			t.Errorf("%v: a table hash past rank %d", sh, len(tabs)-1)
		}
	}
}

// TestKernelOnlyForItsTable: a table other than the one a kernel was
// built from gets none (the generic executor runs it), as does a datatype
// without a module; an unknown shape has no set.
func TestKernelOnlyForItsTable(t *testing.T) {
	sh := speckernels.Shapes[0]
	set := speckernels.Lookup(sh)
	tabs, err := schedfile.GeneratedTables(sh.Algo, sh.Coll, sh.Proto, sh.Channels, sh.NRanks, sh.NLocalRanks)
	if err != nil || set == nil {
		t.Fatal(err, set)
	}
	other := bytes.Clone(tabs[0])
	other[len(other)-1] ^= 1
	for name, tc := range map[string]struct {
		rank int
		dt   ir.DataType
		tab  []byte
	}{
		"changed table": {0, ir.Float32, other},
		"peer's table":  {0, ir.Float32, tabs[1]},
		"no module":     {0, ir.Int8, tabs[0]},
		"rank past":     {sh.NRanks, ir.Float32, tabs[0]},
	} {
		if ptx, err := set.Kernel(tc.rank, tc.dt, tc.tab); err != nil || ptx != nil {
			t.Errorf("%s: %d bytes, %v; want none", name, len(ptx), err)
		}
	}
	if s := speckernels.Lookup(speckernels.Shape{Algo: "oneshot", Coll: ir.AllReduce, Proto: ir.LL, Channels: 1, NRanks: 3}); s != nil {
		t.Error("a set for 3 ranks, which the archive does not build")
	}
}

// TestReadErrors: archives without an index, with a bad one, or with an
// index naming a module that is not there are errors.
func TestReadErrors(t *testing.T) {
	mk := func(files map[string]string) []byte {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		for n, c := range files {
			w, _ := zw.Create(n)
			w.Write([]byte(c))
		}
		zw.Close()
		return b.Bytes()
	}
	sum := strings.Repeat("ab", sha256.Size)
	for name, tc := range map[string]struct {
		data []byte
		msg  string
	}{
		"not a zip":      {[]byte("not a zip"), "zip"},
		"no index":       {mk(map[string]string{"a/r0-float32.ptx": "x"}), "no index.json"},
		"bad index":      {mk(map[string]string{"index.json": "{"}), "index.json"},
		"bad hash":       {mk(map[string]string{"index.json": `{"shapes":[{"shape":"a","tables":["zz"],"dtypes":["float32"]}]}`}), "table hash"},
		"bad datatype":   {mk(map[string]string{"index.json": `{"shapes":[{"shape":"a","tables":["` + sum + `"],"dtypes":["float99"]}]}`}), "float99"},
		"missing module": {mk(map[string]string{"index.json": `{"shapes":[{"shape":"a","tables":["` + sum + `"],"dtypes":["float32"]}]}`}), "lacks a/r0-float32.ptx"},
	} {
		if _, err := speckernels.Read(tc.data); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.msg)
		}
	}
	ok := mk(map[string]string{"index.json": `{"shapes":[{"shape":"a","tables":["` + sum + `"],"dtypes":["float32"]}]}`, "a/r0-float32.ptx": "x"})
	if m, err := speckernels.Read(ok); err != nil || m["a"] == nil {
		t.Errorf("a well-formed archive: %v, %v", m, err)
	}
}
