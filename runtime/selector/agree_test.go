package selector

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
)

func TestInProcessGroupMin(t *testing.T) {
	g := NewInProcessGroup(3)
	in := [][]int64{{5, 1, 9}, {3, 4, 9}, {7, 2, -1}}
	out := make([][]int64, 3)
	var wg sync.WaitGroup
	for r := range g {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var err error
			if out[r], err = g[r].AllReduceMin(context.Background(), in[r]); err != nil {
				t.Error(err)
			}
		}(r)
	}
	wg.Wait()
	for r := range out {
		if d := cmp.Diff([]int64{3, 1, -1}, out[r]); d != "" {
			t.Fatalf("rank %d (-want +got):\n%s", r, d)
		}
	}
}

func TestInProcessGroupTimeoutIsAnError(t *testing.T) {
	g := NewInProcessGroup(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g[0].AllReduceMin(ctx, []int64{1}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lone rank: %v, want a deadline error", err)
	}
	if _, err := g[1].AllReduceMin(context.Background(), []int64{1}); !errors.Is(err, ErrGroupBroken) {
		t.Fatalf("after a timeout: %v, want ErrGroupBroken", err)
	}
}

func TestInProcessGroupLengthMismatch(t *testing.T) {
	g := NewInProcessGroup(2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, v := range [][]int64{{1}, {1, 2}} {
		wg.Add(1)
		go func(r int, v []int64) {
			defer wg.Done()
			_, errs[r] = g[r].AllReduceMin(context.Background(), v)
		}(r, v)
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "agreement vectors of") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// A rank whose peers never arrive gets an error from Select, after the
// configured timeout, instead of hanging.
func TestSelectPeerMissing(t *testing.T) {
	h := newHarness(t)
	g := NewInProcessGroup(2)
	s, err := New(Options{Dir: h.dir, Agreement: g[0], Timeout: 30 * time.Millisecond, Logger: h.log, Loader: h.loader})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Select(context.Background(), req(ir.AllReduce, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Select = %v, want a deadline error", err)
	}
}

func TestOptionsFromEnvironment(t *testing.T) {
	defer env.SetLookupForTest(func(k string) (string, bool) {
		switch k {
		case "THESEUS_CONTEXT_CHECK_PERIOD":
			return "7", true
		case "MSCCLPP_VECTOR_ATTRIBUTE_MAX_LENGTH":
			return "16", true
		}
		return "", false
	})()
	s, err := New(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.opt.CheckPeriod != 7 || s.opt.VectorMaxLen != 16 || s.opt.Timeout != time.Minute {
		t.Fatalf("options %+v", s.opt)
	}
	env.SetLookupForTest(func(k string) (string, bool) {
		if k == "THESEUS_CONTEXT_CHECK_PERIOD" {
			return "0x", true
		}
		return "", false
	})
	if _, err := New(Options{Dir: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "THESEUS_CONTEXT_CHECK_PERIOD") {
		t.Fatalf("bad period: %v", err)
	}
}
