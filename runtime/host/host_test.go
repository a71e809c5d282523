//go:build linux

package host

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

func TestRegistry(t *testing.T) {
	b, err := device.Open(Name)
	if err != nil || b != Backend() || b.Name() != "host" {
		t.Fatalf("Open(host) = %v, %v", b, err)
	}
	if _, err := device.Open("nope"); err == nil || !strings.Contains(err.Error(), "host") {
		t.Errorf("Open(nope) = %v, want an error listing the backends", err)
	}
}

func TestAllocExportImport(t *testing.T) {
	b := Backend()
	start := Segments()
	p, err := b.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if p%64 != 0 {
		t.Errorf("allocation %#x not 64-byte aligned", uintptr(p))
	}
	reg, ok := b.Lookup(p+10, 20)
	if !ok || reg.Base != p || reg.Size != pageSize {
		t.Fatalf("Lookup = %+v, %v", reg, ok)
	}
	if _, ok := b.Lookup(p+10, pageSize); ok {
		t.Error("a range past the end of the allocation was found")
	}
	mem, _ := Bytes(p, 100)
	for i := range mem {
		if mem[i] != 0 {
			t.Fatal("allocation not zeroed")
		}
		mem[i] = byte(i)
	}
	h, err := b.Export(reg)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := b.Import(h)
	if err != nil || imp != reg {
		t.Fatalf("in-process Import = %+v, %v; want the owner's mapping %+v", imp, err, reg)
	}
	// Freed while imported: the mapping lives until Unimport, but it is no
	// longer an allocation.
	if err := b.Free(p); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup(p, 1); ok {
		t.Error("a freed allocation is still found")
	}
	if m, _ := Bytes(p, 100); m[99] != 99 {
		t.Error("the imported mapping lost its contents")
	}
	if _, err := b.Import(h); !errors.Is(err, device.ErrBadHandle) {
		t.Errorf("import of a freed allocation: %v", err)
	}
	if err := b.Unimport(imp.Base); err != nil {
		t.Fatal(err)
	}
	if got := Segments(); got != start {
		t.Errorf("%d segments left, had %d", got, start)
	}
	// A new allocation gets a new generation, even at the same address.
	q, _ := b.Alloc(100)
	r2, _ := b.Lookup(q, 1)
	if r2.Gen == reg.Gen {
		t.Errorf("generation %d reused", r2.Gen)
	}
	b.Free(q)
	for _, bad := range []error{b.Free(q), b.Unimport(q), b.Free(0)} {
		if bad == nil {
			t.Error("a double free or unimport succeeded")
		}
	}
}

func TestBadHandles(t *testing.T) {
	b := Backend()
	p, _ := b.Alloc(1)
	defer b.Free(p)
	reg, _ := b.Lookup(p, 1)
	good, _ := b.Export(reg)
	mut := func(f func(h []byte)) device.Handle {
		h := append([]byte(nil), good...)
		f(h)
		return h
	}
	for name, h := range map[string]device.Handle{
		"empty":       nil,
		"short":       good[:10],
		"magic":       mut(func(h []byte) { h[0] = 'X' }),
		"size 0":      mut(func(h []byte) { clear(h[16:24]) }),
		"size":        mut(func(h []byte) { h[16]++ }),
		"generation":  mut(func(h []byte) { h[24]++ }),
		"other pid":   mut(func(h []byte) { h[8] ^= 0x55; h[9] ^= 0x55 }),
		"another fd":  mut(func(h []byte) { h[8] ^= 0x55; h[12] = 0 }),
		"long handle": append(append([]byte(nil), good...), 0),
	} {
		if _, err := b.Import(h); !errors.Is(err, device.ErrBadHandle) {
			t.Errorf("%s: %v, want ErrBadHandle", name, err)
		}
	}
	if _, err := b.Export(device.Region{Base: p, Size: 1, Gen: reg.Gen}); !errors.Is(err, device.ErrNotExportable) {
		t.Errorf("export of a wrong region: %v", err)
	}
	g := make([]byte, 64)
	if _, err := b.Export(device.Region{Base: PtrOf(g), Size: 64}); !errors.Is(err, device.ErrNotExportable) {
		t.Errorf("export of Go memory: %v", err)
	}
}

// FuzzImport: a handle from the network never panics the importer, and
// never maps anything but a Theseus segment.
func FuzzImport(f *testing.F) {
	b := Backend()
	p, _ := b.Alloc(1)
	reg, _ := b.Lookup(p, 1)
	good, _ := b.Export(reg)
	f.Add([]byte(good))
	f.Add([]byte("THSHMEM1"))
	f.Fuzz(func(t *testing.T, h []byte) {
		r, err := b.Import(h)
		if err != nil {
			if !errors.Is(err, device.ErrBadHandle) && !strings.HasPrefix(err.Error(), "host: mmap") {
				t.Fatalf("error %v", err)
			}
			return
		}
		// Fuzz workers are other processes: they map the seed's segment at
		// their own address.
		if r.Gen != reg.Gen || r.Size != reg.Size {
			t.Fatalf("imported %+v from %x; only %+v exists", r, h, reg)
		}
		b.Unimport(r.Base)
	})
}

// TestImportFromProcess: a segment exported by another process is
// imported by opening its memfd through /proc.
func TestImportFromProcess(t *testing.T) {
	if os.Getenv("THESEUS_HOST_CHILD") != "" {
		b := Backend()
		p, _ := b.Alloc(64)
		m, _ := Bytes(p, 64)
		copy(m, "written by the child")
		reg, _ := b.Lookup(p, 64)
		h, _ := b.Export(reg)
		fmt.Printf("HANDLE %x\n", []byte(h))
		in := bufio.NewScanner(os.Stdin)
		in.Scan() // the parent writes back, then says done
		fmt.Printf("SEES %s\n", strings.TrimRight(string(m[32:]), "\x00"))
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestImportFromProcess$")
	cmd.Env = append(os.Environ(), "THESEUS_HOST_CHILD=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stdout)
	var h []byte
	for sc.Scan() {
		if x, ok := strings.CutPrefix(sc.Text(), "HANDLE "); ok {
			h, _ = hex.DecodeString(x)
			break
		}
	}
	reg, err := Backend().Import(h)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := Bytes(reg.Base, 64)
	if got := strings.TrimRight(string(m[:32]), "\x00"); got != "written by the child" {
		t.Errorf("parent sees %q", got)
	}
	copy(m[32:], "and by the parent")
	fmt.Fprintln(stdin, "done")
	var seen string
	for sc.Scan() {
		if x, ok := strings.CutPrefix(sc.Text(), "SEES "); ok {
			seen = x
		}
	}
	cmd.Wait()
	if seen != "and by the parent" {
		t.Errorf("child sees %q", seen)
	}
	Backend().Unimport(reg.Base)
}

// oneRank is a 1-rank copy schedule's table.
func oneRank(t *testing.T) *optable.Table {
	t.Helper()
	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: 1, Protocol: ir.Simple})
	if err != nil {
		t.Fatal(err)
	}
	st, err := passes.Run(p, passes.Options{StopAfter: "lower"})
	if err != nil || len(st.Tables) != 1 {
		t.Fatalf("%v %v", err, st.Diags)
	}
	return st.Tables[0]
}

func words(t *testing.T, n int) device.Ptr {
	t.Helper()
	p, err := Backend().Alloc(int64(8 * n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Backend().Free(p) })
	return p
}

// TestStream: launches run in order, foreign memory works, a fence waits
// for the peers' done words and times out naming the peer, the first
// failure is sticky.
func TestStream(t *testing.T) {
	b := Backend()
	tab := oneRank(t)
	ctl := words(t, 8) // abort, done, peer's done
	in := make([]byte, 64)
	out := make([]byte, 64)
	copy(in, "0123456789abcdef0123456789abcdef")
	lay, _ := ir.NewLayout(16, ir.Float32, tab.ChunksPerBlock, 1)
	args := &device.Args{Table: tab, Rank: 0, NRanks: 1, Count: 16, DataType: ir.Float32, RedOp: ir.Sum, Layout: lay,
		Buf:   [3]device.Mem{{Ptr: PtrOf(in), Size: 64}, {Ptr: PtrOf(out), Size: 64}, {Ptr: words(t, 1024), Size: 8192}},
		Abort: ctl, Done: ctl + 8, Fence: []device.PeerWord{{Peer: 3, Word: ctl + 16}}, Timeout: 300 * time.Millisecond}
	prep, err := b.Prepare(args)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := b.NewStream()
	defer st.Close()
	for launch := uint64(1); launch <= 3; launch++ {
		if err := st.Launch(prep, launch, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if string(out[:32]) != string(in[:32]) {
		t.Errorf("output %q", out[:32])
	}
	done, _ := Bytes(ctl+8, 8)
	if done[0] != 3 {
		t.Errorf("done word %d after 3 launches", done[0])
	}
	// The peer's done word says launch 0: a fenced launch 5 waits for 4.
	start := time.Now()
	st.Launch(prep, 5, true)
	st.Launch(prep, 6, false)
	err = st.Synchronize()
	var le *LaunchError
	if !errors.As(err, &le) || le.PeerRank() != 3 || le.Launch != 5 || !errors.Is(err, interp.ErrTimeout) {
		t.Fatalf("fence: %v, want a timeout naming rank 3 in launch 5", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Errorf("fence timed out after %v, timeout 300ms", d)
	}
	if done[0] != 3 {
		t.Errorf("done word %d: the failed and the skipped launch must not complete", done[0])
	}
	if st.Err() != err {
		t.Errorf("Err %v, want the sticky %v", st.Err(), err)
	}
	if _, err := b.Prepare(&device.Args{}); err == nil {
		t.Error("prepare without a table")
	}
	st.Close()
	if err := st.Launch(prep, 7, false); !errors.Is(err, device.ErrClosed) {
		t.Errorf("launch on a closed stream: %v", err)
	}
}

// TestBytesPastAllocation: a range past the size Alloc was asked for is
// refused, although the page behind it is mapped: the CUDA driver refuses
// such a copy (CUDA_ERROR_INVALID_VALUE), and theseus-bench once wrote a
// 128-byte unique id into an 8-byte buffer that only the GPU caught.
func TestBytesPastAllocation(t *testing.T) {
	b, err := device.Open(Name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(p)
	if got, err := Bytes(p, 8); err != nil || len(got) != 8 {
		t.Fatalf("Bytes(p, 8) = %d bytes, %v; want 8, nil", len(got), err)
	}
	if got, err := Bytes(p+4, 4); err != nil || len(got) != 4 {
		t.Fatalf("Bytes(p+4, 4) = %d bytes, %v; want 4, nil", len(got), err)
	}
	for _, c := range []struct {
		off, n int64
	}{{0, 9}, {0, 128}, {4, 5}, {8, 1}} {
		if _, err := Bytes(p+device.Ptr(c.off), c.n); err == nil || !strings.Contains(err.Error(), "crosses the end of a backend allocation of 8 bytes") {
			t.Errorf("Bytes(p+%d, %d): %v, want an error naming the 8-byte allocation", c.off, c.n, err)
		}
	}
}
