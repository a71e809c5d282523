package publish

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

// Entry is one publication as it is replicated and applied: the line to
// append to one file of one context, and the schedule file it names.
type Entry struct {
	Kind string `json:"kind"` // api.KindAttr, KindSched or KindValue
	// Attr is the attribute whose log a value goes to, and the name of an
	// exogenous attribute being declared (its empty log is created).
	Attr   string  `json:"attr,omitempty"`
	Line   string  `json:"line"` // without the newline
	Object *Object `json:"object,omitempty"`
}

// Object is a schedule file, stored content-addressed.
type Object struct {
	// Name is the hexadecimal SHA-256 of the file's bytes: its name in the
	// daemon's object store.
	Name string `json:"name"`
	// Path is where the file goes in the context, relative to its
	// directory: schedules/<Name><ext>.
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// ObjectDir is the directory of schedule files inside a context.
const ObjectDir = "schedules"

// Rejection is why a publication is refused.
type Rejection struct {
	api.Error
	// ModelDependent: the reason may go away once this node has applied
	// what the log already holds (an attribute declared on another node
	// just before), so a daemon syncs and validates again before it
	// rejects.
	ModelDependent bool
}

func reject(reason, format string, args ...any) *Rejection {
	return &Rejection{Error: api.Error{Reason: reason, Message: fmt.Sprintf(format, args...)}}
}

// Limits. The zero Validator uses the defaults.
const (
	DefaultMaxScheduleBytes = 64 << 20 // a schedule file
	MaxExprBytes            = 4096     // one policy expression
	MaxValueBytes           = 64 << 10 // one value (or default) as written on the command line
	MaxTextBytes            = 4096     // a description, name or comment
)

// Validator turns requests into entries. The zero Validator is ready.
type Validator struct {
	// MaxScheduleBytes bounds a schedule file (0: DefaultMaxScheduleBytes).
	MaxScheduleBytes int64
	// MaxVectorLen bounds vector values and literals (0: the default 1024).
	MaxVectorLen int
	// Margin is the default valid_after's distance from now.
	Margin time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// TempDir holds schedule files while they are verified ("": os.TempDir()).
	TempDir string
}

func (v *Validator) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return now()
}

func (v *Validator) maxSched() int64 {
	if v.MaxScheduleBytes > 0 {
		return v.MaxScheduleBytes
	}
	return DefaultMaxScheduleBytes
}

// validAfter resolves a request's valid_after into the line's field.
func (v *Validator) validAfter(s string) (json.RawMessage, *Rejection) {
	ns, err := ResolveValidAfter(s, v.now(), v.Margin)
	if err != nil {
		return nil, reject(api.ReasonBadRequest, "%v", err)
	}
	raw, _ := FormatValidAfter(ns)
	return raw, nil
}

// text bounds a name, comment or description and refuses the characters
// a terminal would act on (hasControl): list, show and theseusc select
// print them.
func text(what, s string) *Rejection {
	if len(s) > MaxTextBytes {
		return reject(api.ReasonTooLarge, "%s of %d bytes is over the limit of %d", what, len(s), MaxTextBytes)
	}
	if hasControl(s) {
		return reject(api.ReasonBadName, "the %s %q holds a control character (a line break, an escape sequence, a bidirectional override) or is not UTF-8: write it on one line of printable text", what, s)
	}
	return nil
}

// line marshals the ordered fields of one line and checks it fits.
func line(fields any) (string, *Rejection) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "msgsize >= 0", not "msgsize \u003e= 0"
	if err := enc.Encode(fields); err != nil {
		return "", reject(api.ReasonBadRequest, "%v", err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(b) > manifest.MaxLineBytes {
		return "", reject(api.ReasonTooLarge, "the entry's line is %d bytes, over the limit of %d", len(b), manifest.MaxLineBytes)
	}
	return string(b), nil
}

// lineDiags rejects a line the runtime would not read cleanly (never
// expected: the validator builds lines from checked fields).
func lineDiags(ds []diag.Diagnostic) *Rejection {
	if len(ds) == 0 {
		return nil
	}
	r := reject(api.ReasonBadRequest, "the entry would not read back: %s", ds[0].Msg)
	r.Diagnostics = ds
	return r
}

// Attr validates a declaration against m.
func (v *Validator) Attr(m *Model, r api.AttrRequest) (*Entry, *Rejection) {
	if !policy.ValidName(r.Name) {
		return nil, reject(api.ReasonBadName, "invalid attribute name %q: use [A-Za-z_][A-Za-z0-9_]*, at most 64 bytes, not a function name or true/false", r.Name)
	}
	if i, dup := m.byName[r.Name]; dup {
		return nil, reject(api.ReasonDuplicate, "attribute %q is already declared (attribute entry %d); a declaration cannot be changed", r.Name, i)
	}
	if rej := text("description", r.Description); rej != nil {
		return nil, rej
	}
	va, rej := v.validAfter(r.ValidAfter)
	if rej != nil {
		return nil, rej
	}
	type endoLine struct {
		Name        string          `json:"name"`
		Type        string          `json:"type"`
		Origin      string          `json:"origin"`
		Path        string          `json:"path"`
		ValidAfter  json.RawMessage `json:"valid_after,omitempty"`
		Description string          `json:"description,omitempty"`
	}
	type exoLine struct {
		Name        string          `json:"name"`
		Type        string          `json:"type"`
		Origin      string          `json:"origin"`
		Default     json.RawMessage `json:"default,omitempty"`
		ValidAfter  json.RawMessage `json:"valid_after,omitempty"`
		Description string          `json:"description,omitempty"`
	}
	var fields any
	e := &Entry{Kind: api.KindAttr}
	switch r.Origin {
	case "endo":
		if r.Type != "" && r.Type != "int" {
			return nil, reject(api.ReasonBadRequest, "endo attribute %q has type %s: request fields are ints (leave --type out)", r.Name, r.Type)
		}
		if r.Default != "" {
			return nil, reject(api.ReasonBadRequest, "endo attribute %q takes its value from the request: it has no default", r.Name)
		}
		if _, err := bc.ParseReqField(r.Path); err != nil {
			return nil, reject(api.ReasonBadRequest, "endo attribute %q: %v", r.Name, err)
		}
		fields = endoLine{r.Name, "int", "endo", r.Path, va, r.Description}
	case "exo":
		t, err := bc.ParseType(r.Type)
		if err != nil || r.Type == "" {
			return nil, reject(api.ReasonBadRequest, "exo attribute %q needs --type int, float, bool or vector", r.Name)
		}
		if r.Path != "" {
			return nil, reject(api.ReasonBadRequest, "exo attribute %q has a path: exo values are published with set (or declare it --origin endo)", r.Name)
		}
		var def json.RawMessage
		if r.Default != "" {
			if len(r.Default) > MaxValueBytes {
				return nil, reject(api.ReasonTooLarge, "default of %d bytes is over the limit of %d", len(r.Default), MaxValueBytes)
			}
			if def, err = ParseValue(r.Default, t, v.MaxVectorLen); err != nil {
				return nil, reject(api.ReasonWrongType, "default of %s attribute %q: %v", t, r.Name, err)
			}
		}
		fields = exoLine{r.Name, t.String(), "exo", def, va, r.Description}
		e.Attr = r.Name
	default:
		return nil, reject(api.ReasonBadRequest, "attribute %q: --origin must be endo or exo, got %q", r.Name, r.Origin)
	}
	l, rej := line(fields)
	if rej != nil {
		return nil, rej
	}
	_, ds := manifest.ParseAttribute(manifest.AttributeManifest, len(m.attrs)+1, []byte(l), m.mopt)
	if rej := lineDiags(ds); rej != nil {
		return nil, rej
	}
	e.Line = l
	return e, nil
}

// Value validates a value for an exogenous attribute declared in m.
func (v *Validator) Value(m *Model, r api.ValueRequest) (*Entry, *Rejection) {
	if !policy.ValidName(r.Name) {
		return nil, reject(api.ReasonBadName, "invalid attribute name %q", r.Name)
	}
	i, ok := m.byName[r.Name]
	if !ok {
		rej := reject(api.ReasonUnknownAttribute, "attribute %q is not declared in context %q (declare it with new attr)", r.Name, m.Name)
		rej.ModelDependent = true
		return nil, rej
	}
	d := m.attrs[i].decl
	if d.Origin != bc.Exo {
		return nil, reject(api.ReasonBadRequest, "attribute %q is endo: its value is the request's %s, not published", r.Name, d.Path.Path())
	}
	if len(r.Value) > MaxValueBytes {
		return nil, reject(api.ReasonTooLarge, "value of %d bytes is over the limit of %d", len(r.Value), MaxValueBytes)
	}
	if rej := text("comment", r.Comment); rej != nil {
		return nil, rej
	}
	val, err := ParseValue(r.Value, d.Type, v.MaxVectorLen)
	if err != nil {
		return nil, reject(api.ReasonWrongType, "attribute %q is %s: %v", r.Name, d.Type, err)
	}
	va, rej := v.validAfter(r.ValidAfter)
	if rej != nil {
		return nil, rej
	}
	l, rej := line(struct {
		Value      json.RawMessage `json:"value"`
		ValidAfter json.RawMessage `json:"valid_after,omitempty"`
		Comment    string          `json:"comment,omitempty"`
	}{val, va, r.Comment})
	if rej != nil {
		return nil, rej
	}
	_, ds := manifest.ParseValue(r.Name+manifest.LogSuffix, 1, []byte(l), d.Type, m.mopt)
	if rej := lineDiags(ds); rej != nil {
		return nil, rej
	}
	return &Entry{Kind: api.KindValue, Attr: r.Name, Line: l}, nil
}

// CheckFileName rejects a schedule file name that is not a plain base name
// with a schedule extension: the name of the request never becomes a path
// (the file is stored under its hash), and one that tries to climb out of
// a directory or name one is refused, not cleaned.
func CheckFileName(name string) error {
	switch {
	case name == "":
		return errors.New("the schedule file has no name")
	case strings.ContainsAny(name, `/\`) || name == "." || name == ".." || strings.ContainsRune(name, 0):
		return fmt.Errorf("schedule file name %q is not a plain file name (a path, or a traversal): send the base name only", name)
	}
	return schedfile.CheckExt(name)
}

// Sched validates a schedule publication against m and returns the entry
// and the file's bytes (to store under Entry.Object.Name).
func (v *Validator) Sched(m *Model, r api.SchedRequest) (*Entry, []byte, *Rejection) {
	if r.Gen != "" {
		e, rej := v.gen(m, r)
		return e, nil, rej
	}
	if err := CheckFileName(r.FileName); err != nil {
		return nil, nil, reject(api.ReasonBadName, "%v", err)
	}
	if int64(len(r.File)) > v.maxSched() {
		return nil, nil, reject(api.ReasonTooLarge, "%s is %d bytes, over the limit of %d for a schedule file", r.FileName, len(r.File), v.maxSched())
	}
	if len(r.File) == 0 {
		return nil, nil, reject(api.ReasonInvalidSchedule, "%s is empty", r.FileName)
	}
	for what, s := range map[string]string{"usable": r.Usable, "preference": r.Preference} {
		if len(s) > MaxExprBytes {
			return nil, nil, reject(api.ReasonTooLarge, "the %s expression is %d bytes, over the limit of %d", what, len(s), MaxExprBytes)
		}
	}
	for what, s := range map[string]string{"name": r.Name, "comment": r.Comment} {
		if rej := text(what, s); rej != nil {
			return nil, nil, rej
		}
	}
	coll, err := ir.ParseCollective(r.Collective)
	if err != nil {
		return nil, nil, reject(api.ReasonBadRequest, "--coll: %v", err)
	}
	info, rej := v.verify(r.FileName, r.File)
	if rej != nil {
		return nil, nil, rej
	}
	sum := sha256.Sum256(r.File)
	obj := &Object{Name: hex.EncodeToString(sum[:]), Size: int64(len(r.File))}
	obj.Path = ObjectDir + "/" + obj.Name + strings.ToLower(filepath.Ext(r.FileName))
	nranks := r.NRanks
	if nranks == 0 {
		nranks = info.NRanks
	}
	name := r.Name
	if name == "" {
		name = strings.TrimSuffix(r.FileName, filepath.Ext(r.FileName))
		if rej := text("name", name); rej != nil {
			return nil, nil, rej
		}
	}
	usable, pref, u, p, rej := v.policy(m, r.Usable, r.Preference)
	if rej != nil {
		return nil, nil, rej
	}
	replaces := -1
	if r.Replaces != nil {
		replaces = *r.Replaces
		if replaces < 0 || replaces >= len(m.scheds) {
			rej := reject(api.ReasonBadReplaces, "--replaces %d: context %q has schedules 0 to %d", replaces, m.Name, len(m.scheds)-1)
			rej.ModelDependent = true
			return nil, nil, rej
		}
		old := m.scheds[replaces]
		if old.invalid != "" {
			return nil, nil, reject(api.ReasonBadReplaces, "--replaces %d: that entry is not valid (%s)", replaces, old.invalid)
		}
		if old.entry.Collective != coll {
			return nil, nil, reject(api.ReasonBadReplaces, "--replaces %d: that is %s %s schedule, this one is %s", replaces, article(old.entry.Collective), old.entry.Collective, coll)
		}
	}
	va, rej := v.validAfter(r.ValidAfter)
	if rej != nil {
		return nil, nil, rej
	}
	type schedLineJSON struct {
		File              string          `json:"file"`
		Collective        string          `json:"collective"`
		NRanks            int             `json:"nranks"`
		NLocalRanks       int             `json:"nlocalranks,omitempty"`
		MinBytes          int64           `json:"min_bytes,omitempty"`
		MaxBytes          int64           `json:"max_bytes,omitempty"`
		InPlace           *bool           `json:"inplace,omitempty"`
		OutOfPlace        *bool           `json:"outofplace,omitempty"`
		Usable            string          `json:"usable"`
		Preference        string          `json:"preference"`
		UsableProgram     json.RawMessage `json:"usable_program"`
		PreferenceProgram json.RawMessage `json:"preference_program"`
		Replaces          *int            `json:"replaces,omitempty"`
		ValidAfter        json.RawMessage `json:"valid_after,omitempty"`
		Name              string          `json:"name,omitempty"`
		Comment           string          `json:"comment,omitempty"`
	}
	fields := schedLineJSON{File: obj.Path, Collective: coll.String(), NRanks: nranks, NLocalRanks: r.NLocalRanks,
		MinBytes: r.MinBytes, MaxBytes: r.MaxBytes, InPlace: r.InPlace, OutOfPlace: r.OutOfPlace,
		Usable: usable, Preference: pref, UsableProgram: manifest.EncodeProgram(u), PreferenceProgram: manifest.EncodeProgram(p),
		ValidAfter: va, Name: name, Comment: r.Comment}
	if replaces >= 0 {
		fields.Replaces = &replaces
	}
	l, rej := line(fields)
	if rej != nil {
		return nil, nil, rej
	}
	e, ds := manifest.ParseSchedule(manifest.ScheduleManifest, len(m.scheds)+1, []byte(l), m.mopt)
	if len(ds) > 0 {
		rej := reject(api.ReasonBadRequest, "the schedule entry is invalid: %s", ds[0].Msg)
		rej.Diagnostics = ds
		return nil, nil, rej
	}
	if _, why := selector.Contradiction(&e, info); why != "" {
		return nil, nil, reject(api.ReasonInvalidSchedule, "%s: %s; the runtime would exclude this entry", r.FileName, why)
	}
	return &Entry{Kind: api.KindSched, Line: l, Object: obj}, r.File, nil
}

func article(c ir.Collective) string {
	if s := c.String(); s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an"
	}
	return "a"
}

// verify loads the file with the runtime's own loader, from a private
// temporary copy named for its extension, and names the user's file in
// the diagnostics.
func (v *Validator) verify(name string, data []byte) (*selector.ScheduleInfo, *Rejection) {
	dir, err := os.MkdirTemp(v.TempDir, "theseus-verify-")
	if err != nil {
		return nil, reject(api.ReasonBadRequest, "verifying %s: %v", name, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "schedule"+strings.ToLower(filepath.Ext(name)))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return nil, reject(api.ReasonBadRequest, "verifying %s: %v", name, err)
	}
	info, err := schedfile.Loader{MaxBytes: v.maxSched()}.Load(tmp)
	if err == nil {
		if strings.EqualFold(filepath.Ext(name), ".tsb") {
			if rej := proveBundle(name, data); rej != nil {
				return nil, rej
			}
		}
		return info, nil
	}
	rej := reject(api.ReasonInvalidSchedule, "%s fails verification", name)
	var se *schedfile.Error
	if errors.As(err, &se) {
		for _, d := range se.Diags {
			if d.File == tmp || d.File == "" || strings.HasPrefix(d.File, tmp) {
				d.File = name + strings.TrimPrefix(d.File, tmp)
			}
			rej.Diagnostics = append(rej.Diagnostics, d)
		}
	} else {
		rej.Message = strings.ReplaceAll(err.Error(), tmp, name)
	}
	return nil, rej
}

// gen validates a generated-schedule entry: "gen": ALGO with the
// generator's parameters (protocol, channels, avoid) beside the usual
// collective, nranks, constraint and policy fields, the form issue 20 adds
// to the schedule manifest. The line must read back through this build's
// manifest reader, which checks the algorithm serves the collective and
// the parameters; a build whose reader does not know "gen" rejects it with
// that reason, and nothing is published.
func (v *Validator) gen(m *Model, r api.SchedRequest) (*Entry, *Rejection) {
	if len(r.File) > 0 || r.FileName != "" {
		return nil, reject(api.ReasonBadRequest, "--gen %s names a generator: give no schedule file", r.Gen)
	}
	if !policy.ValidName(r.Gen) {
		return nil, reject(api.ReasonBadName, "generator name %q", r.Gen)
	}
	coll, err := ir.ParseCollective(r.Collective)
	if err != nil {
		return nil, reject(api.ReasonBadRequest, "--coll: %v", err)
	}
	if r.NRanks < 0 || r.NRanks > ir.MaxRanks {
		return nil, reject(api.ReasonBadRequest, "--nranks %d: want 0 (any) to %d", r.NRanks, ir.MaxRanks)
	}
	for what, s := range map[string]string{"usable": r.Usable, "preference": r.Preference, "channels": r.Channels} {
		if len(s) > MaxExprBytes {
			return nil, reject(api.ReasonTooLarge, "the %s expression is %d bytes, over the limit of %d", what, len(s), MaxExprBytes)
		}
	}
	for what, s := range map[string]string{"name": r.Name, "comment": r.Comment} {
		if rej := text(what, s); rej != nil {
			return nil, rej
		}
	}
	usable, pref, u, p, rej := v.policy(m, r.Usable, r.Preference)
	if rej != nil {
		return nil, rej
	}
	va, rej := v.validAfter(r.ValidAfter)
	if rej != nil {
		return nil, rej
	}
	var channels json.RawMessage
	if c := strings.TrimSpace(r.Channels); c != "" {
		if _, err := strconv.ParseInt(c, 10, 64); err == nil {
			channels = json.RawMessage(c)
		} else {
			channels, _ = json.Marshal(r.Channels)
		}
	}
	fields := struct {
		Gen               string          `json:"gen"`
		Protocol          string          `json:"protocol,omitempty"`
		Channels          json.RawMessage `json:"channels,omitempty"`
		Avoid             []int           `json:"avoid,omitempty"`
		Collective        string          `json:"collective"`
		NRanks            int             `json:"nranks,omitempty"`
		NLocalRanks       int             `json:"nlocalranks,omitempty"`
		MinBytes          int64           `json:"min_bytes,omitempty"`
		MaxBytes          int64           `json:"max_bytes,omitempty"`
		InPlace           *bool           `json:"inplace,omitempty"`
		OutOfPlace        *bool           `json:"outofplace,omitempty"`
		Usable            string          `json:"usable"`
		Preference        string          `json:"preference"`
		UsableProgram     json.RawMessage `json:"usable_program"`
		PreferenceProgram json.RawMessage `json:"preference_program"`
		ValidAfter        json.RawMessage `json:"valid_after,omitempty"`
		Name              string          `json:"name,omitempty"`
		Comment           string          `json:"comment,omitempty"`
	}{r.Gen, r.Protocol, channels, r.Avoid, coll.String(), r.NRanks, r.NLocalRanks, r.MinBytes, r.MaxBytes, r.InPlace, r.OutOfPlace,
		usable, pref, manifest.EncodeProgram(u), manifest.EncodeProgram(p), va, r.Name, r.Comment}
	l, rej := line(fields)
	if rej != nil {
		return nil, rej
	}
	e, ds := manifest.ParseSchedule(manifest.ScheduleManifest, len(m.scheds)+1, []byte(l), m.mopt)
	if len(ds) > 0 {
		why := ds[0].Msg
		rej := reject(api.ReasonBadRequest, "the generated entry is invalid: %s", why)
		if strings.Contains(why, `unknown field "gen"`) {
			rej.Message = "this build's schedule manifest reader does not know generated entries (\"gen\", issue 20): nothing published"
		}
		rej.Diagnostics = ds
		return nil, rej
	}
	if rej := checkGenerated(m, &e, len(m.scheds)+1, v.MaxVectorLen); rej != nil {
		return nil, rej
	}
	return &Entry{Kind: api.KindSched, Line: l}, nil
}

// policy compiles a schedule's usable and preference expressions ("" :
// "true" and "0") against the attributes m declares now, and returns their
// texts and programs, or the rejection with the compiler's errors (an
// undeclared attribute makes it ModelDependent: it may be declared on
// another node a moment ago).
func (v *Validator) policy(m *Model, usable, pref string) (string, string, *bc.Program, *bc.Program, *Rejection) {
	if usable == "" {
		usable = "true"
	}
	if pref == "" {
		pref = "0"
	}
	u, du := policy.Compile(usable, m, policy.Options{Want: policy.WantBool, File: "usable", Line: 1, Col: 1, MaxVectorLen: v.MaxVectorLen})
	p, dp := policy.Compile(pref, m, policy.Options{Want: policy.WantNumber, File: "preference", Line: 1, Col: 1, MaxVectorLen: v.MaxVectorLen})
	if u != nil && p != nil {
		return usable, pref, u, p, nil
	}
	rej := reject(api.ReasonBadExpression, "the policy does not compile against the attribute manifest of context %q", m.Name)
	for _, d := range append(du, dp...) {
		if d.Severity == diag.Error {
			rej.Diagnostics = append(rej.Diagnostics, d)
			rej.ModelDependent = rej.ModelDependent || d.Code == diag.PolicyUnknown
		}
	}
	return "", "", nil, nil, rej
}
