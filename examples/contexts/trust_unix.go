//go:build unix

package contexts

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// trusted checks, as ssh checks a user's files, that nobody but this user
// (or root) can have changed dir or can still change it: dir, its files
// and every directory above it are owned by this user or root, and none is
// writable by group or others, except a directory with the sticky bit
// (as /tmp is), where others cannot rename or remove what this user owns.
// A copy of the default context under a shared temporary directory that
// another user created first (a predictable name there) is refused: the
// runtime tails the context's files, so whoever can write them steers the
// job. Errors wrap ErrUntrusted.
func trusted(dir string) error {
	for _, name := range Files() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrUntrusted, p)
		}
		if err := own(p, st, false); err != nil {
			return err
		}
	}
	return trustedDir(dir)
}

// trustedDir checks directory p (not a symbolic link, not sticky) and
// every directory above it (the sticky bit allowed), by trusted's rule.
func trustedDir(p string) error {
	st, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUntrusted, p)
	}
	if err := own(p, st, false); err != nil {
		return err
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := own(d, st, true); err != nil {
			return err
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// own checks that p (whose information is st) is this user's or root's
// and not writable by group or others (unless sticky, when allowed).
func own(p string, st os.FileInfo, allowSticky bool) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := uint32(os.Getuid()); sys.Uid != uid && sys.Uid != 0 {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this user (uid %d) or root", ErrUntrusted, p, sys.Uid, uid)
	}
	if st.Mode().Perm()&0o022 != 0 && !(allowSticky && st.Mode()&os.ModeSticky != 0) {
		return fmt.Errorf("%w: %s is writable by group or others (mode %04o)", ErrUntrusted, p, st.Mode().Perm())
	}
	return nil
}
