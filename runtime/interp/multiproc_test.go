//go:build linux

package interp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// The multi-process test: ranks are OS processes (this test binary re-run
// as helpers) that share one mmap'd file holding every rank's buffers and
// inbound semaphores, and read their op tables with optable.Decode, as the
// host backend will.

const (
	mpRanks    = 3
	mpCount    = 1000 // float32 per block
	mpLaunches = 3
	mpEnv      = "THESEUS_INTERP_TEST_RANK"
)

type mpLayout struct {
	in, out, scratch [mpRanks]int64 // byte offsets in the segment
	sizes            [mpRanks]Sizes
	sems             int64 // offset of the inbound words: [rank][channel]
	total            int64
}

func mpSetup(tabs []*optable.Table, req Request) (mpLayout, error) {
	var l mpLayout
	off := int64(0)
	place := func(n int64) int64 { o := off; off += (n + 63) / 64 * 64; return o }
	for p := range mpRanks {
		s, err := launch.BufferSizes(tabs[p], p, req)
		if err != nil {
			return l, err
		}
		l.sizes[p] = s
		l.in[p], l.out[p], l.scratch[p] = place(s.Input), place(s.Output), place(s.Scratch)
	}
	l.sems = place(8 * mpRanks * mpRanks)
	l.total = off
	return l, nil
}

func mpValue(launch, p, e int) float32 { return float32((launch*7+p*3+e)%101 - 50) }

func mpRequest() Request {
	return Request{Count: mpCount, DataType: ir.Float32, RedOp: ir.Sum, Slices: 2, Timeout: 20 * time.Second}
}

// TestMultiProcess spawns one helper process per rank.
func TestMultiProcess(t *testing.T) {
	if os.Getenv(mpEnv) != "" {
		t.Skip("helper")
	}
	tabs, err := optable.LowerAll(progs.AllPairs(ir.AllReduce, mpRanks, 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for p, tab := range tabs {
		b, err := tab.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank%d.tsot", p)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := mpSetup(tabs, mpRequest())
	if err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "segment")
	if err := os.WriteFile(seg, make([]byte, l.total), 0o600); err != nil {
		t.Fatal(err)
	}
	// Initialise the inbound semaphores before any rank starts.
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(l.total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	words, err := Words(mem[l.sems:], mpRanks*mpRanks)
	if err != nil {
		t.Fatal(err)
	}
	for p, tab := range tabs {
		for c, ch := range tab.Channels {
			words[p*mpRanks+c] = uint64(ch.Init)
		}
	}
	unix.Munmap(mem)

	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for p := range mpRanks {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMultiProcessHelper$", "-test.v")
		cmd.Env = append(os.Environ(), mpEnv+"="+strconv.Itoa(p), "THESEUS_INTERP_TEST_DIR="+dir)
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for p, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d process: %v\n%s", p, err, outs[p])
		} else if !strings.Contains(outs[p].String(), "--- PASS: TestMultiProcessHelper") {
			t.Errorf("rank %d process did not run the helper:\n%s", p, outs[p])
		}
	}
}

// TestMultiProcessHelper is one rank's process.
func TestMultiProcessHelper(t *testing.T) {
	rs := os.Getenv(mpEnv)
	if rs == "" {
		t.Skip("run by TestMultiProcess")
	}
	rank, _ := strconv.Atoi(rs)
	dir := os.Getenv("THESEUS_INTERP_TEST_DIR")
	var tabs []*optable.Table
	for p := range mpRanks {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.tsot", p)))
		if err != nil {
			t.Fatal(err)
		}
		tab, err := optable.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		tabs = append(tabs, tab)
	}
	req := mpRequest()
	l, err := mpSetup(tabs, req)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "segment"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := unix.Mmap(int(f.Fd()), 0, int(l.total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(seg)
	bufs := func(p int) Buffers {
		s := l.sizes[p]
		return Buffers{Input: seg[l.in[p] : l.in[p]+s.Input], Output: seg[l.out[p] : l.out[p]+s.Output],
			Scratch: seg[l.scratch[p] : l.scratch[p]+s.Scratch]}
	}
	words, err := Words(seg[l.sems:], mpRanks*mpRanks)
	if err != nil {
		t.Fatal(err)
	}
	t0 := tabs[rank]
	expected := make([]uint64, len(t0.Channels)) // private to this process
	m := &RankMem{Buffers: bufs(rank), Ends: make([]End, len(t0.Channels))}
	for c, ch := range t0.Channels {
		m.Ends[c] = End{Inbound: &words[rank*mpRanks+c], PeerInbound: &words[ch.Peer*mpRanks+ch.PeerChannel],
			Expected: &expected[c], Peer: bufs(ch.Peer)}
	}
	for launch := 1; launch <= mpLaunches; launch++ {
		req.Launch = uint64(launch)
		for e := range mpCount {
			binary.LittleEndian.PutUint32(m.Input[4*e:], math.Float32bits(mpValue(launch, rank, e)))
		}
		if err := RunRank(context.Background(), t0, rank, req, m); err != nil {
			t.Fatalf("launch %d: %v", launch, err)
		}
		for e := range mpCount {
			var want float32
			for p := range mpRanks {
				want += mpValue(launch, p, e)
			}
			if got := math.Float32frombits(binary.LittleEndian.Uint32(m.Output[4*e:])); got != want {
				t.Fatalf("launch %d element %d: %v, want %v", launch, e, got, want)
			}
		}
	}
}
