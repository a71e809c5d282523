//go:build linux

package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
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
		{"THESEUS_PROXY_LANES", "-1", "THESEUS_PROXY_LANES=-1: want 1 to 16"},
		{"THESEUS_PROXY_LANES", "0", ""}, // the default: 4 / the ranks per node
		{"THESEUS_PROXY_LANES", "17", "THESEUS_PROXY_LANES=17: want 1 to 16"},
		{"THESEUS_PROXY_SPIN", "-5", "THESEUS_PROXY_SPIN=-5"},
		{"THESEUS_PROXY_STAGE_BYTES", "oops", "THESEUS_PROXY_STAGE_BYTES"},
		{"THESEUS_PROXY_STAGE_BATCH", "2", "THESEUS_PROXY_STAGE_BATCH"},
		{"THESEUS_P2P_HELP", "garbage", "THESEUS_P2P_HELP"},
		{"THESEUS_PROXY_LANES", "4", ""},
		{"THESEUS_P2P_HELP", "0", ""},
		{"THESEUS_LL_FENCE", "sometimes", "THESEUS_LL_FENCE"},
		{"THESEUS_LL_FENCE", "1", ""},
		{"THESEUS_PROXY_STAGING", "gpu", "THESEUS_PROXY_STAGING"},
		{"THESEUS_PROXY_STAGING", "proxy", ""},
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

// TestLanesMismatchAtInit: two ranks on two nodes (their own host ids) of
// which rank 1 asks for 2 proxy lanes (Config.ProxyLanes, what
// THESEUS_PROXY_LANES fills): init fails on both with InvalidUsage naming
// both ranks, both values and the variable, before anything connects; a
// lane count outside 1 to 16 is an invalid argument.
func TestLanesMismatchAtInit(t *testing.T) {
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := ranks.Each(2, func(r int) error {
		c, err := Init(context.Background(), id, r, 2, Config{Backend: host.Backend(), Timeout: 60 * time.Second,
			InitialScratch: 1 << 20, HostID: []string{"a", "b"}[r], ProxyLanes: 1 + r})
		if err == nil {
			c.Destroy()
		}
		return err
	})
	const want = `rank 0 (node 0, host "a") uses THESEUS_PROXY_LANES=1, rank 1 (node 1, host "b") uses 2: every rank of a job across nodes must use the same`
	for r, err := range errs {
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != InvalidUsage || !errors.Is(err, ErrLayout) || ce.Rank != r || ce.Msg != want || !cmp.Equal(ce.Peers, []int{0, 1}) {
			t.Errorf("rank %d: %v, want InvalidUsage naming ranks 0 and 1: %s", r, err, want)
		}
	}
	_, err = Init(context.Background(), id, 0, 1, Config{Backend: host.Backend(), ProxyLanes: 17})
	if ce := (*Error)(nil); !errors.As(err, &ce) || ce.Code != InvalidArgument || !strings.Contains(err.Error(), "17 proxy lanes: want 1 to 16") {
		t.Errorf("17 lanes: %v, want InvalidArgument", err)
	}
}

// TestBadNetworkVariableAtInit: on two nodes, a malformed variable that
// configures UCX (MSCCLPP_GID_INDEX) fails init on both ranks with
// InvalidArgument naming it, not the first call across nodes with an
// internal error (fresh user f25).
func TestBadNetworkVariableAtInit(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
	t.Setenv("MSCCLPP_GID_INDEX", "abc")
	env.Reset()
	t.Cleanup(env.Reset)
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := ranks.Each(2, func(r int) error {
		c, err := Init(context.Background(), id, r, 2, Config{Backend: host.Backend(), Timeout: 60 * time.Second,
			InitialScratch: 1 << 20, HostID: []string{"a", "b"}[r]})
		if err == nil {
			c.Destroy()
		}
		return err
	})
	for r, err := range errs {
		if CodeOf(err) != InvalidArgument || !strings.Contains(fmt.Sprint(err), "MSCCLPP_GID_INDEX") {
			t.Errorf("rank %d: %v, want InvalidArgument naming MSCCLPP_GID_INDEX", r, err)
		}
	}
}
