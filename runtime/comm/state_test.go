//go:build linux

package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
)

// TestUseAfterDestroy: calls on a communicator that is no longer live fail
// with ErrState and NCCL 2.25's codes, the same as the C ABI: InvalidUsage
// after Finalize (still a communicator), InvalidArgument after Destroy or
// Abort (no longer a valid communicator, as NCCL reports a NULL or
// corrupted comm). The Go API used to return InvalidUsage for all three,
// while the C library returned ncclInvalidArgument after destroy.
func TestUseAfterDestroy(t *testing.T) {
	comms := localComms(t, 3, 10*time.Second, "")
	call := func(c *Comm) error {
		p, err := c.Backend().Alloc(4096)
		if err != nil {
			return err
		}
		return c.Collective(context.Background(), &Call{Coll: ir.AllReduce, Send: p, Recv: p + 2048, Count: 8, DataType: ir.Float32})
	}
	for r, err := range onEach(3, func(r int) error { return call(comms[r]) }) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	fin, des, abo := comms[0], comms[1], comms[2]
	if err := fin.Finalize(); err != nil {
		t.Fatal(err)
	}
	des.Destroy()
	abo.Abort()
	for _, tc := range []struct {
		name string
		c    *Comm
		code Code
		msg  string
	}{
		{"finalized", fin, InvalidUsage, "communicator is finalized"},
		{"destroyed", des, InvalidArgument, "communicator used after Destroy"},
		{"aborted", abo, InvalidArgument, "communicator used after Abort"},
	} {
		for op, err := range map[string]error{
			"collective": call(tc.c),
			"split":      func() error { _, err := tc.c.Split(context.Background(), 0, 0); return err }(),
		} {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrState) || e.Code != tc.code || e.Msg != tc.msg {
				t.Errorf("%s after %s: %v, want %v %q wrapping ErrState", op, tc.name, err, tc.code, tc.msg)
			}
		}
	}
	for _, c := range []*Comm{des, abo} {
		if err := c.Finalize(); CodeOf(err) != InvalidArgument || !errors.Is(err, ErrState) {
			t.Errorf("finalize after destroy/abort: %v", err)
		}
	}
}
