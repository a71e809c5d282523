package ctxdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// TestDefaultContext walks the resolution order: THESEUS_SELECTION_CONTEXT
// (even when missing), then $HOME/.theseus/contexts/default when it is a
// directory, then the installed context beside the program, then the
// embedded default, materialised read-only and complete.
func TestDefault(t *testing.T) {
	defer env.SetLookupForTest(func(k string) (string, bool) {
		if k == "THESEUS_SELECTION_CONTEXT" {
			return "/ctx/x", true
		}
		return "", false
	})()
	if c, err := Default(); err != nil || c != (Choice{"/ctx/x", FromEnv}) || Dir() != "/ctx/x" {
		t.Fatalf("with THESEUS_SELECTION_CONTEXT: %v, %v", c, err)
	}
	env.SetLookupForTest(func(string) (string, bool) { return "", false })
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	c, err := Default()
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
	if c, err := Default(); err != nil || c != (Choice{mine, FromHome}) {
		t.Errorf("with a home context: %v, %v", c, err)
	}
	if got, want := installedFor("/opt/theseus/lib/libtheseus_nccl.so"), "/opt/theseus/share/theseus/contexts/default"; got != want {
		t.Errorf("installed context of the library: %s, want %s", got, want)
	}
	if exe, _ := os.Executable(); selfObject() != exe {
		t.Errorf("selfObject() = %s, want the test binary %s", selfObject(), exe)
	}
}
