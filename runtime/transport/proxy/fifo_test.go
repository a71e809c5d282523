package proxy

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"
)

// TestFIFOProtocol: the FIFO's producer and consumer sides alone (no UCX):
// four producers post 2500 descriptors each through 4 slots; the consumer
// sees every ticket once, in order, with its fields intact.
func TestFIFOProtocol(t *testing.T) {
	const producers, per, capacity = 4, 2500, 4
	blk, err := AllocHost(FIFOBytes(capacity))
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Free()
	f, err := newFIFO(blk, capacity)
	if err != nil {
		t.Fatal(err)
	}
	ok := func() error { return nil }
	var wg sync.WaitGroup
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				tk, err := f.reserve(waitBound{deadline: time.Now().Add(time.Minute), timeout: time.Minute}, ok)
				if err != nil {
					t.Error(err)
					return
				}
				f.post(tk, Desc{SrcOff: tk, DstOff: ^tk, Size: uint32(tk * 3), SrcRegion: uint16(g), DstRegion: uint16(tk), Channel: uint16(tk >> 16), Op: Op(tk%7 + 1)})
			}
		}()
	}
	seen := make([]int, producers)
	deadline := time.Now().Add(time.Minute)
	for e := uint64(0); e < producers*per; {
		d, ok := f.peek(e)
		if !ok {
			if time.Now().After(deadline) {
				t.Fatalf("ticket %d never posted", e)
			}
			osYield()
			continue
		}
		want := Desc{SrcOff: e, DstOff: ^e, Size: uint32(e * 3), SrcRegion: d.SrcRegion, DstRegion: uint16(e), Channel: uint16(e >> 16), Op: Op(e%7 + 1)}
		if d != want || int(d.SrcRegion) >= producers {
			t.Fatalf("ticket %d: %+v, want %+v", e, d, want)
		}
		seen[d.SrcRegion]++
		e++
		f.publish(e)
	}
	wg.Wait()
	for g, n := range seen {
		if n != per {
			t.Errorf("producer %d: %d descriptors seen, want %d", g, n, per)
		}
	}
	if f.Tail() != producers*per {
		t.Fatalf("tail %d", f.Tail())
	}
}

func TestFIFOCapacity(t *testing.T) {
	blk, _ := AllocHost(4096)
	defer blk.Free()
	for _, c := range []int{0, 3, -4, MaxCapacity * 2} {
		if _, err := newFIFO(blk, c); err == nil {
			t.Errorf("capacity %d accepted", c)
		}
	}
	if _, err := newFIFO(blk, 1024); err == nil {
		t.Error("a block too small accepted")
	}
}

// TestFIFOFullTimesOut: a producer waiting for a slot that never frees
// gives up after its bound, saying what it waited for.
func TestFIFOFullTimesOut(t *testing.T) {
	blk, _ := AllocHost(FIFOBytes(2))
	defer blk.Free()
	f, _ := newFIFO(blk, 2)
	ok := func() error { return nil }
	b := waitBound{deadline: time.Now().Add(50 * time.Millisecond), timeout: 50 * time.Millisecond}
	for range 2 {
		if _, err := f.reserve(b, ok); err != nil {
			t.Fatal(err)
		}
	}
	_, err := f.reserve(b, ok)
	if err == nil || err.Error() != "waiting for a free FIFO slot (ticket 2, 0 completed of capacity 2): timed out after 50ms (THESEUS_TIMEOUT)" {
		t.Fatalf("reserve on a full FIFO: %v", err)
	}
}

func regionTable(rs []wireRegion) []byte {
	m := binary.LittleEndian.AppendUint32(nil, uint32(len(rs)))
	for _, r := range rs {
		m = binary.LittleEndian.AppendUint16(m, r.id)
		m = append(m, byte(r.path))
		m = binary.LittleEndian.AppendUint64(m, r.base)
		m = binary.LittleEndian.AppendUint64(m, r.size)
		m = binary.LittleEndian.AppendUint32(m, uint32(len(r.key)))
		m = append(m, r.key...)
	}
	return m
}

func FuzzDecodeRegions(f *testing.F) {
	f.Add(regionTable([]wireRegion{{id: 0, base: 0x7f0000000000, size: 4096, key: []byte{1, 2, 3}}}), 0)
	f.Add(regionTable([]wireRegion{{id: 2, path: Staged, base: 4096, size: 1 << 20, key: []byte{9}}, {id: 3, base: 1, size: 1, key: []byte{7, 7}}}), 2)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, m []byte, have int) {
		if have < 0 || have > 1<<16 {
			return
		}
		rs, err := decodeRegions(m, have)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		if got := regionTable(rs); string(got) != string(m) {
			t.Fatalf("round trip: %x, want %x", got, m)
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(encodeHello(helloMsg{rank: 3, addr: []byte("worker address"), probe: 0x7f0000001000, key: []byte{1, 2}}), 3)
	f.Add([]byte("THPX1"), 0)
	f.Fuzz(func(t *testing.T, m []byte, rank int) {
		h, err := decodeHello(m, rank)
		if err == nil && string(encodeHello(h)) != string(m) {
			t.Fatalf("round trip of %x", m)
		}
	})
}

// A waiter that has waited past its spin sleeps, and from then on no longer
// counts as a helper: the proxy's goroutine, which backs off while helpers
// spin, must progress the worker meanwhile (a put stream over TCP ran at a
// sixth of its rate while waiters slept registered).
func TestSleepingWaiterStopsHelping(t *testing.T) {
	p := &Proxy{kick: make(chan struct{}, 1)}
	h := p.startHelping()
	b := waitBound{deadline: time.Now().Add(time.Minute), timeout: time.Minute, start: time.Now().Add(-time.Second), spin: time.Millisecond, h: h}
	if got := p.helpers.Load(); got != 1 {
		t.Fatalf("helpers %d after startHelping, want 1", got)
	}
	if err := spinCheck(1, b, func() error { return nil }); err != nil || p.helpers.Load() != 1 {
		t.Fatalf("round 1 (no check): err %v, helpers %d; want nil, 1", err, p.helpers.Load())
	}
	if err := spinCheck(63, b, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := p.helpers.Load(); got != 0 {
		t.Fatalf("helpers %d after the wait began to sleep, want 0", got)
	}
	h.stop() // the wait's end: nothing more to undo
	if got := p.helpers.Load(); got != 0 {
		t.Fatalf("helpers %d after stop, want 0", got)
	}
	// A wait within its spin yields and stays a helper.
	h2 := p.startHelping()
	b2 := waitBound{deadline: time.Now().Add(time.Minute), timeout: time.Minute, start: time.Now(), spin: time.Hour, h: h2}
	if err := spinCheck(63, b2, func() error { return nil }); err != nil || p.helpers.Load() != 1 {
		t.Fatalf("spinning wait: err %v, helpers %d; want nil, 1", err, p.helpers.Load())
	}
	h2.stop()
}
