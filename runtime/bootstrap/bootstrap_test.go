package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func startRanks(t *testing.T, n int, timeout time.Duration, skip map[int]bool) ([]*Bootstrap, []error) {
	t.Helper()
	id, err := NewLoopbackUniqueID(Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	bs := make([]*Bootstrap, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		if skip[r] {
			continue
		}
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			bs[r], errs[r] = Init(context.Background(), id, r, n, Options{Timeout: timeout})
		}(r)
	}
	wg.Wait()
	return bs, errs
}

func each(n int, f func(r int)) {
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func(r int) { defer wg.Done(); f(r) }(r)
	}
	wg.Wait()
}

func TestCollectives(t *testing.T) {
	const n = 5
	bs, errs := startRanks(t, n, 10*time.Second, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer each(n, func(r int) { bs[r].Close() })
	ctx := context.Background()
	got := make([][][]byte, n)
	mins := make([][]int64, n)
	bcast := make([][]byte, n)
	recvd := make([][]byte, n)
	each(n, func(r int) {
		var err error
		if got[r], err = bs[r].AllGather(ctx, []byte(fmt.Sprintf("rank%d", r))); err != nil {
			t.Errorf("allgather %d: %v", r, err)
		}
		if err := bs[r].Barrier(ctx); err != nil {
			t.Errorf("barrier %d: %v", r, err)
		}
		if mins[r], err = bs[r].AllReduceMin(ctx, []int64{int64(10 - r), int64(r * 3), 7}); err != nil {
			t.Errorf("min %d: %v", r, err)
		}
		if bcast[r], err = bs[r].Broadcast(ctx, 2, []byte(fmt.Sprintf("from%d", r))); err != nil {
			t.Errorf("bcast %d: %v", r, err)
		}
		next, prev := (r+1)%n, (r+n-1)%n
		if err := bs[r].Send(next, 9, []byte{byte(r)}); err != nil {
			t.Errorf("send %d: %v", r, err)
		}
		if recvd[r], err = bs[r].Recv(ctx, prev, 9); err != nil {
			t.Errorf("recv %d: %v", r, err)
		}
	})
	want := [][]byte{[]byte("rank0"), []byte("rank1"), []byte("rank2"), []byte("rank3"), []byte("rank4")}
	for r := 0; r < n; r++ {
		if d := cmp.Diff(want, got[r]); d != "" {
			t.Errorf("rank %d allgather (-want +got):\n%s", r, d)
		}
		if d := cmp.Diff([]int64{6, 0, 7}, mins[r]); d != "" {
			t.Errorf("rank %d min: %s", r, d)
		}
		if string(bcast[r]) != "from2" {
			t.Errorf("rank %d broadcast %q", r, bcast[r])
		}
		if len(recvd[r]) != 1 || int(recvd[r][0]) != (r+n-1)%n {
			t.Errorf("rank %d recv %v", r, recvd[r])
		}
	}
}

func TestInitTimeoutNamesMissingRanks(t *testing.T) {
	_, errs := startRanks(t, 4, 300*time.Millisecond, map[int]bool{1: true, 3: true})
	for _, r := range []int{0, 2} {
		var be *Error
		if !errors.As(errs[r], &be) || !cmp.Equal(be.Missing, []int{1, 3}) {
			t.Fatalf("rank %d: err %v, want missing [1 3]", r, errs[r])
		}
	}
}

func TestLostPeerIsReported(t *testing.T) {
	const n = 3
	bs, errs := startRanks(t, n, 5*time.Second, nil)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// Make sure every pair is connected, then rank 2 dies.
	each(n, func(r int) { bs[r].Barrier(ctx) })
	bs[2].Abort()
	start := time.Now()
	var e0 error
	each(2, func(r int) {
		_, err := bs[r].AllGather(ctx, []byte{1})
		if r == 0 {
			e0 = err
		}
	})
	var be *Error
	if !errors.As(e0, &be) || !cmp.Equal(be.Missing, []int{2}) || !be.Lost {
		t.Fatalf("rank 0 error %v, want lost rank 2", e0)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("loss detected only after %v", time.Since(start))
	}
	bs[0].Close()
	bs[1].Close()
}

func TestMismatchedID(t *testing.T) {
	id, err := NewLoopbackUniqueID(Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bad := id
	bad[30] ^= 0xff // another nonce, same root address
	_, err = Init(context.Background(), bad, 0, 2, Options{Timeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "mismatched unique id") {
		t.Fatalf("err = %v", err)
	}
	var junk UniqueID
	if _, err := Init(context.Background(), junk, 0, 1, Options{}); !errors.Is(err, ErrBadID) {
		t.Fatalf("junk id: %v", err)
	}
}

func TestUniqueIDRoundTrip(t *testing.T) {
	id, err := NewLoopbackUniqueID(Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ap, err := id.Addr()
	if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
		t.Fatalf("addr %v, %v", ap, err)
	}
	if len(id) != 128 {
		t.Fatal("id size")
	}
}

// TestCollectivesForgetTheirBoxes: the receive boxes of the collectives'
// one-message tags are dropped once read, so a communicator that agrees on
// something every request does not grow by a box per round.
func TestCollectivesForgetTheirBoxes(t *testing.T) {
	const n, rounds = 3, 200
	bs, errs := startRanks(t, n, 10*time.Second, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer each(n, func(r int) { bs[r].Close() })
	failed := make([]error, n)
	each(n, func(r int) {
		for i := 0; i < rounds; i++ {
			if _, err := bs[r].AllGather(context.Background(), []byte{byte(r), byte(i)}); err != nil {
				failed[r] = err
				return
			}
			if _, err := bs[r].Broadcast(context.Background(), i%n, []byte{byte(i)}); err != nil {
				failed[r] = err
				return
			}
			if _, err := bs[r].AllReduceMin(context.Background(), []int64{int64(r + i)}); err != nil {
				failed[r] = err
				return
			}
		}
	})
	for r, err := range failed {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r, b := range bs {
		b.mu.Lock()
		left := len(b.boxes)
		b.mu.Unlock()
		if left != 0 {
			t.Errorf("rank %d: %d receive boxes left after %d rounds of three collectives, want 0", r, left, rounds)
		}
	}
}

// TryRecv takes a message that has arrived and never waits for one that
// has not: rank 1 sends on tag 11, then 12; once rank 0 has received 12
// (one connection, in order), 11 is there.
func TestTryRecv(t *testing.T) {
	bs, errs := startRanks(t, 2, 10*time.Second, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer each(2, func(r int) { bs[r].Close() })
	if m, ok := bs[0].TryRecv(1, 11); ok {
		t.Fatalf("TryRecv before any send: %q", m)
	}
	if err := bs[1].Send(0, 11, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := bs[1].Send(0, 12, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if _, err := bs[0].Recv(context.Background(), 1, 12); err != nil {
		t.Fatal(err)
	}
	if m, ok := bs[0].TryRecv(1, 11); !ok || string(m) != "first" {
		t.Errorf("TryRecv = %q, %v; want the message", m, ok)
	}
	if m, ok := bs[0].TryRecv(1, 11); ok {
		t.Errorf("a second TryRecv returned %q", m)
	}
	if _, ok := bs[0].TryRecv(5, 11); ok {
		t.Error("TryRecv from a peer out of range")
	}
}
