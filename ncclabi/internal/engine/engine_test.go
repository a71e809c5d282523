package engine

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
)

func hostEngine(t testing.TB) *Engine {
	t.Helper()
	ctxDir, err := filepath.Abs("../../../examples/contexts/default")
	if err != nil {
		t.Fatal(err)
	}
	restore := env.SetLookupForTest(func(k string) (string, bool) {
		switch k {
		case "THESEUS_SELECTION_CONTEXT":
			return ctxDir, true
		case "THESEUS_TIMEOUT":
			return "20000", true
		}
		return "", false
	})
	t.Cleanup(restore)
	e, err := Open("host")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// initRanks creates n ranks of one communicator as goroutines.
func initRanks(t testing.TB, e *Engine, id abi.UniqueID, n int) []abi.EngineComm {
	t.Helper()
	cs := make([]abi.EngineComm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = e.Init(context.Background(), abi.InitParams{ID: id, Rank: r, NRanks: n})
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return cs
}

func TestHostEngine(t *testing.T) {
	e := hostEngine(t)
	if d, err := e.CurrentDevice(); d != 0 || err != nil {
		t.Fatalf("host current device %d, %v", d, err)
	}
	id, err := e.NewUniqueID(true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, side := split(id); !side {
		t.Fatal("id made with side has no second root")
	}
	cs := initRanks(t, e, id, 2)
	// The side allgather works once per communicator.
	got := make([][][]byte, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var gerr error
			got[r], gerr = cs[r].AllGather(context.Background(), []byte{byte(10 + r)})
			if gerr != nil {
				t.Error(gerr)
			}
		}()
	}
	wg.Wait()
	if diff := cmp.Diff([][]byte{{10}, {11}}, got[0]); diff != "" {
		t.Fatalf("side allgather (-want +got):\n%s", diff)
	}
	if _, err := cs[0].AllGather(context.Background(), nil); !errors.Is(err, abi.ErrUnsupported) {
		t.Fatalf("second side allgather: %v", err)
	}
	// An allreduce of float32 through the engine, on backend memory
	// (ncclMemAlloc's), values checked.
	const n = 257
	outs := make([][]float32, 2)
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err1 := e.MemAlloc(n * 4)
			d, err2 := e.MemAlloc(n * 4)
			if err1 != nil || err2 != nil {
				errs[r] = errors.Join(err1, err2)
				return
			}
			in := floats(t, s, n)
			for i := range in {
				in[i] = float32(r + i)
			}
			op := abi.Op{Coll: abi.CollAllReduce, Send: s, Recv: d, Count: n, DataType: 7, RedOp: 0, Root: -1, Stream: 0}
			var served abi.Served
			if served, errs[r] = cs[r].Run(op); errs[r] == nil {
				errs[r] = cs[r].StreamSync(0)
			}
			if served.String() == "" {
				t.Errorf("rank %d: Served not set", r)
			}
			outs[r] = floats(t, d, n)
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		for i, v := range outs[r] {
			if v != float32(2*i+1) {
				t.Errorf("rank %d [%d] = %v (%#x); first values %v", r, i, v, math.Float32bits(v), outs[r][:6])
				break
			}
		}
	}
	for _, c := range cs {
		if err := c.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

func floats(t *testing.T, p uintptr, n int) []float32 {
	b, err := host.Bytes(device.Ptr(p), int64(4*n))
	if err != nil {
		t.Fatal(err)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

func TestClassify(t *testing.T) {
	e := hostEngine(t)
	for _, c := range []struct {
		err  error
		want abi.Result
	}{
		{bootstrap.ErrBadID, abi.InvalidArgument},
		{errors.New("bootstrap: rank 1: root refused: mismatched unique id: x"), abi.InvalidArgument},
		{errors.New("bootstrap: rank 1: root refused: rank 1 registered twice"), abi.InvalidUsage},
		{abi.ErrUnsupported, abi.InvalidUsage},
		{context.Canceled, abi.InvalidUsage},
		{errors.New("other"), abi.InternalError},
	} {
		if got := e.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	var bad abi.UniqueID
	_, err := e.Init(context.Background(), abi.InitParams{ID: bad, Rank: 0, NRanks: 1})
	if err == nil || e.Classify(err) != abi.InvalidArgument {
		t.Fatalf("a zero id: %v (%v)", err, e.Classify(err))
	}
}
