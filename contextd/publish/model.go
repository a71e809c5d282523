// Package publish validates publications to a selection context and writes
// them: what theseus-contextd does before a publication enters the
// replicated log and when its materialiser applies one, and what
// theseus-context --local does to a directory without a daemon
// (docs/contextd.md). Its pieces:
//
//   - Model: a context's entries as its files hold them (what a
//     publication is validated against, and what list and show report);
//   - Validator: turns an api request into the one line (and schedule
//     file) to append, or a rejection with its reason: schedules are
//     verified by the runtime's own loader (runtime/selector/schedfile),
//     expressions type-checked and compiled against the attribute manifest
//     and published precompiled, values parsed for their attribute's type,
//     names and sizes bounded;
//   - Writer: appends entries to context directories with fsync, schedule
//     files first (content-addressed, renamed into place), and rolls
//     forward over what a crash left half-written;
//   - Local: all three on one directory, under a file lock.
package publish

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// Model is a selection context's entries, line by line, as its files hold
// them. It is not safe for concurrent use; Clone gives a copy to validate
// against while the original grows.
type Model struct {
	Name  string
	Dir   string
	attrs []attrLine
	// byName indexes the first well-formed declaration of each name (the
	// one the runtime uses, docs/selection-context.md §4).
	byName map[string]int
	scheds []schedLine
	logs   map[string]*valueLog // per exo attribute declared
	mopt   manifest.Options
	// AttrSeq is the replicated log's sequence number of the last
	// attribute entry applied (the daemon's compare-and-set point for
	// declarations; 0 in --local mode).
	AttrSeq uint64
}

type attrLine struct {
	text    string
	decl    manifest.Attribute
	invalid string
}

type schedLine struct {
	text    string
	entry   manifest.Schedule
	invalid string
}

type valueLog struct {
	lines int
	last  string // the value of the last well-formed line, as its JSON
}

// NewModel returns the model of an empty context. maxVec bounds vector
// values (0: THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH's default).
func NewModel(name, dir string, maxVec int) *Model {
	return &Model{Name: name, Dir: dir, byName: map[string]int{}, logs: map[string]*valueLog{},
		mopt: manifest.Options{MaxVectorLen: maxVec}}
}

// Clone returns a copy that does not change when m does.
func (m *Model) Clone() *Model {
	c := *m
	c.attrs = m.attrs[:len(m.attrs):len(m.attrs)]
	c.scheds = m.scheds[:len(m.scheds):len(m.scheds)]
	c.byName = make(map[string]int, len(m.byName))
	for k, v := range m.byName {
		c.byName[k] = v
	}
	c.logs = make(map[string]*valueLog, len(m.logs))
	for k, v := range m.logs {
		l := *v
		c.logs[k] = &l
	}
	return &c
}

// Empty reports whether the context has no entry at all.
func (m *Model) Empty() bool {
	if len(m.attrs) > 0 || len(m.scheds) > 0 {
		return false
	}
	for _, l := range m.logs {
		if l.lines > 0 {
			return false
		}
	}
	return true
}

// Schedules is the number of schedule manifest lines: the id the next
// schedule gets.
func (m *Model) Schedules() int { return len(m.scheds) }

// LookupAttr implements policy.Attrs over the declarations so far.
func (m *Model) LookupAttr(name string) (policy.Attr, bool) {
	i, ok := m.byName[name]
	if !ok {
		return policy.Attr{}, false
	}
	d := m.attrs[i].decl
	return policy.Attr{Name: d.Name, Type: d.Type, Origin: d.Origin, Path: d.Path}, true
}

func firstError(ds []diag.Diagnostic) string {
	for _, d := range ds {
		if d.Severity == diag.Error {
			return d.String()
		}
	}
	return ""
}

// Add records one line appended to the file of kind (api.KindAttr,
// KindSched, or KindValue with attr the attribute's name) and returns its
// position in that file.
func (m *Model) Add(kind, attr string, line []byte) int {
	switch kind {
	case api.KindAttr:
		a := attrLine{text: string(line)}
		if strings.TrimSpace(a.text) == "" {
			a.invalid = "blank line"
		} else {
			var ds []diag.Diagnostic
			a.decl, ds = manifest.ParseAttribute(manifest.AttributeManifest, len(m.attrs)+1, line, m.mopt)
			a.invalid = firstError(ds)
		}
		if _, dup := m.byName[a.decl.Name]; a.invalid == "" && dup {
			a.invalid = fmt.Sprintf("attribute %q is declared again (TS0010); the first declaration stands", a.decl.Name)
		}
		m.attrs = append(m.attrs, a)
		if a.invalid == "" {
			m.byName[a.decl.Name] = len(m.attrs) - 1
			if a.decl.Origin == bc.Exo && m.logs[a.decl.Name] == nil {
				m.logs[a.decl.Name] = &valueLog{}
			}
		}
		return len(m.attrs) - 1
	case api.KindSched:
		s := schedLine{text: string(line)}
		if strings.TrimSpace(s.text) == "" {
			s.invalid = "blank line"
		} else {
			var ds []diag.Diagnostic
			s.entry, ds = manifest.ParseSchedule(manifest.ScheduleManifest, len(m.scheds)+1, line, m.mopt)
			s.invalid = firstError(ds)
		}
		m.scheds = append(m.scheds, s)
		return len(m.scheds) - 1
	case api.KindValue:
		l := m.logs[attr]
		if l == nil {
			l = &valueLog{}
			m.logs[attr] = l
		}
		if i, ok := m.byName[attr]; ok {
			if _, ds := manifest.ParseValue(attr+manifest.LogSuffix, l.lines+1, line, m.attrs[i].decl.Type, m.mopt); len(ds) == 0 {
				l.last = rawValue(line)
			}
		}
		l.lines++
		return l.lines - 1
	}
	return -1
}

// rawValue returns the JSON text of a value line's "value".
func rawValue(line []byte) string {
	var v struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return ""
	}
	return string(v.Value)
}

// LoadDir reads the context directory dir (named name) into a model: the
// complete lines of its manifests and of the value log of every exo
// attribute declared (a torn last line is not an entry yet). limit, when
// not nil, bounds the bytes read of each file, by its name in dir (the
// daemon reads only what its checkpoint records). A missing file or
// directory reads as empty.
func LoadDir(name, dir string, maxVec int, limit map[string]int64) (*Model, error) {
	m := NewModel(name, dir, maxVec)
	each := func(file string, f func(line []byte)) error {
		return eachLine(filepath.Join(dir, file), limitOf(limit, file), f)
	}
	if err := each(manifest.AttributeManifest, func(l []byte) { m.Add(api.KindAttr, "", l) }); err != nil {
		return nil, err
	}
	if err := each(manifest.ScheduleManifest, func(l []byte) { m.Add(api.KindSched, "", l) }); err != nil {
		return nil, err
	}
	for _, a := range m.attrs {
		if a.invalid != "" || a.decl.Origin != bc.Exo {
			continue
		}
		name := a.decl.Name
		if err := each(name+manifest.LogSuffix, func(l []byte) { m.Add(api.KindValue, name, l) }); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func limitOf(limit map[string]int64, file string) int64 {
	if limit == nil {
		return -1
	}
	return limit[file] // absent: 0, nothing recorded
}

// eachLine calls f with every complete line of path among its first limit
// bytes (all when limit < 0), without the newline.
func eachLine(path string, limit int64, f func(line []byte)) error {
	file, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer file.Close()
	var r io.Reader = file
	if limit >= 0 {
		r = io.LimitReader(file, limit)
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			return nil // a torn last line (or none) is not an entry
		}
		if err != nil {
			return err
		}
		f(bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'}))
	}
}

// Context describes the model for list and show.
func (m *Model) Context() api.Context {
	c := api.Context{Name: m.Name, Dir: m.Dir, Attributes: []api.Attribute{}, Schedules: []api.Schedule{}}
	for i, a := range m.attrs {
		v := api.Attribute{ID: i, Line: a.text, Invalid: a.invalid}
		if a.invalid == "" {
			d := a.decl
			v.Name, v.Type, v.Origin, v.ValidAfter, v.Description = d.Name, d.Type.String(), d.Origin.String(), rfc3339(d.ValidAfter), d.Description
			if d.Origin == bc.Endo {
				v.Path = d.Path.Path()
			} else {
				v.Default = d.Default.String()
				if l := m.logs[d.Name]; l != nil {
					v.Value, v.Values = l.last, l.lines
				}
			}
		}
		c.Attributes = append(c.Attributes, v)
	}
	for i, s := range m.scheds {
		v := api.Schedule{ID: i, Line: s.text, Invalid: s.invalid, Replaces: -1}
		if s.invalid == "" {
			e := s.entry
			v.Name, v.File, v.Collective, v.NRanks = e.Name, e.File, e.Collective.String(), e.NRanks
			switch {
			case e.Gen != nil:
				v.Gen = e.Gen.Algorithm
			case e.P2P != nil:
				v.Gen = "p2p"
			}
			v.Usable, v.Preference, v.Replaces, v.ValidAfter = e.Usable, e.Preference, e.Replaces, rfc3339(e.ValidAfter)
			v.Precompiled = m.current(e.UsableProgram, e.Usable, policy.WantBool) && m.current(e.PreferenceProgram, e.Preference, policy.WantNumber)
		}
		c.Schedules = append(c.Schedules, v)
	}
	return c
}

// current reports whether the runtime would run program bin for src
// rather than compile it, against the attributes declared now
// (manifest.Verified).
func (m *Model) current(bin []byte, src string, want policy.Want) bool {
	_, err := manifest.Verified(bin, src, m, policy.Options{Want: want, MaxVectorLen: m.mopt.MaxVectorLen})
	return err == nil
}

// now is the clock of validators that have none (tests set Validator.Now).
var now = time.Now
