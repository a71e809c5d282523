package manifest

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
)

// MaxLineBytes bounds one line. A longer line is delivered truncated with
// Line.TooLong set, and its remaining bytes are skipped up to its newline.
const MaxLineBytes = 1 << 20

// Line is one complete line of a tailed file.
type Line struct {
	Index   int    // 0-based: the entry's position in the file
	Text    []byte // without the newline (and without a trailing \r); valid only during the callback
	TooLong bool
}

// Tail reads an append-only NDJSON file incrementally. Each Read returns
// the lines completed since the previous Read; a torn last line (no newline
// yet) is kept back until it is complete. The file may not exist yet: Read
// then returns nothing, and tries again next time. Tail keeps the file open
// once found (the context is append-only: a file replaced by a new one is
// not followed).
//
// A Tail is not safe for concurrent use.
type Tail struct {
	Path    string
	f       *os.File
	buf     []byte
	partial []byte
	skip    bool // dropping the rest of an over-long line
	lines   int
}

// NewTail returns a Tail of path; nothing is opened until Read.
func NewTail(path string) *Tail { return &Tail{Path: path} }

// Lines is the number of complete lines read so far.
func (t *Tail) Lines() int { return t.lines }

// Read calls fn for every line completed since the last call, in order. It
// returns an error only for I/O failures other than the file not existing.
// When nothing was appended it allocates nothing.
func (t *Tail) Read(fn func(Line)) error {
	if t.f == nil {
		f, err := os.Open(t.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		t.f = f
		t.buf = make([]byte, 64<<10)
	}
	for {
		n, err := t.f.Read(t.buf)
		if n > 0 {
			t.consume(t.buf[:n], fn)
		}
		if err == io.EOF || n == 0 && err == nil {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (t *Tail) consume(b []byte, fn func(Line)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			t.keep(b)
			return
		}
		t.keep(b[:i])
		text := bytes.TrimSuffix(t.partial, []byte{'\r'})
		fn(Line{Index: t.lines, Text: text, TooLong: t.skip})
		t.lines++
		t.partial = t.partial[:0]
		t.skip = false
		b = b[i+1:]
	}
}

// keep appends a piece of the current line, up to MaxLineBytes.
func (t *Tail) keep(b []byte) {
	if room := MaxLineBytes - len(t.partial); len(b) > room {
		b = b[:room]
		t.skip = true
	}
	t.partial = append(t.partial, b...)
}

// Close closes the file.
func (t *Tail) Close() error {
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f = nil
	return err
}
