package publish

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"

	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// Writer appends entries to the context directories under Root: context c
// is Root/c. Files are only ever appended to, each line with one write;
// Sync fsyncs what was appended. A schedule file is written before the
// line that names it: to a temporary file in its directory, fsynced,
// renamed to its content-addressed name and the directory fsynced, so the
// runtime never finds a manifest line whose file is missing or partial.
//
// Sizes, when not nil, is the number of bytes of each file (by its path
// relative to Root, slash-separated) that the caller has recorded as
// applied: the daemon's checkpoint. A file longer than recorded holds what
// a crash interrupted after the write and before the record; Apply then
// rolls forward: it compares those bytes with what it would append and
// writes only the rest (none, or the remainder of a torn line), so after a
// restart nothing is lost, duplicated or reordered. Bytes that differ mean
// someone else wrote the file: an error, and nothing is written. A file
// shorter than recorded is an error too. With Sizes nil (theseus-context
// --local) lines go at the current end, which must be a complete line.
//
// A Writer is not safe for concurrent use.
type Writer struct {
	Root  string
	Sizes map[string]int64
	open  map[string]*os.File
	dirty map[string]bool
}

var objectPath = regexp.MustCompile(`^` + ObjectDir + `/[0-9a-f]{64}\.(json|xml|tsb|tir)$`)

// Check rejects an entry no daemon writes: checked again by every
// materialiser before it applies a log entry (the log may hold what any
// NATS client with access wrote), the same way on every node.
func (e *Entry) Check() error {
	switch e.Kind {
	case api.KindAttr, api.KindSched:
	case api.KindValue:
		if !policy.ValidName(e.Attr) {
			return fmt.Errorf("value entry for the invalid attribute name %q", e.Attr)
		}
	default:
		return fmt.Errorf("unknown entry kind %q", e.Kind)
	}
	if e.Kind == api.KindAttr && e.Attr != "" && !policy.ValidName(e.Attr) {
		return fmt.Errorf("attribute entry names the invalid attribute %q", e.Attr)
	}
	if len(e.Line) > manifest.MaxLineBytes || bytes.ContainsAny([]byte(e.Line), "\n\r") {
		return fmt.Errorf("the line is over %d bytes or holds a line break", manifest.MaxLineBytes)
	}
	if e.Object != nil && (e.Kind != api.KindSched || !objectPath.MatchString(e.Object.Path) || e.Object.Path[len(ObjectDir)+1:len(ObjectDir)+65] != e.Object.Name) {
		return fmt.Errorf("schedule file %q is not schedules/<sha256>.<ext> of object %q", e.Object.Path, e.Object.Name)
	}
	return nil
}

// File is the file of context dir that e appends to, relative to it.
func (e *Entry) File() string {
	switch e.Kind {
	case api.KindAttr:
		return manifest.AttributeManifest
	case api.KindSched:
		return manifest.ScheduleManifest
	}
	return e.Attr + manifest.LogSuffix
}

// Apply writes e to context ctx: its schedule file first (the bytes come
// from data, called only when the file is not there yet), an exo
// declaration's empty log, then the line.
func (w *Writer) Apply(ctx string, e *Entry, data func() ([]byte, error)) error {
	if err := e.Check(); err != nil {
		return err
	}
	dir := filepath.Join(w.Root, ctx)
	if err := mkdirDurable(dir); err != nil {
		return err
	}
	if e.Object != nil {
		if err := writeObject(dir, e.Object, data); err != nil {
			return err
		}
	}
	if e.Kind == api.KindAttr && e.Attr != "" {
		f, err := os.OpenFile(filepath.Join(dir, e.Attr+manifest.LogSuffix), os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	return w.appendLine(path.Join(ctx, e.File()), []byte(e.Line+"\n"))
}

func (w *Writer) file(rel string) (*os.File, error) {
	if f := w.open[rel]; f != nil {
		return f, nil
	}
	f, err := os.OpenFile(filepath.Join(w.Root, filepath.FromSlash(rel)), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if w.open == nil {
		w.open, w.dirty = map[string]*os.File{}, map[string]bool{}
	}
	w.open[rel] = f
	return f, nil
}

func (w *Writer) appendLine(rel string, data []byte) error {
	f, err := w.file(rel)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if w.Sizes == nil {
		if size > 0 {
			last := make([]byte, 1)
			if _, err := f.ReadAt(last, size-1); err != nil {
				return err
			}
			if last[0] != '\n' {
				return fmt.Errorf("%s %w: complete or remove it before publishing", f.Name(), ErrTornLine)
			}
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		w.dirty[rel] = true
		return nil
	}
	rec := w.Sizes[rel]
	full := int64(len(data))
	switch {
	case size < rec:
		return fmt.Errorf("%s is %d bytes, shorter than the %d this daemon applied: it was truncated or replaced outside the daemon", f.Name(), size, rec)
	case size > rec:
		n := min(size-rec, full)
		have := make([]byte, n)
		if _, err := f.ReadAt(have, rec); err != nil && err != io.EOF {
			return err
		}
		if !bytes.Equal(have, data[:n]) {
			return fmt.Errorf("%s holds bytes at offset %d that this daemon did not write: another writer appends to it (a context is written by one daemon only)", f.Name(), rec)
		}
		data = data[n:] // rolled forward over what a crash left
	}
	if len(data) > 0 {
		if _, err := f.Write(data); err != nil {
			return err
		}
	}
	w.Sizes[rel] = rec + full
	w.dirty[rel] = true
	return nil
}

// Dirty returns the files (as Sizes names them) appended to since the
// last Sync.
func (w *Writer) Dirty() map[string]bool {
	out := make(map[string]bool, len(w.dirty))
	for rel := range w.dirty {
		out[rel] = true
	}
	return out
}

// Sync fsyncs every file appended to since the last Sync.
func (w *Writer) Sync() error {
	for rel := range w.dirty {
		if err := w.open[rel].Sync(); err != nil {
			return err
		}
		delete(w.dirty, rel)
	}
	return nil
}

// Close closes the files (without Sync).
func (w *Writer) Close() {
	for rel, f := range w.open {
		f.Close()
		delete(w.open, rel)
	}
}

// mkdirDurable creates dir (and its parents) with mode 0755 and fsyncs the
// parent of every directory it creates, so that the directory survives a
// crash with the files written into it.
func mkdirDurable(dir string) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirDurable(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// writeObject puts schedule file o into context directory dir, unless a
// file with its hash is there already.
func writeObject(dir string, o *Object, data func() ([]byte, error)) error {
	dst := filepath.Join(dir, filepath.FromSlash(o.Path))
	if have, err := os.ReadFile(dst); err == nil {
		if sum := sha256.Sum256(have); hex.EncodeToString(sum[:]) == o.Name {
			return nil
		}
		// Not its content (a rename is atomic, so no crash leaves this):
		// restore it below.
	}
	b, err := data()
	if err != nil {
		return fmt.Errorf("schedule file %s: %w", o.Name, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != o.Name || int64(len(b)) != o.Size {
		return fmt.Errorf("schedule file %s: the stored object has another hash or size (%d bytes)", o.Name, len(b))
	}
	if err := mkdirDurable(filepath.Dir(dst)); err != nil {
		return err
	}
	return WriteFileDurable(dst, b, 0o644)
}

// WriteFileDurable replaces path with data, durably and atomically: a
// temporary file in path's directory, given mode, fsynced, renamed over
// path, the directory fsynced. A reader sees the old file or the whole new
// one; after a crash, one of them is there.
func WriteFileDurable(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}
