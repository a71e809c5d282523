package manifest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/diag"
)

// Precompiled policies (docs/selection-context.md §5.1): a schedule entry
// may carry, beside the source text of its usable and preference
// expressions, the programs compiled from them, as the standard padded
// base64 of bytecode.Marshal. theseus-context writes them when it publishes
// (`theseus-context new sched`), `theseusc compile --context DIR` writes
// them into a hand-written context. The runtime uses such a program in
// place of compiling the text when Program and CheckImports accept it, and
// compiles the text otherwise: the text stays authoritative, so a program
// that is missing, from another format version, or stale (compiled from
// other text, or against attributes declared differently) costs only the
// compilation it would have saved.
const (
	UsableProgramField     = "usable_program"
	PreferenceProgramField = "preference_program"
)

// ErrNoProgram is Program's error when the entry carries no program.
var ErrNoProgram = errors.New("no precompiled program")

// Program returns the precompiled program bin (the decoded bytes of a
// usable_program or preference_program field) when the runtime may run it
// in place of compiling src: it decodes and verifies (bytecode.Unmarshal
// runs bytecode.Verify), it was compiled from exactly src, its result type
// is what want requires (bool for WantBool, int or float for WantNumber),
// and none of its vector constants is longer than maxVec
// (THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH; 0: policy.DefaultMaxVectorLen), as
// the compiler would enforce on the text. Otherwise the error says why
// (ErrNoProgram when bin is empty). The imports are checked separately,
// against the attribute manifest (CheckImports).
func Program(bin []byte, src string, want policy.Want, maxVec int) (*bc.Program, error) {
	if len(bin) == 0 {
		return nil, ErrNoProgram
	}
	p, err := bc.Unmarshal(bin)
	if err != nil {
		return nil, err
	}
	if p.Source != src {
		return nil, fmt.Errorf("the program was compiled from %q, the entry's text is %q", p.Source, src)
	}
	switch {
	case want == policy.WantBool && p.Result != bc.Bool:
		return nil, fmt.Errorf("the program yields %s, a usability expression must be bool", p.Result)
	case want == policy.WantNumber && !p.Result.Numeric():
		return nil, fmt.Errorf("the program yields %s, a preference must be int or float", p.Result)
	}
	if maxVec <= 0 {
		maxVec = policy.DefaultMaxVectorLen
	}
	for _, v := range p.Vecs {
		if len(v) > maxVec {
			return nil, fmt.Errorf("a vector constant of %d elements is over THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=%d", len(v), maxVec)
		}
	}
	return p, nil
}

// CheckImports reports whether every attribute program p reads is declared
// in attrs with the same type and origin (and, for endo attributes, the
// same request path): the link the selector makes when it loads p. The
// error names the first that is not.
func CheckImports(p *bc.Program, attrs policy.Attrs) error {
	for _, im := range p.Imports {
		a, ok := attrs.LookupAttr(im.Name)
		switch {
		case !ok:
			return fmt.Errorf("attribute %q is not declared", im.Name)
		case a.Type != im.Type || a.Origin != im.Origin || im.Origin == bc.Endo && a.Path != im.Path:
			return fmt.Errorf("attribute %q is declared %s %s, the program was compiled for %s %s", im.Name, a.Origin, a.Type, im.Origin, im.Type)
		}
	}
	return nil
}

// Verified returns the precompiled program bin for expression src when
// the runtime may run it: Program accepts it (opt.Want, opt.MaxVectorLen),
// CheckImports accepts its imports against attrs, and it is byte for byte
// what src compiles to against attrs with this build's compiler
// (bytecode.Marshal of policy.Compile's program). The last check ties the
// program's code to the text a reviewer reads (the text is
// authoritative): a hand-edited or forged program, one from another build
// of the compiler, or one whose text does not compile is refused, with
// the reason. A compilation of a policy costs microseconds.
func Verified(bin []byte, src string, attrs policy.Attrs, opt policy.Options) (*bc.Program, error) {
	p, err := Program(bin, src, opt.Want, opt.MaxVectorLen)
	if err != nil {
		return nil, err
	}
	if err := CheckImports(p, attrs); err != nil {
		return nil, err
	}
	q, ds := policy.Compile(src, attrs, opt)
	if q == nil {
		why := "it has errors"
		for _, d := range ds {
			if d.Severity == diag.Error {
				why = d.Msg
				break
			}
		}
		return nil, fmt.Errorf("its text does not compile (%s)", why)
	}
	if !bytes.Equal(bin, bc.Marshal(q)) {
		return nil, errors.New("the program is not what its text compiles to (hand-edited or forged, or from another build of the compiler)")
	}
	return p, nil
}

// EncodeProgram is the JSON string value of a program field: the quoted
// standard base64 of bytecode.Marshal(p).
func EncodeProgram(p *bc.Program) json.RawMessage {
	raw, _ := json.Marshal(base64.StdEncoding.EncodeToString(bc.Marshal(p)))
	return raw
}

// program reads a program field's value: a string of standard padded
// base64.
func (c *lineCtx) program(f field) []byte {
	s, ok := c.str(f)
	if !ok {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		c.errorf(diag.BadValue, f.ValOff, "write the program as theseus-context or theseusc compile --context does (base64 of the bytecode), or delete the field",
			"%s is not a base64 program", f.Key)
		return nil
	}
	return b
}

// Precompile compiles both expressions of schedule manifest line number
// line (1-based) of file against attrs and returns the line with its
// usable_program and preference_program fields set: a field already present
// gets the new value in place, a missing one is added at the end; every
// other byte of the line is kept. ds holds the line's and the compiler's
// diagnostics (warnings such as TS0212 included); out is nil when any is an
// error.
func Precompile(file string, line int, text []byte, attrs policy.Attrs, opt Options) (out []byte, ds []diag.Diagnostic) {
	s, ds := ParseSchedule(file, line, text, opt)
	if len(ds) > 0 {
		return nil, ds
	}
	u, du := policy.Compile(s.Usable, attrs, policy.Options{Want: policy.WantBool, File: file, Line: line, Col: s.UsableCol, MaxVectorLen: opt.MaxVectorLen})
	p, dp := policy.Compile(s.Preference, attrs, policy.Options{Want: policy.WantNumber, File: file, Line: line, Col: s.PreferenceCol, MaxVectorLen: opt.MaxVectorLen})
	ds = append(du, dp...)
	if u == nil || p == nil {
		return nil, ds
	}
	out, err := SetFields(text, []string{UsableProgramField, PreferenceProgramField}, []json.RawMessage{EncodeProgram(u), EncodeProgram(p)})
	if err != nil { // unreachable: ParseSchedule accepted the line
		return nil, append(ds, diag.Diagnostic{Code: diag.Syntax, Severity: diag.Error, File: file, Line: line, Col: 1,
			Rank: -1, TB: -1, Step: -1, Msg: err.Error(), Hint: "report this as a Theseus bug"})
	}
	return out, ds
}

// SetFields returns a copy of the one-line JSON object text with field
// keys[i] set to the JSON value vals[i]: an existing member's value is
// replaced where it stands, a missing member is appended before the
// closing brace. Every other byte is kept. The error is a line that is not
// one well-formed JSON object.
func SetFields(text []byte, keys []string, vals []json.RawMessage) ([]byte, error) {
	c := &lineCtx{text: text}
	fs, ok := c.object()
	if !ok {
		return nil, fmt.Errorf("not a JSON object: %s", c.ds[0].Msg)
	}
	type edit struct {
		from, to int
		val      json.RawMessage
	}
	var edits []edit
	var add bytes.Buffer
	for i, k := range keys {
		found := false
		for _, f := range fs {
			if f.Key == k {
				edits = append(edits, edit{f.ValOff, f.ValOff + len(f.Raw), vals[i]})
				found = true
			}
		}
		if !found {
			if len(fs) > 0 || add.Len() > 0 {
				add.WriteByte(',')
			}
			kq, _ := json.Marshal(k)
			add.Write(kq)
			add.WriteByte(':')
			add.Write(vals[i])
		}
	}
	end := bytes.LastIndexByte(text, '}') // object() proved it is the closing brace
	var out []byte
	at := 0
	for len(edits) > 0 {
		// Apply the edits in position order.
		j := 0
		for i := range edits {
			if edits[i].from < edits[j].from {
				j = i
			}
		}
		e := edits[j]
		edits = append(edits[:j], edits[j+1:]...)
		out = append(append(out, text[at:e.from]...), e.val...)
		at = e.to
	}
	out = append(out, text[at:end]...)
	out = append(out, add.Bytes()...)
	return append(out, text[end:]...), nil
}
