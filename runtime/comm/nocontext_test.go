//go:build linux

package comm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// TestNoScheduleNamesContext: when no schedule serves a request because the
// selection context is missing or empty, the error names the directory and
// says which. It used to say only "no schedule serves the request". With no
// context configured, THESEUS_SELECTION_CONTEXT unset and no home context,
// the communicator reads the embedded default (runtime/ctxdir) and serves
// the request.
func TestNoScheduleNamesContext(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("THESEUS_SELECTION_CONTEXT", "")
	t.Setenv("MSCCLPP_SELECTION_CONTEXT", "")
	env.Reset()
	t.Cleanup(env.Reset)
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "attribute_manifest.jsonl"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"", nil},
		{filepath.Join(home, "nope"), []string{"selection context " + filepath.Join(home, "nope") + " is missing: no schedule serves the request"}},
		{empty, []string{"selection context " + empty + " is empty: it has no schedule entries (schedule_manifest.jsonl): no schedule serves the request"}},
	} {
		id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Init(context.Background(), id, 0, 1, Config{Backend: host.Backend(), ContextDir: tc.dir, Timeout: 10 * time.Second, InitialScratch: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Backend().Alloc(1 << 12)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Collective(context.Background(), &Call{Coll: ir.AllReduce, Send: p, Recv: p + 2048, Count: 16, DataType: ir.Float32})
		if tc.dir == "" {
			if err != nil || !strings.Contains(filepath.Base(c.ContextDir()), "default-") {
				t.Errorf("no context configured: %v (context %s), want the embedded default", err, c.ContextDir())
			}
			c.Destroy()
			continue
		}
		if !errors.Is(err, ErrNoSchedule) || CodeOf(err) != InvalidUsage {
			t.Errorf("context %q: %v, want InvalidUsage wrapping ErrNoSchedule", tc.dir, err)
		}
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("context %q: %v\nwant it to contain %q", tc.dir, err, w)
			}
		}
		c.Destroy()
	}
}
