// Package load tells the format of a schedule file and parses it with the
// matching frontend: Theseus schedule JSON (compiler/frontends/schedjson),
// MSCCL XML (compiler/frontends/msccl), MSCCL++ plans
// (compiler/frontends/mscclpp), the textual IR (ir/irtext) or a compiled
// bundle (codegen/bundle). theseusc and the selector's schedule loader
// (runtime/selector/schedfile) both read schedules through it.
package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/frontends/msccl"
	"github.com/theseus-ccl/theseus/compiler/frontends/mscclpp"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

// Kind is the format of a schedule file.
type Kind uint8

const (
	KindUnknown Kind = iota
	// KindTheseus is Theseus schedule JSON v1 (docs/schedule-format.md):
	// a JSON object with a top-level "version" key.
	KindTheseus
	// KindMSCCL is an MSCCL XML algorithm (msccl-tools, TACCL, TE-CCL, RCCL).
	KindMSCCL
	// KindMSCCLPP is an MSCCL++ execution plan (v0.7 or v0.8+): a JSON
	// object with a top-level "gpus" key and no "version".
	KindMSCCLPP
	// KindIRText is the textual IR (docs/ir-text.md).
	KindIRText
	// KindBundle is a compiled .tsb bundle (docs/bundle.md).
	KindBundle
	// KindContext is a selection context directory
	// (docs/selection-context.md); Detect never returns it.
	KindContext
)

var kindNames = [...]string{"unknown", "theseus-json", "msccl-xml", "mscclpp-json", "ir-text", "bundle", "selection-context"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("unknown input format %q", b)
}

// MaxInputBytes bounds what Load reads of one file (bytes); the frontends
// report a larger file as TS0011 (diag.TooLarge) from the bytes read.
const MaxInputBytes = 256 << 20

// Detect tells the format of a schedule file from its name and contents:
//
//   - by extension: .tsb is a bundle, .tir textual IR, .xml MSCCL XML, and
//     .json Theseus JSON when its top-level object has a "version" key, an
//     MSCCL++ plan when it has "gpus" but no "version", and Theseus JSON
//     otherwise (so that a Theseus file without its version is told so);
//   - any other name (and "-", standard input), by contents: the bundle
//     magic, then the first non-blank byte ('<' XML, '{' JSON as above,
//     a letter or '#' textual IR).
//
// It returns KindUnknown when neither tells.
func Detect(name string, data []byte) Kind {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".tsb":
		return KindBundle
	case ".tir":
		return KindIRText
	case ".xml":
		return KindMSCCL
	case ".json":
		return jsonKind(data)
	}
	if bytes.HasPrefix(data, []byte(bundle.Magic)) {
		return KindBundle
	}
	t := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(t) == 0 {
		return KindUnknown
	}
	switch c := t[0]; {
	case c == '<':
		return KindMSCCL
	case c == '{':
		return jsonKind(data)
	case c == '#' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return KindIRText
	}
	return KindUnknown
}

// jsonKind looks at the top-level keys of a JSON object. When the JSON is
// malformed before the answer is known, the raw bytes decide: a "version"
// key anywhere means Theseus JSON, else a "gpus" key an MSCCL++ plan.
func jsonKind(data []byte) Kind {
	dec := json.NewDecoder(bytes.NewReader(data))
	hasGPUs := false
	fallback := func() Kind {
		switch {
		case bytes.Contains(data, []byte(`"version"`)):
			return KindTheseus
		case hasGPUs || bytes.Contains(data, []byte(`"gpus"`)):
			return KindMSCCLPP
		}
		return KindTheseus
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fallback()
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fallback()
		}
		key, _ := tok.(string)
		switch key {
		case "version":
			return KindTheseus
		case "gpus":
			hasGPUs = true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fallback()
		}
	}
	if hasGPUs {
		return KindMSCCLPP
	}
	return KindTheseus
}

// Source is one schedule file, read and parsed.
type Source struct {
	// Path is the name the user gave ("-" for standard input).
	Path string
	Kind Kind
	Data []byte
	// Program is the parsed program: nil when parsing failed, and for a
	// bundle without embedded source. For a bundle with source it is the
	// source program (the input the bundle was compiled from).
	Program *ir.Program
	// Bundle is the decoded bundle (KindBundle only; nil when malformed).
	Bundle *bundle.Bundle
	// Diags are the frontend's diagnostics (errors, warnings, notes).
	Diags []diag.Diagnostic
}

// HasErrors reports whether the frontend found errors.
func (s *Source) HasErrors() bool {
	for _, d := range s.Diags {
		if d.Severity == diag.Error {
			return true
		}
	}
	return false
}

// Parse parses data, the contents of file name, as format k.
func Parse(name string, k Kind, data []byte) *Source {
	s := &Source{Path: name, Kind: k, Data: data}
	switch k {
	case KindTheseus:
		s.Program, s.Diags = schedjson.Parse(name, data)
	case KindMSCCL:
		s.Program, s.Diags = msccl.Parse(name, data)
	case KindMSCCLPP:
		s.Program, s.Diags = mscclpp.Parse(name, data)
	case KindIRText:
		s.Program, s.Diags = irtext.Parse(name, data)
	case KindBundle:
		s.parseBundle()
	default:
		s.Diags = []diag.Diagnostic{FileDiag(name, diag.Syntax, diag.Error, "unknown input format", "")}
	}
	if s.HasErrors() {
		s.Program = nil
	}
	return s
}

// SourceSuffix is appended to a bundle's path in the diagnostics of its
// embedded source.
const SourceSuffix = "#source"

// BundleDiag is the diagnostic for a bundle at path that codegen/bundle
// refuses with err: BadVersion for another format version,
// else Syntax, both with a hint to rebuild it.
func BundleDiag(path string, err error) diag.Diagnostic {
	code := diag.Syntax
	hint := "rebuild the bundle with theseusc compile"
	if errors.Is(err, bundle.ErrVersion) {
		code = diag.BadVersion
		hint = fmt.Sprintf("this theseusc reads bundle version %d; recompile the schedule", bundle.Version)
	}
	return FileDiag(path, code, diag.Error, err.Error(), hint)
}

func (s *Source) parseBundle() {
	b, err := bundle.Decode(s.Data)
	if err != nil {
		s.Diags = append(s.Diags, BundleDiag(s.Path, err))
		return
	}
	s.Bundle = b
	if b.Source == nil {
		return
	}
	p, ds := irtext.Parse(s.Path+SourceSuffix, b.Source)
	s.Program = p
	s.Diags = append(s.Diags, ds...)
}

// FileDiag returns a diagnostic about a whole file (no position, rank,
// threadblock or step).
func FileDiag(file string, code diag.Code, sev diag.Severity, msg, hint string) diag.Diagnostic {
	return diag.Diagnostic{Code: code, Severity: sev, File: file, Rank: -1, TB: -1, Step: -1, Msg: msg, Hint: hint}
}
