//go:build linux

package theseus

import (
	"os"
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
	os.Exit(m.Run())
}
