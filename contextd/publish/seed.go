package publish

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// Request is one publication of a seed: exactly one field is set.
type Request struct {
	Attr  *api.AttrRequest
	Sched *api.SchedRequest
	Value *api.ValueRequest
}

// Seed turns the selection context in fsys (its root is the context
// directory: the embedded default context, or os.DirFS of a directory)
// into the publications that rebuild it (theseus-context init --from):
// every attribute declaration in order, then every schedule entry with its
// file, then every value of every exogenous attribute, each with its own
// valid_after (none stays none). Published into an empty context, they
// give every entry the id it has in fsys, so replaces stays right.
// Errors: a line the runtime would skip (a gap would shift the ids), a
// schedule file named by an absolute path or one that climbs out of the
// directory, or one that cannot be read.
func Seed(fsys fs.FS) ([]Request, error) {
	var out []Request
	var exo []manifest.Attribute
	err := seedLines(fsys, manifest.AttributeManifest, func(n int, line []byte) error {
		a, ds := manifest.ParseAttribute(manifest.AttributeManifest, n, line, manifest.Options{})
		if len(ds) > 0 {
			return fmt.Errorf("%s", ds[0])
		}
		r := &api.AttrRequest{Name: a.Name, Origin: a.Origin.String(), Type: a.Type.String(), Description: a.Description,
			ValidAfter: validAfterText(a.ValidAfter)}
		if a.Origin == bc.Endo {
			r.Path = a.Path.Path()
		} else {
			r.Default = field(line, "default")
			exo = append(exo, a)
		}
		out = append(out, Request{Attr: r})
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = seedLines(fsys, manifest.ScheduleManifest, func(n int, line []byte) error {
		if field(line, "gen") != "" {
			r, err := seedGen(line)
			if err != nil {
				return fmt.Errorf("%s:%d: %w", manifest.ScheduleManifest, n, err)
			}
			out = append(out, Request{Sched: r})
			return nil
		}
		s, ds := manifest.ParseSchedule(manifest.ScheduleManifest, n, line, manifest.Options{})
		if len(ds) > 0 {
			return fmt.Errorf("%s", ds[0])
		}
		if !fs.ValidPath(s.File) {
			return fmt.Errorf("%s:%d: schedule file %q is not a path inside the context (absolute, or climbing out with ..): it is not seeded", manifest.ScheduleManifest, n, s.File)
		}
		data, err := fs.ReadFile(fsys, s.File)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", manifest.ScheduleManifest, n, err)
		}
		r := &api.SchedRequest{FileName: path.Base(s.File), File: data, Collective: s.Collective.String(), NRanks: s.NRanks,
			NLocalRanks: s.NLocalRanks, MinBytes: s.MinBytes, MaxBytes: s.MaxBytes, InPlace: s.InPlace, OutOfPlace: s.OutOfPlace,
			Usable: s.Usable, Preference: s.Preference, ValidAfter: validAfterText(s.ValidAfter), Name: s.Name}
		if s.Replaces >= 0 {
			r.Replaces = &s.Replaces
		}
		json.Unmarshal(line, &struct {
			Comment *string `json:"comment"`
		}{&r.Comment})
		out = append(out, Request{Sched: r})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, a := range exo {
		file := a.Name + manifest.LogSuffix
		err := seedLines(fsys, file, func(n int, line []byte) error {
			v, ds := manifest.ParseValue(file, n, line, a.Type, manifest.Options{})
			if len(ds) > 0 {
				return fmt.Errorf("%s", ds[0])
			}
			r := &api.ValueRequest{Name: a.Name, Value: field(line, "value"), ValidAfter: validAfterText(v.ValidAfter)}
			json.Unmarshal(line, &struct {
				Comment *string `json:"comment"`
			}{&r.Comment})
			out = append(out, Request{Value: r})
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// seedLines calls f with every line of file in fsys (1-based numbers); a
// missing file has none; a blank or torn line is an error.
func seedLines(fsys fs.FS, file string, f func(n int, line []byte) error) error {
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		if _, serr := fs.Stat(fsys, file); serr != nil {
			return nil
		}
		return err
	}
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return fmt.Errorf("%s:%d: a torn last line (no newline)", file, n)
		}
		line := bytes.TrimSuffix(data[:i], []byte{'\r'})
		data = data[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			return fmt.Errorf("%s:%d: a blank line: seeding would shift the ids of the entries after it", file, n)
		}
		if err := f(n, line); err != nil {
			return err
		}
	}
	return nil
}

// field is the JSON text of a line's member key ("" when absent).
func field(line []byte, key string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return ""
	}
	return string(m[key])
}

// validAfterText writes ns as a request's valid_after: "always" for none.
func validAfterText(ns int64) string {
	raw, ok := FormatValidAfter(ns)
	if !ok {
		return api.ValidAlways
	}
	return string(raw)
}

// seedGen reads a generated-schedule entry ("gen": ALGO, issue 20) as a
// request; the validator builds its line again and checks it with the
// manifest reader.
func seedGen(line []byte) (*api.SchedRequest, error) {
	var g struct {
		Gen         string          `json:"gen"`
		Protocol    string          `json:"protocol"`
		Channels    json.RawMessage `json:"channels"`
		Avoid       []int           `json:"avoid"`
		Collective  string          `json:"collective"`
		NRanks      int             `json:"nranks"`
		NLocalRanks int             `json:"nlocalranks"`
		MinBytes    int64           `json:"min_bytes"`
		MaxBytes    int64           `json:"max_bytes"`
		InPlace     *bool           `json:"inplace"`
		OutOfPlace  *bool           `json:"outofplace"`
		Usable      string          `json:"usable"`
		Preference  string          `json:"preference"`
		Replaces    *int            `json:"replaces"`
		ValidAfter  json.RawMessage `json:"valid_after"`
		Name        string          `json:"name"`
		Comment     string          `json:"comment"`
	}
	if err := json.Unmarshal(line, &g); err != nil {
		return nil, fmt.Errorf("generated entry: %v", err)
	}
	r := &api.SchedRequest{Gen: g.Gen, Protocol: g.Protocol, Avoid: g.Avoid, Collective: g.Collective, NRanks: g.NRanks,
		NLocalRanks: g.NLocalRanks, MinBytes: g.MinBytes, MaxBytes: g.MaxBytes, InPlace: g.InPlace, OutOfPlace: g.OutOfPlace,
		Usable: g.Usable, Preference: g.Preference, Replaces: g.Replaces, Name: g.Name, Comment: g.Comment, ValidAfter: api.ValidAlways}
	if len(g.Channels) > 0 {
		var s string
		if json.Unmarshal(g.Channels, &s) == nil {
			r.Channels = s
		} else {
			r.Channels = string(g.Channels)
		}
	}
	if len(g.ValidAfter) > 0 {
		var s string
		if json.Unmarshal(g.ValidAfter, &s) != nil {
			s = string(g.ValidAfter)
		}
		r.ValidAfter = s
	}
	return r, nil
}

// CheckSeed validates every publication of reqs (Seed's, in order) with v
// against an empty context, each seeing the ones before it, and writes
// nothing: init publishes none of a seed that has an entry the target
// would reject (the first such one is the error, naming it by its
// position and name). The target validates each again as it is
// published.
func CheckSeed(v *Validator, reqs []Request) error {
	m := NewModel("seed", "", v.MaxVectorLen)
	for i, r := range reqs {
		var e *Entry
		var rej *Rejection
		var what string
		switch {
		case r.Attr != nil:
			what = "attribute " + r.Attr.Name
			e, rej = v.Attr(m, *r.Attr)
		case r.Sched != nil:
			what = "schedule " + r.Sched.Name
			if r.Sched.Name == "" {
				what = "schedule " + r.Sched.FileName
			}
			if r.Sched.Gen != "" && r.Sched.Name == "" {
				what = "generated schedule " + r.Sched.Gen
			}
			e, _, rej = v.Sched(m, *r.Sched)
		case r.Value != nil:
			what = "value of " + r.Value.Name
			e, rej = v.Value(m, *r.Value)
		default:
			continue
		}
		if rej != nil {
			err := rej.Error
			err.Message = fmt.Sprintf("entry %d of %d (%s): %s; nothing was published", i+1, len(reqs), what, err.Message)
			return &err
		}
		m.Add(e.Kind, e.Attr, []byte(e.Line))
	}
	return nil
}
