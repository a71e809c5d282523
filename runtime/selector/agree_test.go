package selector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/examples/contexts"
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

// TestDefaultContext walks the resolution order: THESEUS_SELECTION_CONTEXT
// (even when missing), then $HOME/.theseus/contexts/default when it is a
// directory, then the installed context beside the program, then the
// embedded default, materialised read-only and complete.
func TestDefaultContext(t *testing.T) {
	defer env.SetLookupForTest(func(k string) (string, bool) {
		if k == "THESEUS_SELECTION_CONTEXT" {
			return "/ctx/x", true
		}
		return "", false
	})()
	if c, err := DefaultContext(); err != nil || c != (ContextChoice{"/ctx/x", FromEnv}) || DefaultContextDir() != "/ctx/x" {
		t.Fatalf("with THESEUS_SELECTION_CONTEXT: %v, %v", c, err)
	}
	env.SetLookupForTest(func(string) (string, bool) { return "", false })
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	c, err := DefaultContext()
	if err != nil || c.Source != FromEmbedded {
		t.Fatalf("empty home: %v, %v", c, err)
	}
	if !strings.HasPrefix(filepath.Base(c.Dir), "default-") || c.String() != c.Dir+" (embedded default)" {
		t.Errorf("embedded default at %s (%s)", c.Dir, c)
	}
	for _, name := range contexts.Files() {
		st, err := os.Stat(filepath.Join(c.Dir, name))
		if err != nil || st.Mode().Perm() != 0o444 {
			t.Errorf("%s: %v, mode %v", name, err, st.Mode())
		}
	}
	mine := filepath.Join(home, ".theseus", "contexts", "default")
	if err := os.MkdirAll(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if c, err := DefaultContext(); err != nil || c != (ContextChoice{mine, FromHome}) {
		t.Errorf("with a home context: %v, %v", c, err)
	}
	if got, want := installedFor("/opt/theseus/lib/libtheseus_nccl.so"), "/opt/theseus/share/theseus/contexts/default"; got != want {
		t.Errorf("installed context of the library: %s, want %s", got, want)
	}
	if exe, _ := os.Executable(); selfObject() != exe {
		t.Errorf("selfObject() = %s, want the test binary %s", selfObject(), exe)
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
