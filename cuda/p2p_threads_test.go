package cuda

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// noEnv makes THESEUS_* and MSCCLPP_* variables unset but for the given
// ones, until the returned function runs.
func noEnv(vars map[string]string) func() {
	return env.SetLookupForTest(func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	})
}

// TestP2PWantThreads: the context's threads, else THESEUS_NTHREADS, else
// by the largest transfer: 256 up to 4 KiB, 512 above.
func TestP2PWantThreads(t *testing.T) {
	for _, c := range []struct {
		env     string
		set     int
		largest int64
		want    int
	}{
		{"", 0, 0, SmallThreads}, {"", 0, 8, SmallThreads}, {"", 0, P2PSmallBytes, SmallThreads},
		{"", 0, P2PSmallBytes + 1, DefaultThreads}, {"", 0, 4 << 20, DefaultThreads}, {"", 0, 1 << 30, DefaultThreads},
		{"", 128, 1 << 30, 128}, {"", 1024, 8, P2PMaxThreads}, {"384", 0, 8, 384}, {"384", 0, 1 << 30, 384},
		{"384", 64, 1 << 30, 64}, {"2048", 0, 1 << 30, DefaultThreads}, {"x", 0, 8, 256},
	} {
		vars := map[string]string{}
		if c.env != "" {
			vars["THESEUS_NTHREADS"] = c.env
		}
		restore := noEnv(vars)
		got := p2pWantThreads(c.set, c.largest)
		restore()
		if got != c.want {
			t.Errorf("THESEUS_NTHREADS=%q, context threads %d, largest %d bytes: %d threads, want %d", c.env, c.set, c.largest, got, c.want)
		}
	}
}

// TestP2PFitThreads: the most threads (want or fewer, halving) at which
// every rank's grid on the GPU is resident at once, with an H200-like fake
// occupancy (64 registers a thread at most: one block of 1024 threads per
// multiprocessor, two of 512, four of 256, ... up to 32 blocks).
func TestP2PFitThreads(t *testing.T) {
	h200 := func(threads, shared int) (int, error) {
		if shared != 0 {
			t.Errorf("occupancy asked with %d bytes of dynamic shared memory", shared)
		}
		return min(1024/threads, 32), nil
	}
	boom := errors.New("no occupancy")
	for _, c := range []struct {
		name              string
		want, blocks, sms int
		perSM             func(int, int) (int, error)
		threads           int
	}{
		{"2 ranks x 64 blocks fit at 1024", 1024, 128, 132, h200, 1024},
		{"4 ranks x 64 blocks: 512", 1024, 256, 132, h200, 512},
		{"8 ranks x 64 blocks: 256", 1024, 512, 132, h200, 256},
		{"512 fits", 512, 128, 132, h200, 512},
		{"256 asked, kept", 256, 200, 132, h200, 256},
		{"not a power of two", 768, 200, 132, h200, 384},
		{"nothing fits: as asked", 1024, 1 << 20, 132, h200, 1024},
		{"no device answer: at most 512", 1024, 128, 0, h200, DefaultThreads},
		{"no device answer, 256 asked", 256, 128, 0, h200, 256},
		{"occupancy fails: at most 512", 1024, 128, 132, func(int, int) (int, error) { return 0, boom }, DefaultThreads},
		{"a block fits nowhere at 1024", 1024, 64, 132, func(n, _ int) (int, error) { return map[bool]int{true: 0, false: 2}[n > 512], nil }, 512},
	} {
		if got := p2pFitThreads(c.want, c.blocks, c.sms, c.perSM); got != c.threads {
			t.Errorf("%s: %d threads, want %d", c.name, got, c.threads)
		}
	}
}

// TestP2PLargestAndHelps: the largest transfer of a launch (an AlltoAllv's
// by the CPU matrix) and when a launch shares its direct copies
// (THESEUS_P2P_HELP, a send above the eager bytes to a peer whose offers
// this rank imported).
func TestP2PLargestAndHelps(t *testing.T) {
	imp := []device.P2PImport{{ID: 1, Size: 1 << 30}}
	a := &device.P2PArgs{EagerBytes: 64 << 10, Direct: true,
		Sends: []device.P2PPeer{{Peer: 1, Xfers: []device.P2PXfer{{Bytes: 8}, {Bytes: 3 << 20}}, Imports: imp}},
		Recvs: []device.P2PPeer{{Peer: 1, Xfers: []device.P2PXfer{{Bytes: 5 << 20}}}},
		Self:  []device.P2PCopy{{Bytes: 1 << 20}}}
	if got := p2pLargest(a); got != 5<<20 {
		t.Errorf("largest %d, want %d", got, 5<<20)
	}
	m := &device.P2PArgs{EagerBytes: 64 << 10, Direct: true, Matrix: &device.P2PMatrix{SendCap: 9 << 20, MaxBytes: 7 << 20},
		Sends: []device.P2PPeer{{Peer: 1, Xfers: []device.P2PXfer{{Matrix: true}}, Imports: imp}}}
	if got := p2pLargest(m); got != 7<<20 {
		t.Errorf("AlltoAllv largest %d, want %d", got, 7<<20)
	}
	small := &device.P2PArgs{EagerBytes: 64 << 10, Direct: true,
		Sends: []device.P2PPeer{{Peer: 1, Xfers: []device.P2PXfer{{Bytes: 64 << 10}}, Imports: imp}}}
	noImp := &device.P2PArgs{EagerBytes: 64 << 10, Direct: true, Sends: []device.P2PPeer{{Peer: 1, Xfers: []device.P2PXfer{{Bytes: 1 << 30}}}}}
	noDirect := *a
	noDirect.Direct = false
	recvOnly := &device.P2PArgs{EagerBytes: 64 << 10, Direct: true, Recvs: a.Recvs}
	for _, c := range []struct {
		name string
		env  map[string]string
		a    *device.P2PArgs
		want bool
	}{
		{"large send, imported", nil, a, true},
		{"AlltoAllv", nil, m, true},
		{"eager only", nil, small, false},
		{"no imports", nil, noImp, false},
		{"direct off", nil, &noDirect, false},
		{"receives only", nil, recvOnly, false},
		{"THESEUS_P2P_HELP=0", map[string]string{"THESEUS_P2P_HELP": "0"}, a, false},
		{"THESEUS_P2P_HELP=1", map[string]string{"THESEUS_P2P_HELP": "1"}, a, true},
		{"THESEUS_P2P_HELP unparsable: on", map[string]string{"THESEUS_P2P_HELP": "maybe"}, a, true},
	} {
		restore := noEnv(c.env)
		got := p2pHelps(c.a)
		restore()
		if got != c.want {
			t.Errorf("%s: helps %v, want %v", c.name, got, c.want)
		}
	}
}

// TestP2PSharing: the residency check counts the ranks on this rank's GPU
// (DeviceRanks: simulated nodes on one GPU count together), else the ranks
// of its node, else all; 2 nodes x 2 ranks on one H200 (one 512-thread
// block a multiprocessor at the kernel's registers) then fit at 256
// threads instead of 4 grids of 64 blocks of 512 that are not resident.
func TestP2PSharing(t *testing.T) {
	for _, c := range []struct {
		a    device.P2PArgs
		want int
	}{
		{device.P2PArgs{NRanks: 4, LocalRanks: 2, DeviceRanks: 4}, 4},
		{device.P2PArgs{NRanks: 16, LocalRanks: 8, DeviceRanks: 1}, 1},
		{device.P2PArgs{NRanks: 4, LocalRanks: 2}, 2},
		{device.P2PArgs{NRanks: 4}, 4},
	} {
		if got := p2pSharing(&c.a); got != c.want {
			t.Errorf("%+v: %d ranks share the GPU, want %d", c.a, got, c.want)
		}
	}
	oneAt512 := func(threads, _ int) (int, error) { return map[bool]int{true: 1, false: 2}[threads > 256], nil }
	if got := p2pFitThreads(512, 4*64, 132, oneAt512); got != 256 {
		t.Errorf("4 ranks x 64 blocks on 132 multiprocessors: %d threads, want 256", got)
	}
	if got := p2pFitThreads(512, 2*64, 132, oneAt512); got != 512 {
		t.Errorf("2 ranks x 64 blocks: %d threads, want 512", got)
	}
}
