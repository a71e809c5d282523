//go:build unix

package contexts

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestReadOnlyDirTrust: the read-only copy of the default context is used
// only where nobody but this user (or root) can have written it. A copy
// under a world-writable directory, or one that another user owns, was
// used as long as its files matched (t1 finding M6: a predictable name
// under /tmp, which the runtime then tails).
func TestReadOnlyDirTrust(t *testing.T) {
	// A fresh, private parent: written and used, twice.
	good := filepath.Join(t.TempDir(), "contexts")
	d, err := ReadOnlyDir(good)
	if err != nil {
		t.Fatal(err)
	}
	if d2, err := ReadOnlyDir(good); err != nil || d2 != d {
		t.Fatalf("second call: %q, %v", d2, err)
	}

	// A parent that anyone may write (not sticky): refused before writing.
	open := filepath.Join(t.TempDir(), "theseus-x")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOnlyDir(filepath.Join(open, "contexts")); !errors.Is(err, ErrUntrusted) {
		t.Errorf("under a 0777 directory: %v, want ErrUntrusted", err)
	}

	// The copy's directory pre-created by someone else with the right
	// files but mode 0777.
	parent := filepath.Join(t.TempDir(), "contexts")
	planted := filepath.Join(parent, "default-"+Hash()[:12])
	if err := os.MkdirAll(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(planted); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(planted, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOnlyDir(parent); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a 0777 copy: %v, want ErrUntrusted", err)
	}
	// A file of the copy writable by others.
	if err := os.Chmod(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(planted, Files()[0]), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOnlyDir(parent); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a copy with a 0666 file: %v, want ErrUntrusted", err)
	}
	if err := os.Chmod(filepath.Join(planted, Files()[0]), 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOnlyDir(parent); err != nil {
		t.Errorf("the same copy made private: %v", err)
	}

	// Owned by another user (needs root to give it away).
	if os.Getuid() != 0 {
		t.Log("not root: the other-owner case is not checked")
		return
	}
	if err := os.Chown(planted, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadOnlyDir(parent); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a copy owned by uid 65534: %v, want ErrUntrusted", err)
	}
}
