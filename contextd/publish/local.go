package publish

import (
	"fmt"
	"os"
	"path/filepath"

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

// lock creates the directory and takes the lock.
func (l *Local) lock() (func(), error) {
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
