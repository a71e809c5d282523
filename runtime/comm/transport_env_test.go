//go:build linux

package comm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// TestBadTransportEnvAtInit: a malformed variable of the transport across
// nodes (or THESEUS_P2P_HELP) is an invalid argument of init, naming the
// variable, on a single-node job too (it used to surface, as an internal error, only at
// the first launch across nodes). Valid values initialise.
func TestBadTransportEnvAtInit(t *testing.T) {
	for _, tc := range []struct {
		key, val, want string
	}{
		{"THESEUS_PROXY_LANES", "abc", "THESEUS_PROXY_LANES=abc: want 1 to 16"},
		{"THESEUS_PROXY_LANES", "0", "THESEUS_PROXY_LANES=0: want 1 to 16"},
		{"THESEUS_PROXY_LANES", "17", "THESEUS_PROXY_LANES=17: want 1 to 16"},
		{"THESEUS_PROXY_SPIN", "-5", "THESEUS_PROXY_SPIN=-5"},
		{"THESEUS_PROXY_STAGE_BYTES", "oops", "THESEUS_PROXY_STAGE_BYTES"},
		{"THESEUS_PROXY_STAGE_BATCH", "2", "THESEUS_PROXY_STAGE_BATCH"},
		{"THESEUS_P2P_HELP", "garbage", "THESEUS_P2P_HELP"},
		{"THESEUS_PROXY_LANES", "4", ""},
		{"THESEUS_P2P_HELP", "0", ""},
	} {
		t.Run(tc.key+"="+tc.val, func(t *testing.T) {
			t.Setenv(tc.key, tc.val)
			env.Reset()
			t.Cleanup(env.Reset)
			id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c, err := Init(context.Background(), id, 0, 1, Config{Backend: host.Backend(), Timeout: 10 * time.Second, InitialScratch: 1 << 20})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("valid value: %v", err)
				}
				c.Destroy()
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Code != InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v (%T), want an InvalidArgument naming %q", err, err, tc.want)
			}
		})
	}
}
