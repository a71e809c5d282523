package proxy

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cuda/kernel"
)

// headerDir writes port.h (cuda/kernel/port.h, the kernel's sources
// embedded there, so that a compiled test binary run elsewhere checks it)
// into a temporary directory for the compilers.
func headerDir(t *testing.T) string {
	dir := t.TempDir()
	h, err := fs.ReadFile(kernel.Sources, "port.h")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "port.h"), h, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPortHeaderLayout compiles port.h with gcc, asserting at compile time
// that its structs and constants are the ones fifo.go uses.
func TestPortHeaderLayout(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	var b strings.Builder
	b.WriteString("#include <stddef.h>\n#include \"port.h\"\n#define SAME(a, b) _Static_assert((a) == (b), #a \" != \" #b)\n")
	for _, c := range [][2]string{
		{"sizeof(theseus_port_desc)", fmt.Sprint(descBytes)},
		{"offsetof(theseus_port_desc, src_off)", "0"}, {"offsetof(theseus_port_desc, dst_off)", "8"},
		{"offsetof(theseus_port_desc, size)", "16"}, {"offsetof(theseus_port_desc, src_region)", "20"},
		{"offsetof(theseus_port_desc, dst_region)", "22"}, {"offsetof(theseus_port_desc, channel)", "24"},
		{"offsetof(theseus_port_desc, op)", "26"}, {"offsetof(theseus_port_desc, seq)", "28"},
		{"sizeof(theseus_port_ctrl)", "64"}, {"offsetof(theseus_port_ctrl, tail)", fmt.Sprint(offTail)},
		{"offsetof(theseus_port_ctrl, error)", fmt.Sprint(offError)}, {"offsetof(theseus_port_ctrl, capacity)", fmt.Sprint(offCapacity)},
		{"THESEUS_PORT_HEAD_OFFSET", fmt.Sprint(offHead)}, {"THESEUS_PORT_RING_OFFSET", fmt.Sprint(offRing)},
		{"THESEUS_PORT_MAX_CAPACITY", fmt.Sprint(MaxCapacity)},
		{"THESEUS_PORT_PUT", fmt.Sprint(int(OpPut))}, {"THESEUS_PORT_SIGNAL", fmt.Sprint(int(OpSignal))},
		{"THESEUS_PORT_FLUSH", fmt.Sprint(int(OpFlush))},
	} {
		fmt.Fprintf(&b, "SAME(%s, %s);\n", c[0], c[1])
	}
	dir := headerDir(t)
	src := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Werror", "-I", dir, "-c", "-o", filepath.Join(dir, "layout.o"), src).CombinedOutput(); err != nil {
		t.Fatalf("port.h differs from fifo.go:\n%s", out)
	}
}

// TestPortHeaderDevice compiles the device-side producer of port.h for
// sm_80 the way cuda/kernel/build.sh compiles the executor kernel (clang-14,
// no CUDA headers) and checks the PTX has the ordering it documents.
func TestPortHeaderDevice(t *testing.T) {
	clang, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skip("no clang-14 (the kernel compiler, cuda/kernel/build.sh)")
	}
	dir := headerDir(t)
	src := filepath.Join(dir, "post.cu")
	if err := os.WriteFile(src, []byte(`#include "port.h"
extern "C" __attribute__((global)) void post(theseus_port_ctrl* f, uint64_t* head, const volatile uint32_t* abort, uint64_t* out) {
  theseus_port_desc d = {};
  d.op = THESEUS_PORT_PUT | THESEUS_PORT_SIGNAL | THESEUS_PORT_FLUSH;
  d.size = 8;
  d.channel = 1;
  uint64_t t = theseus_port_post(f, head, &d, abort);
  while (t != ~(uint64_t)0 && !theseus_port_done(f, t) && *abort == 0) {}
  *out = t;
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ptx := filepath.Join(dir, "post.ptx")
	if out, err := exec.Command(clang, "--cuda-device-only", "-nocudainc", "-nocudalib", "--cuda-gpu-arch=sm_80", "-O3", "-std=c++17",
		"-Wall", "-Werror", "-Wno-unknown-cuda-version", "-I", dir, "-S", "-o", ptx, src).CombinedOutput(); err != nil {
		t.Fatalf("port.h does not compile for the device:\n%s", out)
	}
	b, err := os.ReadFile(ptx)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	// ticket, space, fence, then seq: in this order.
	at := 0
	for _, w := range []string{"atom.relaxed.gpu.global.add.u64", "ld.acquire.sys.global.u64", "fence.acq_rel.sys", "st.relaxed.sys.global.u32"} {
		i := strings.Index(s[at:], w)
		if i < 0 {
			t.Fatalf("PTX lacks %q after offset %d:\n%s", w, at, s)
		}
		at += i
	}
}
