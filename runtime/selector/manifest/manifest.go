// Package manifest reads the files of a selection context directory
// (docs/selection-context.md): the attribute manifest
// (attribute_manifest.jsonl), the schedule manifest
// (schedule_manifest.jsonl) and one value log per exogenous attribute
// (<name>.jsonl). All are append-only NDJSON: one JSON object per line.
//
// The Parse* functions decode one line; Tail reads what was appended to a
// file since the last call and yields complete lines only, so a torn last
// line is ignored until its newline arrives. Entries are numbered by line:
// line k (1-based) is entry k-1, whatever it holds, which makes schedule ids
// (entry positions) independent of which lines are well-formed.
//
// Every problem is a diag.Diagnostic at file:line:col with a stable code.
package manifest

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// File names inside a context directory.
const (
	AttributeManifest = "attribute_manifest.jsonl"
	ScheduleManifest  = "schedule_manifest.jsonl"
	LogSuffix         = ".jsonl" // exogenous attribute <name> logs to <name>.jsonl
)

// Always is the ValidAfter of an entry without valid_after.
const Always = math.MinInt64

// Options of the line parsers.
type Options struct {
	// MaxVectorLen bounds vector values (THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH;
	// 0: policy.DefaultMaxVectorLen).
	MaxVectorLen int
	// Location interprets valid_after timestamps without a zone; its
	// standard (non-DST) offset is used. nil: time.Local.
	Location *time.Location
}

func (o Options) maxVec() int {
	if o.MaxVectorLen > 0 {
		return o.MaxVectorLen
	}
	return policy.DefaultMaxVectorLen
}

// Value is an attribute value. Scalars are in Bits with the VM's slot
// encoding (ints as themselves, floats as IEEE bits, bools 0/1); vectors are
// in Vec.
type Value struct {
	Type bc.Type
	Bits int64
	Vec  []float64
}

func (v Value) String() string {
	switch v.Type {
	case bc.Int:
		return fmt.Sprint(v.Bits)
	case bc.Float:
		return bc.FormatFloat(bc.FromBits(v.Bits))
	case bc.Bool:
		return fmt.Sprint(v.Bits != 0)
	case bc.Vector:
		return bc.FormatVector(v.Vec)
	}
	return "invalid"
}

// Attribute is one attribute manifest entry.
type Attribute struct {
	Name   string
	Type   bc.Type
	Origin bc.Origin
	Path   bc.ReqField // endo only
	// Default is an exo attribute's value until its log gives one (the
	// type's zero value when the entry has no default).
	Default Value
	// ValidAfter is when the entry takes effect, in Unix nanoseconds
	// (Always when absent).
	ValidAfter  int64
	Description string
}

// Schedule is one schedule manifest entry. Constraint fields that are absent
// are taken from the schedule file when it is loaded; before that they do
// not restrict matching.
type Schedule struct {
	File string // relative to the context directory, or absolute; "" for a generated entry
	// Gen is the built-in generator that builds the schedule, for an entry
	// that names one instead of a file (nil for a file entry).
	Gen        *Generator
	Collective ir.Collective
	// NRanks is the world size the entry serves; 0 (absent, generated
	// entries only) for any the generator supports.
	NRanks      int
	NLocalRanks int   // 0: absent
	MinBytes    int64 // 0: absent
	MaxBytes    int64 // 0: absent (no upper bound)
	InPlace     *bool // nil: absent
	OutOfPlace  *bool // nil: absent
	// Usable and Preference are policy expressions (defaults "true" and
	// "0"); UsableCol and PreferenceCol are the 1-based columns of their
	// first byte in the line, for diagnostics.
	Usable        string
	UsableCol     int
	Preference    string
	PreferenceCol int
	// UsableProgram and PreferenceProgram are the precompiled programs of
	// the two expressions (bytecode.Marshal, decoded from the base64 of the
	// usable_program and preference_program fields, which ParseSchedule
	// also reads; nil when absent). The runtime uses one only when Program
	// and CheckImports accept it.
	UsableProgram     []byte
	PreferenceProgram []byte
	// Replaces is the id of the entry this one replaces, or -1.
	Replaces   int
	ValidAfter int64
	Name       string
	// P2P is set for an entry of the point-to-point engine's parameters
	// ("gen": "p2p", collective sendrecv; p2p.go), which has no file.
	P2P *P2PEntry
}

// Generator is a generated entry's recipe (docs/selection-context.md §5.5):
// a compiler/gen algorithm and its parameters. The runtime builds the
// program for the communicator's nranks and nlocalranks (and rank), so one
// entry serves every shape the algorithm supports.
type Generator struct {
	// Algorithm is a compiler/gen algorithm name or alias ("gen"), one
	// that serves the entry's collective.
	Algorithm string
	// Protocol is "protocol": simple (default) or ll.
	Protocol ir.Protocol
	// Channels is "channels": the number of parallel lanes, as an integer
	// literal or a policy expression (a number) over the endogenous
	// attributes of request.nranks and request.nlocalranks; "" means 1.
	// The runtime takes the largest of K, K/2, K/4, ..., 1 that the
	// generator accepts for the shape (its threadblock, channel and op
	// limits), K clamped to [1, gen.MaxChannels]. ChannelsCol is the
	// 1-based column of its value, for diagnostics.
	Channels    string
	ChannelsCol int
	// Avoid is "avoid": ranks the program keeps off relaying paths
	// (gen.Options.Avoid); the entry matches only communicators that have
	// them.
	Avoid []int
	// Col is the 1-based column of the "gen" value.
	Col int
}

// String describes the recipe: "gen:ALGORITHM", then the protocol when LL,
// the channel count and the avoided ranks when given (for example
// "gen:dbtree avoid=[2]", "gen:ring channels=clamp(64 / nranks, 1, 32)").
func (g *Generator) String() string {
	var b strings.Builder
	b.WriteString("gen:" + g.Algorithm)
	if g.Protocol != ir.Simple {
		b.WriteString(" " + g.Protocol.String())
	}
	if g.Channels != "" {
		b.WriteString(" channels=" + g.Channels)
	}
	if len(g.Avoid) > 0 {
		fmt.Fprintf(&b, " avoid=%v", g.Avoid)
	}
	return b.String()
}

// Label names the entry's schedule in messages and to the executor: the
// file for a file entry; for a generated entry its name, or "gen:" and the
// algorithm when it has none.
func (s *Schedule) Label() string {
	switch {
	case s.P2P != nil && s.Name != "":
		return s.Name
	case s.P2P != nil:
		return "gen:p2p"
	case s.Gen == nil:
		return s.File
	case s.Name != "":
		return s.Name
	}
	return "gen:" + s.Gen.Algorithm
}

// ValueEntry is one line of an exogenous attribute's log.
type ValueEntry struct {
	Value      Value
	ValidAfter int64
}

func (c *lineCtx) value(f field, t bc.Type, maxVec int) (Value, bool) {
	v := Value{Type: t}
	var ok bool
	switch t {
	case bc.Int:
		v.Bits, ok = c.integer(f, math.MinInt64, math.MaxInt64)
	case bc.Float:
		var x float64
		x, ok = c.number(f)
		v.Bits = bc.Bits(x)
	case bc.Bool:
		var b bool
		b, ok = c.boolean(f)
		v.Bits = bc.B2I(b)
	case bc.Vector:
		var elems []json.RawMessage
		if err := json.Unmarshal(f.Raw, &elems); err != nil || elems == nil {
			c.errorf(diag.BadValue, f.ValOff, "write a vector as [1, 2.5, 3]", "%s must be an array of numbers", f.Key)
			return v, false
		}
		if len(elems) > maxVec {
			c.errorf(diag.PolicyVector, f.ValOff, "shorten the vector or raise THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH",
				"vector of %d elements is over THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=%d", len(elems), maxVec)
			return v, false
		}
		v.Vec = make([]float64, len(elems))
		for i, e := range elems {
			x, err := jsonNumber(e)
			if err != nil {
				c.errorf(diag.BadValue, f.ValOff, "write a vector as [1, 2.5, 3]", "%s element %d %v", f.Key, i, err)
				return v, false
			}
			v.Vec[i] = x
		}
		ok = true
	}
	return v, ok
}

func (c *lineCtx) validAfter(f field, loc *time.Location) (int64, bool) {
	t, err := parseValidAfterRaw(f.Raw, loc)
	if err != nil {
		c.errorf(diag.BadValue, f.ValOff, `write "2006-01-02T15:04:05" (local standard time) or Unix seconds`, "valid_after: %v", err)
		return 0, false
	}
	return t, true
}

// ParseAttribute decodes line number line (1-based) of an attribute
// manifest. Fields (docs/selection-context.md): name (required, a valid
// attribute name), type (int|float|bool|vector, required), origin
// (endo|exo, required), path (endo only, required there: one of the twelve
// request.* paths, and the type must be int), default (exo only, of the
// attribute's type), valid_after, description. Errors: TS0001 malformed
// JSON, TS0002 unknown field, TS0003 bad value, TS0004 missing field,
// TS0304 vector too long, TS0305 unsupported endo path.
func ParseAttribute(file string, line int, text []byte, opt Options) (Attribute, []diag.Diagnostic) {
	c := &lineCtx{file: file, line: line, text: text}
	a := Attribute{ValidAfter: Always}
	fs, ok := c.object()
	if !ok {
		return a, c.ds
	}
	var def *field
	var path *field
	have := map[string]bool{}
	for i := range fs {
		f := fs[i]
		have[f.Key] = true
		switch f.Key {
		case "name":
			if s, ok := c.str(f); ok {
				if !policy.ValidName(s) {
					c.errorf(diag.BadValue, f.ValOff, "use [A-Za-z_][A-Za-z0-9_]*, at most 64 bytes, not a function name",
						"invalid attribute name %q", s)
				}
				a.Name = s
			}
		case "type":
			if s, ok := c.str(f); ok {
				t, err := bc.ParseType(s)
				if err != nil {
					c.errorf(diag.BadValue, f.ValOff, "", "%v", err)
				}
				a.Type = t
			}
		case "origin":
			if s, ok := c.str(f); ok {
				o, err := bc.ParseOrigin(s)
				if err != nil {
					c.errorf(diag.BadValue, f.ValOff, "", "%v", err)
				}
				a.Origin = o
			}
		case "path":
			path = &fs[i]
		case "default":
			def = &fs[i]
		case "valid_after":
			a.ValidAfter, _ = c.validAfter(f, opt.Location)
		case "description", "comment":
			if s, ok := c.str(f); ok {
				a.Description = s
			}
		default:
			c.errorf(diag.UnknownField, f.KeyOff, "fields: name, type, origin, path, default, valid_after, description",
				"unknown field %q in an attribute entry", f.Key)
		}
	}
	for _, req := range []string{"name", "type", "origin"} {
		if !have[req] {
			c.errorf(diag.MissingField, 0, "", "attribute entry lacks %q", req)
		}
	}
	if len(c.ds) > 0 {
		return a, c.ds
	}
	switch a.Origin {
	case bc.Endo:
		if path == nil {
			c.errorf(diag.MissingField, 0, "endo attributes need a path such as request.messagesize", "endo attribute %q lacks \"path\"", a.Name)
			break
		}
		if s, ok := c.str(*path); ok {
			p, err := bc.ParseReqField(s)
			if err != nil {
				c.errorf(diag.PolicyEndoPath, path.ValOff, "", "%v", err)
			}
			a.Path = p
		}
		if a.Type != bc.Int {
			c.errorf(diag.BadValue, 0, "declare endo attributes with type int", "endo attribute %q has type %s; request fields are ints", a.Name, a.Type)
		}
		if def != nil {
			c.errorf(diag.BadValue, def.KeyOff, "remove default: endo values come from the request", "endo attribute %q has a default", a.Name)
		}
	case bc.Exo:
		if path != nil {
			c.errorf(diag.BadValue, path.KeyOff, "remove path, or declare origin endo", "exo attribute %q has a path", a.Name)
		}
		a.Default = Value{Type: a.Type}
		if a.Type == bc.Vector {
			a.Default.Vec = []float64{}
		}
		if def != nil {
			a.Default, _ = c.value(*def, a.Type, opt.maxVec())
		}
	}
	return a, c.ds
}

// ParseSchedule decodes line number line (1-based; the entry's id is
// line-1) of a schedule manifest. Fields (docs/selection-context.md): file,
// collective, nranks (required); nlocalranks, min_bytes, max_bytes,
// inplace, outofplace (optional constraints); usable (default "true"),
// preference (default "0"); replaces (an earlier id); valid_after; name,
// comment. A generated entry gives gen (a compiler/gen algorithm that
// serves the collective) instead of file, and optionally protocol,
// channels and avoid; its nranks is optional (absent: any). An entry
// "gen": "p2p" is the point-to-point engine's parameters instead
// (P2PEntry, p2p.go). The expressions are not compiled here (that needs
// the attribute manifest). Errors: TS0001–TS0004, TS0012 unknown
// collective.
func ParseSchedule(file string, line int, text []byte, opt Options) (Schedule, []diag.Diagnostic) {
	c := &lineCtx{file: file, line: line, text: text}
	s := Schedule{Replaces: -1, ValidAfter: Always, Usable: "true", Preference: "0"}
	fs, ok := c.object()
	if !ok {
		return s, c.ds
	}
	if isP2P(fs) {
		return c.p2pEntry(fs, line, opt)
	}
	have := map[string]bool{}
	var g Generator
	var genF, protoF, chanF, avoidF *field
	for i, f := range fs {
		have[f.Key] = true
		switch f.Key {
		case "gen":
			genF = &fs[i]
			if v, ok := c.str(f); ok {
				g.Algorithm, g.Col = v, c.col(f.ValOff)+1
			}
		case "protocol":
			protoF = &fs[i]
			if v, ok := c.str(f); ok {
				p, err := ir.ParseProtocol(v)
				if err != nil {
					c.errorf(diag.BadValue, f.ValOff, "write simple or ll", "%v", err)
				}
				g.Protocol = p
			}
		case "channels":
			chanF = &fs[i]
			g.ChannelsCol = c.col(f.ValOff) + 1
			if v, err := strconv.ParseInt(string(f.Raw), 10, 64); err == nil {
				if v < 1 || v > gen.MaxChannels {
					c.errorf(diag.BadValue, f.ValOff, "", "channels must be in [1, %d], got %d", gen.MaxChannels, v)
				}
				g.Channels = string(f.Raw)
			} else if v, ok := c.str(f); ok {
				if strings.TrimSpace(v) == "" {
					c.errorf(diag.BadValue, f.ValOff, "write an integer or an expression such as \"clamp(64 / nranks, 1, 32)\"", "channels is empty")
				}
				// An integer in a string is the literal (selector.CompileChannels).
				if k, err := strconv.Atoi(v); err == nil && (k < 1 || k > gen.MaxChannels) {
					c.errorf(diag.BadValue, f.ValOff, "", "channels must be in [1, %d], got %d", gen.MaxChannels, k)
				}
				g.Channels = v
			}
		case "avoid":
			avoidF = &fs[i]
			var rs []int64
			if err := json.Unmarshal(f.Raw, &rs); err != nil || rs == nil {
				c.errorf(diag.BadValue, f.ValOff, "write the ranks as [2] or [0, 5]", "avoid must be an array of ranks")
				break
			}
			for _, r := range rs {
				if r < 0 || r >= ir.MaxRanks {
					c.errorf(diag.BadValue, f.ValOff, "", "avoid: rank %d outside [0, %d)", r, ir.MaxRanks)
					break
				}
				g.Avoid = append(g.Avoid, int(r))
			}
		case "file":
			if v, ok := c.str(f); ok {
				if v == "" {
					c.errorf(diag.BadValue, f.ValOff, "", "file is empty")
				}
				s.File = v
			}
		case "collective":
			if v, ok := c.str(f); ok {
				coll, err := ir.ParseCollective(v)
				if err != nil {
					c.errorf(diag.UnknownCollective, f.ValOff, "", "%v", err)
				}
				s.Collective = coll
			}
		case "min_bytes":
			s.MinBytes, _ = c.integer(f, 0, math.MaxInt64)
		case "max_bytes":
			s.MaxBytes, _ = c.integer(f, 0, math.MaxInt64)
		case "inplace":
			if v, ok := c.boolean(f); ok {
				s.InPlace = &v
			}
		case "outofplace":
			if v, ok := c.boolean(f); ok {
				s.OutOfPlace = &v
			}
		case UsableProgramField:
			s.UsableProgram = c.program(f)
		case PreferenceProgramField:
			s.PreferenceProgram = c.program(f)
		default:
			if !c.commonField(&s, f, line, opt) {
				c.errorf(diag.UnknownField, f.KeyOff, "fields: file or gen (with protocol, channels, avoid), collective, nranks, nlocalranks, min_bytes, max_bytes, inplace, outofplace, usable, preference, usable_program, preference_program, replaces, valid_after, name, comment",
					"unknown field %q in a schedule entry", f.Key)
			}
		}
	}
	switch {
	case genF != nil && have["file"]:
		c.errorf(diag.BadValue, genF.KeyOff, "give a file or a generator, not both", "a schedule entry names both file and gen")
	case genF == nil && !have["file"]:
		c.errorf(diag.MissingField, 0, "name the schedule file, or a built-in generator with gen", "schedule entry lacks \"file\" (or \"gen\")")
	case genF == nil:
		for _, f := range []*field{protoF, chanF, avoidF} {
			if f != nil {
				c.errorf(diag.UnknownField, f.KeyOff, "protocol, channels and avoid are parameters of a generated entry (gen)",
					"%q in an entry without gen", f.Key)
			}
		}
	}
	for _, req := range []string{"collective", "nranks"} {
		if !have[req] && (req != "nranks" || genF == nil) {
			c.errorf(diag.MissingField, 0, "", "schedule entry lacks %q", req)
		}
	}
	if genF != nil && len(c.ds) == 0 {
		if gen.Canonical(g.Algorithm) == "" {
			c.errorf(diag.BadValue, genF.ValOff, "theseusc gen --list lists the algorithms and what they serve",
				"unknown generator %q", g.Algorithm)
		} else if !gen.Supports(g.Algorithm, s.Collective) {
			c.errorf(diag.BadValue, genF.ValOff, "theseusc gen --list lists the algorithms and what they serve",
				"generator %q does not serve %s", g.Algorithm, s.Collective)
		} else if err := gen.CheckOptions(g.Algorithm, gen.Options{Collective: s.Collective, Protocol: g.Protocol, Avoid: g.Avoid}); err != nil {
			c.errorf(diag.BadValue, genF.ValOff, "", "%v", err)
		}
		s.Gen = &g
	}
	if len(c.ds) == 0 && s.MaxBytes != 0 && s.MinBytes > s.MaxBytes {
		c.errorf(diag.BadWindow, 0, "", "min_bytes %d > max_bytes %d", s.MinBytes, s.MaxBytes)
	}
	if len(c.ds) == 0 && s.InPlace != nil && s.OutOfPlace != nil && !*s.InPlace && !*s.OutOfPlace {
		c.errorf(diag.NoArrangement, 0, "", "inplace and outofplace are both false")
	}
	return s, c.ds
}

// ParseValue decodes one line of the log of an exogenous attribute of type
// t: {"value": v, "valid_after": ...}. Errors: TS0001–TS0004, TS0304.
func ParseValue(file string, line int, text []byte, t bc.Type, opt Options) (ValueEntry, []diag.Diagnostic) {
	c := &lineCtx{file: file, line: line, text: text}
	e := ValueEntry{ValidAfter: Always}
	fs, ok := c.object()
	if !ok {
		return e, c.ds
	}
	haveValue := false
	for _, f := range fs {
		switch f.Key {
		case "value":
			haveValue = true
			e.Value, _ = c.value(f, t, opt.maxVec())
		case "valid_after":
			e.ValidAfter, _ = c.validAfter(f, opt.Location)
		case "comment":
		default:
			c.errorf(diag.UnknownField, f.KeyOff, "fields: value, valid_after, comment", "unknown field %q in a value entry", f.Key)
		}
	}
	if !haveValue {
		c.errorf(diag.MissingField, 0, "", "value entry lacks \"value\"")
	}
	return e, c.ds
}

// commonField decodes a field that schedule entries and "gen": "p2p"
// entries share (nranks, nlocalranks, usable, preference, replaces,
// valid_after, name, comment) into s, and reports whether f was one.
func (c *lineCtx) commonField(s *Schedule, f field, line int, opt Options) bool {
	switch f.Key {
	case "nranks":
		v, _ := c.integer(f, 1, ir.MaxRanks)
		s.NRanks = int(v)
	case "nlocalranks":
		v, _ := c.integer(f, 0, ir.MaxRanks)
		s.NLocalRanks = int(v)
	case "usable":
		s.Usable, _ = c.str(f)
		s.UsableCol = c.col(f.ValOff) + 1
	case "preference":
		s.Preference, _ = c.str(f)
		s.PreferenceCol = c.col(f.ValOff) + 1
	case "replaces":
		v, ok := c.integer(f, 0, math.MaxInt32)
		if ok && v >= int64(line-1) {
			c.errorf(diag.BadValue, f.ValOff, "a schedule can only replace an earlier entry", "replaces %d, but this entry's id is %d", v, line-1)
		}
		s.Replaces = int(v)
	case "valid_after":
		s.ValidAfter, _ = c.validAfter(f, opt.Location)
	case "name", "comment":
		if v, ok := c.str(f); ok && f.Key == "name" {
			s.Name = v
		}
	default:
		return false
	}
	return true
}
