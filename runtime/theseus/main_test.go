//go:build linux

package theseus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain runs the package's tests without the THESEUS_* and MSCCLPP_*
// variables of the caller's environment: their expectations (scratch
// growths, timeouts, context checks) assume the documented defaults, and a
// test that needs a value sets it itself (t.Setenv). A rank process of the
// multi-process tests keeps the variables its parent gave it.
func TestMain(m *testing.M) {
	if os.Getenv(mpMode) != "" {
		os.Exit(m.Run())
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "THESEUS_") || strings.HasPrefix(k, "MSCCLPP_") {
			os.Unsetenv(k)
		}
	}
	// A home of its own: a communicator without a context reads the
	// built-in default (runtime/ctxdir), materialised under the home's
	// cache, not the user's (and never a ~/.theseus context of the user's).
	home, err := os.MkdirTemp("", "theseus-test-home-")
	if err != nil {
		os.Exit(3)
	}
	os.Setenv("HOME", home)
	os.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}
