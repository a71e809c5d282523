//go:build linux

package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// A repeat of the last valid call skips Validate; any call that differs in
// a field Validate reads is validated again: valid, invalid and valid calls
// in turn, each repeated, get exactly Validate's answer.
func TestRepeatedCallsValidated(t *testing.T) {
	const n = 2
	comms := localComms(t, n, 10*time.Second, "")
	ptrs := make([]device.Ptr, n)
	for r, c := range comms {
		p, err := c.Backend().Alloc(8192)
		if err != nil {
			t.Fatal(err)
		}
		ptrs[r] = p
	}
	type tc struct {
		name  string
		count int64
		recv  device.Ptr // offset of the receive buffer
		code  Code
	}
	cases := []tc{
		{"valid", 8, 2048, Success},
		{"overlapping", 1024, 2048, InvalidArgument},
		{"valid again", 8, 2048, Success},
		{"not congruent mod 16", 8, 2056, InvalidUsage},
		{"valid, other count", 16, 2048, Success},
		{"negative count", -1, 2048, InvalidArgument},
		// The receive buffer's 4 KiB run past the 8 KiB allocation
		// (fresh user f25: ncclInternalError from L3Setup before).
		{"past the allocation's end", 1024, 6144, InvalidArgument},
		{"valid at last", 8, 2048, Success},
	}
	for _, k := range cases {
		for rep := range 2 {
			errs := onEach(n, func(r int) error {
				c := comms[r]
				p := ptrs[r]
				call := &Call{Coll: ir.AllReduce, Send: p, Recv: p + k.recv, Count: k.count, DataType: ir.Float32}
				err := c.Collective(context.Background(), call)
				if err == nil {
					err = c.Stream().Synchronize()
				}
				return err
			})
			for r, err := range errs {
				if CodeOf(err) != k.code {
					t.Errorf("%s (call %d), rank %d: %v, want code %v", k.name, rep+1, r, err, k.code)
				}
				var e *Error
				if k.code != Success && !errors.As(err, &e) {
					t.Errorf("%s, rank %d: %T, want *Error", k.name, r, err)
				}
			}
		}
	}
}
