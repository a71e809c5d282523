package publish

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// Local publishes to one context directory without a daemon
// (theseus-context --local DIR): the same validation, then the entry
// appended with fsync, under an exclusive flock(2) on the directory so
// that concurrent invocations append whole entries one after another. The
// directory is created if missing. Only one node sees it: replicating it is
// the user's business (docs/selection-context.md).
type Local struct {
	Dir string
	V   Validator
}

// RootLock is the lock file a daemon holds (flock, exclusive) in the
// contexts root it materialises into, for as long as it runs: one daemon
// per contexts root, and no --local writer in a context it materialises.
const RootLock = ".theseus-contextd.lock"

// ErrDaemonRoot is wrapped by the errors of a --local publication into a
// context directory that a running daemon materialises.
var ErrDaemonRoot = errors.New("in the contexts directory of a theseus-contextd")

// ErrTornLine is wrapped by the error of a publication into a file that
// ends in a torn line (no newline): what it appends would join that line.
var ErrTornLine = errors.New("ends in a torn line (no newline)")

// LockRoot takes the daemon's lock on the contexts root (creating both),
// for owner (a line written into the lock file, for the message another
// daemon gets). A daemon stopping as another starts may hold it an instant
// longer: LockRoot retries for a second before it reports the root in use.
func LockRoot(root, owner string) (*os.File, error) {
	if err := mkdirDurable(root); err != nil {
		return nil, err
	}
	path := filepath.Join(root, RootLock)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || try == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		who, _ := os.ReadFile(path)
		f.Close()
		if w := strings.TrimSpace(string(who)); w != "" {
			return nil, fmt.Errorf("the contexts directory %s is in use by another theseus-contextd (%s): run one daemon per contexts directory, or give this one another --contexts", root, w)
		}
		return nil, fmt.Errorf("the contexts directory %s is in use by another theseus-contextd (%v)", root, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(owner+"\n"), 0)
	}
	return f, nil
}

// lock creates the directory and takes its lock. A directory in a
// daemon's contexts root (one holding RootLock) is refused (ErrDaemonRoot),
// whether the daemon runs now or not: its materialiser stops at the first
// line it finds that it did not write.
func (l *Local) lock() (func(), error) {
	abs, err := filepath.Abs(l.Dir)
	if err != nil {
		return nil, err
	}
	if who, err := os.ReadFile(filepath.Join(filepath.Dir(abs), RootLock)); err == nil {
		return nil, fmt.Errorf("%s is %w (%s): publish through the daemon, without --local (theseus-context --context %s ...)",
			l.Dir, ErrDaemonRoot, strings.TrimSpace(string(who)), filepath.Base(abs))
	}
	if err := mkdirDurable(l.Dir); err != nil {
		return nil, err
	}
	d, err := os.Open(l.Dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("locking %s: %w", l.Dir, err)
	}
	return func() { unix.Flock(int(d.Fd()), unix.LOCK_UN); d.Close() }, nil
}

// Model reads the directory.
func (l *Local) Model() (*Model, error) {
	return LoadDir(filepath.Base(l.Dir), l.Dir, l.V.MaxVectorLen, nil)
}

// Context lists the directory's entries.
func (l *Local) Context() (*api.Context, error) {
	m, err := l.Model()
	if err != nil {
		return nil, err
	}
	c := m.Context()
	return &c, nil
}

func (l *Local) publish(build func(m *Model) (*Entry, []byte, *Rejection)) (*api.Published, error) {
	unlock, err := l.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	m, err := l.Model()
	if err != nil {
		return nil, err
	}
	e, data, rej := build(m)
	if rej != nil {
		return nil, &rej.Error
	}
	w := &Writer{Root: filepath.Dir(l.Dir)}
	defer w.Close()
	if err := w.Apply(filepath.Base(l.Dir), e, func() ([]byte, error) { return data, nil }); err != nil {
		return nil, err
	}
	if err := w.Sync(); err != nil {
		return nil, err
	}
	p := Reply(m, e, m.Add(e.Kind, e.Attr, []byte(e.Line)), 0)
	p.Applied = true
	return p, nil
}

// Attr declares an attribute.
func (l *Local) Attr(r api.AttrRequest) (*api.Published, error) {
	return l.publish(func(m *Model) (*Entry, []byte, *Rejection) { e, rej := l.V.Attr(m, r); return e, nil, rej })
}

// Sched publishes a schedule.
func (l *Local) Sched(r api.SchedRequest) (*api.Published, error) {
	return l.publish(func(m *Model) (*Entry, []byte, *Rejection) { return l.V.Sched(m, r) })
}

// Value appends a value.
func (l *Local) Value(r api.ValueRequest) (*api.Published, error) {
	return l.publish(func(m *Model) (*Entry, []byte, *Rejection) { e, rej := l.V.Value(m, r); return e, nil, rej })
}

// Reply describes entry e of model m, applied at position id with log
// sequence seq.
func Reply(m *Model, e *Entry, id int, seq uint64) *api.Published {
	p := &api.Published{Context: m.Name, Kind: e.Kind, Seq: seq, ID: id, Line: e.Line}
	if e.Object != nil {
		p.File = e.Object.Path
	}
	va := int64(manifest.Always)
	switch e.Kind {
	case api.KindAttr:
		a, _ := manifest.ParseAttribute("", 1, []byte(e.Line), m.mopt)
		va = a.ValidAfter
	case api.KindSched:
		s, _ := manifest.ParseSchedule("", id+1, []byte(e.Line), m.mopt)
		va = s.ValidAfter
	case api.KindValue:
		if i, ok := m.byName[e.Attr]; ok {
			v, _ := manifest.ParseValue("", 1, []byte(e.Line), m.attrs[i].decl.Type, m.mopt)
			va = v.ValidAfter
		}
	}
	p.ValidAfter = rfc3339(va)
	return p
}
