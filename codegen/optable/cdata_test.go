package optable

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostCC is the C compiler CData's test builds with: gcc, or cc.
func hostCC(t *testing.T) string {
	for _, cc := range []string{"gcc", "cc", "clang-14"} {
		if p, err := exec.LookPath(cc); err == nil {
			return p
		}
	}
	t.Skip("no C compiler (gcc, cc or clang-14) on this machine: CData's arrays cannot be compiled for the host")
	return ""
}

// TestCDataIsTheEncoding compiles CData's arrays for the host with the
// header's structs (cuda/kernel/optable.h, whose static asserts pin the
// record layout) and checks that the bytes of each array are the
// encoding's section, record for record: what a specialised kernel
// compiles in is the table the runtime uploads.
func TestCDataIsTheEncoding(t *testing.T) {
	cc := hostCC(t)
	dir := t.TempDir()
	for name, p := range testPrograms() {
		tabs, err := LowerAll(p)
		if err != nil {
			t.Fatal(err)
		}
		for r, tab := range tabs {
			b, err := tab.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			data, err := CData(b, "spec_", "static const")
			if err != nil {
				t.Fatal(err)
			}
			var src bytes.Buffer
			fmt.Fprintf(&src, "#include <stdio.h>\n#include \"optable.h\"\n%s\n", data)
			src.WriteString(`static void dump(const char* name, const void* p, size_t n) {
  printf("%s ", name);
  for (size_t i = 0; i < n; i++) printf("%02x", ((const unsigned char*)p)[i]);
  printf("\n");
}
int main(void) {
  dump("hdr", &spec_hdr, sizeof spec_hdr);
  dump("tbs", spec_tbs, sizeof spec_tbs);
  dump("ops", spec_ops, sizeof spec_ops);
  dump("refs", spec_refs, sizeof spec_refs);
  dump("deps", spec_deps, sizeof spec_deps);
  dump("chan_list", spec_chan_list, sizeof spec_chan_list);
  return 0;
}
`)
			base := filepath.Join(dir, fmt.Sprintf("%s_%d", name, r))
			if err := os.WriteFile(base+".c", src.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-Wno-unused-variable", "-I", filepath.Join("..", "..", "cuda", "kernel"),
				"-o", base, base+".c").CombinedOutput(); err != nil {
				t.Fatalf("%s rank %d: %v\n%s", name, r, err, out)
			}
			out, err := exec.Command(base).Output()
			if err != nil {
				t.Fatal(err)
			}
			var h wireHeader
			h.get(b)
			// The sections as CData writes them: whole records, an empty
			// section as one zero record, one empty threadblock after the
			// table's.
			sec := func(off, n, size uint64, extra int) []byte {
				s := append([]byte(nil), b[off:off+n*size]...)
				if pad := max(n+uint64(extra), 1) - n; pad > 0 {
					s = append(s, make([]byte, pad*size)...)
				}
				return s
			}
			want := map[string][]byte{
				"hdr": b[:HeaderBytes], "tbs": sec(h.OffTBs, uint64(h.NumTBs), TBBytes, 1), "ops": sec(h.OffOps, h.NumOps, OpBytes, 0),
				"refs": sec(h.OffRefs, h.NumRefs, RefBytes, 0), "deps": sec(h.OffDeps, h.NumDeps, DepBytes, 0),
				"chan_list": sec(h.OffChanList, h.NumChanList, ChanListBytes, 0),
			}
			seen := 0
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				k, v, _ := strings.Cut(line, " ")
				got, err := hex.DecodeString(v)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[k]) {
					t.Errorf("%s rank %d %s: compiled %x\nencoded %x", name, r, k, got, want[k])
				}
				seen++
			}
			if seen != len(want) {
				t.Errorf("%s rank %d: %d arrays dumped, want %d", name, r, seen, len(want))
			}
		}
	}
}

func TestCDataRejects(t *testing.T) {
	if _, err := CData([]byte("not a table"), "x_", "static const"); err == nil {
		t.Error("CData of garbage: no error")
	}
}
