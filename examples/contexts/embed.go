// Package contexts embeds Theseus's default selection context, the files of
// examples/contexts/default, so that tools such as theseus-bench work on a
// fresh machine with no THESEUS_SELECTION_CONTEXT: they write the embedded
// files into a directory (Materialize, TempDir) and point the selector at it.
//
// The runtime's default context, when no THESEUS_SELECTION_CONTEXT, home
// context or installed context exists, is this one (ReadOnlyDir,
// runtime/selector.DefaultContext).
//
// The default context's schedule_manifest.jsonl names built-in generators
// (compiler/gen) instead of files, so it serves every collective at every
// nranks (1 to 1024 and beyond) and node shape, with policies that read the
// attributes declared in attribute_manifest.jsonl, and empty value logs of
// its two exogenous attributes: slow_rank (int, default -1: no rank is slow) and ll_max_bytes
// (int, default 262144: the largest message size in bytes for which the LL
// schedules are preferred over the Simple ones). docs/selection-context.md
// specifies the files; docs/theseus-bench.md describes the policies. The
// files are generated: `go test ./examples/contexts -update` rebuilds them.
package contexts

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

//go:embed default
var embedded embed.FS

// Root is the directory name of the default context inside the module
// (examples/contexts/Root).
const Root = "default"

// SlowRankLog is the value log of the exogenous attribute slow_rank,
// relative to the context directory. Appending {"value":R} to it marks rank R
// slow (-1: none), docs/selection-context.md §6.
const SlowRankLog = "slow_rank.jsonl"

// LLMaxBytesLog is the value log of the exogenous attribute ll_max_bytes,
// relative to the context directory. Appending {"value":B} to it makes the
// LL schedules of allreduce, allgather, reducescatter and alltoall preferred
// for messages of at most B bytes (request.messagesize) and the Simple ones
// above, on every rank from the same epoch on (docs/selection-context.md §6,
// §7). The default is 262144 (the crossover measured on one H200,
// docs/crossovers.md); LL schedules never serve more than 4 MiB, so a
// larger B leaves the messages above 4 MiB on Simple.
const LLMaxBytesLog = "ll_max_bytes.jsonl"

// Default returns the default context as a file system whose root is the
// context directory (attribute_manifest.jsonl, schedule_manifest.jsonl,
// slow_rank.jsonl, ll_max_bytes.jsonl, schedules/*.tsb).
func Default() fs.FS {
	sub, err := fs.Sub(embedded, Root)
	if err != nil {
		panic(err) // unreachable: Root is a valid, embedded path
	}
	return sub
}

// Files lists the default context's file names (slash-separated, relative to
// the context directory), sorted.
func Files() []string {
	var names []string
	_ = fs.WalkDir(Default(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, p)
		}
		return nil
	})
	sort.Strings(names)
	return names
}

// Hash returns the hexadecimal SHA-256 over the default context's file names
// and contents: it changes whenever the embedded context does.
func Hash() string {
	h := sha256.New()
	fsys := Default()
	for _, name := range Files() {
		data, _ := fs.ReadFile(fsys, name)
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ErrExists is wrapped by Materialize when dir already holds a file of the
// context with different contents.
var ErrExists = errors.New("contexts: a different file already exists")

// ErrUntrusted is wrapped by ReadOnlyDir when the directory it would use
// is owned by, or writable by, someone other than this user (or root).
var ErrUntrusted = errors.New("contexts: not the user's own directory")

// Materialize writes the default context into dir, creating dir and its
// subdirectories as needed (mode 0755, files 0644). A file that already
// exists with the same contents is kept; one with different contents is an
// error wrapping ErrExists (a context is append-only while in use, so it is
// never overwritten). Errors: those of the file system.
func Materialize(dir string) error {
	fsys := Default()
	for _, name := range Files() {
		data, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if old, err := os.ReadFile(dst); err == nil {
			if string(old) != string(data) {
				return fmt.Errorf("%w: %s", ErrExists, dst)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := writeFile(dst, data); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes data to name through a temporary file and a rename, so a
// reader never sees a partial file.
func writeFile(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+path.Base(filepath.ToSlash(name))+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// ReadOnlyDir returns the default context materialised, read-only (files
// 0444), in a directory of its own under parent, named after its Hash
// ("default-" and its first 12 hexadecimal digits), creating parent and the
// directory on first use. The files are written to a temporary directory
// beside it, which is then renamed into place, so a process that finds the
// directory finds it complete; several processes may call it at once. A
// directory of that name whose files differ from the embedded ones
// (someone changed them) is an error wrapping ErrExists; one that another
// user owns or could change (it, its files or a directory above it owned
// by someone other than this user or root, or writable by group or others
// without the sticky bit, as ssh checks) is an error wrapping
// ErrUntrusted. Errors: those of the file system.
func ReadOnlyDir(parent string) (string, error) {
	dir := filepath.Join(parent, "default-"+Hash()[:12])
	if _, err := os.Lstat(dir); err == nil {
		if err := trusted(dir); err != nil {
			return "", err
		}
		return dir, same(dir)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	// parent and what is above it first: the copy written below must not
	// land where someone else can replace it.
	if err := trustedDir(parent); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(parent, ".default-")
	if err != nil {
		return "", err
	}
	if err := Materialize(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	for _, name := range Files() {
		if err := os.Chmod(filepath.Join(tmp, filepath.FromSlash(name)), 0o444); err != nil {
			os.RemoveAll(tmp)
			return "", err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Stat(dir); serr != nil { // not another process's copy: a real failure
			return "", err
		}
	}
	if err := trusted(dir); err != nil {
		return "", err
	}
	return dir, same(dir)
}

// same checks that dir holds exactly the embedded files' contents (extra
// files are not looked for).
func same(dir string) error {
	fsys := Default()
	for _, name := range Files() {
		want, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		if string(got) != string(want) {
			return fmt.Errorf("%w: %s", ErrExists, filepath.Join(dir, filepath.FromSlash(name)))
		}
	}
	return nil
}

// TempDir materialises the default context into a new private directory
// under os.TempDir() (or parent, when not empty) and returns it with a
// function that removes it. Each call gets its own copy, which the caller may
// append to (for example SlowRankLog or LLMaxBytesLog) without affecting
// anyone else.
func TempDir(parent string) (dir string, remove func() error, err error) {
	dir, err = os.MkdirTemp(parent, "theseus-context-")
	if err != nil {
		return "", nil, err
	}
	remove = func() error { return os.RemoveAll(dir) }
	if err := Materialize(dir); err != nil {
		remove()
		return "", nil, err
	}
	return dir, remove, nil
}
