package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

// lintContext lints a selection context directory (docs/selection-context.md)
// as a publisher would check it, all at once rather than as it grows:
//
//   - every line of attribute_manifest.jsonl (manifest.ParseAttribute; a
//     second declaration of a name is TS0010);
//   - every line of schedule_manifest.jsonl (manifest.ParseSchedule), and
//     its usable and preference expressions compiled against every
//     attribute the manifest declares (policy.Compile: syntax, types,
//     and the TS0212 warning of a policy that reads a rank-local
//     attribute and so costs an agreement step);
//   - every schedule file the entries name, linted like any input (a
//     missing file is a warning: the runtime waits for it), and every
//     entry against its file: a collective, nranks, nlocalranks,
//     arrangement or window the file contradicts (selector.Contradiction)
//     is an error at the entry's field, since the runtime excludes the
//     entry;
//   - every generated entry's program (gen, docs/selection-context.md
//     §5.1) built and verified at the shapes it serves among its own
//     nranks (if it gives one) or 1, 2, 3, 4, 8 and 16 ranks on one node
//     and 4, 6, 8 and 16 ranks on two nodes; an error is reported at the entry's
//     gen field;
//   - every line of the value log of each exogenous attribute.
//
// A "gen": "p2p" entry (the point-to-point engine's parameters) has no
// program: its fields and expressions are all there is to check.
//
// Blank lines and a torn last line (no newline yet) are skipped, as the
// runtime does.
func lintContext(dir string, vo verify.Options) ([]diag.Diagnostic, error) {
	if err := cli.CheckContextDir(dir); err != nil {
		return nil, err
	}
	var ds []diag.Diagnostic
	mopt := manifest.Options{}
	attrs := policy.AttrMap{}
	var exo []manifest.Attribute
	af := filepath.Join(dir, manifest.AttributeManifest)
	err := eachLine(af, &ds, func(line int, text []byte) {
		a, dd := manifest.ParseAttribute(af, line, text, mopt)
		ds = append(ds, dd...)
		if verify.HasErrors(dd) {
			return
		}
		if _, dup := attrs[a.Name]; dup {
			ds = append(ds, diag.Diagnostic{Code: diag.DuplicateID, Severity: diag.Error, File: af, Line: line, Col: 1,
				Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("attribute %q is declared again; the first declaration stands", a.Name),
				Hint: "give the attribute another name, or delete this line"})
			return
		}
		attrs[a.Name] = policy.Attr{Name: a.Name, Type: a.Type, Origin: a.Origin, Path: a.Path}
		if a.Origin == bc.Exo {
			exo = append(exo, a)
		}
	})
	if err != nil {
		return nil, err
	}
	sf := filepath.Join(dir, manifest.ScheduleManifest)
	infos := map[string]*selector.ScheduleInfo{} // per file linted; nil when it does not load
	err = eachLine(sf, &ds, func(line int, text []byte) {
		s, dd := manifest.ParseSchedule(sf, line, text, mopt)
		ds = append(ds, dd...)
		if verify.HasErrors(dd) {
			return
		}
		_, du := policy.Compile(s.Usable, attrs, policy.Options{Want: policy.WantBool, File: sf, Line: line, Col: s.UsableCol})
		_, dp := policy.Compile(s.Preference, attrs, policy.Options{Want: policy.WantNumber, File: sf, Line: line, Col: s.PreferenceCol})
		ds = append(append(ds, du...), dp...)
		// A precompiled program that is not what its text compiles to (or
		// is stale) is not run: the runtime compiles the text instead.
		for _, x := range []struct {
			field, src string
			bin        []byte
			want       policy.Want
		}{{manifest.UsableProgramField, s.Usable, s.UsableProgram, policy.WantBool},
			{manifest.PreferenceProgramField, s.Preference, s.PreferenceProgram, policy.WantNumber}} {
			if len(x.bin) == 0 {
				continue
			}
			if _, err := manifest.Verified(x.bin, x.src, attrs, policy.Options{Want: x.want}); err != nil {
				ds = append(ds, diag.Diagnostic{Code: diag.BadValue, Severity: diag.Warning, File: sf, Line: line, Col: manifest.FieldCol(text, x.field),
					Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("schedule %d: %s is not used (%v); the runtime compiles the text", line-1, x.field, err),
					Hint: "run theseusc compile --context " + dir})
			}
		}
		if s.P2P != nil {
			return // the point-to-point engine's parameters: no program (ParseSchedule checked them)
		}
		if s.Gen != nil {
			prog, k, dc := selector.CompileChannels(s.Gen, attrs, sf, line, 0)
			ds = append(ds, dc...)
			if prog != nil || k != 0 {
				ds = append(ds, lintGenerated(&s, prog, k, sf, line, vo)...)
			}
			return
		}
		path := s.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		info, linted := infos[path]
		if !linted {
			info, ds = lintScheduleFile(path, sf, line, vo, ds)
			infos[path] = info
		}
		if info == nil {
			return
		}
		// The runtime excludes an entry whose file contradicts it
		// (docs/selection-context.md §5.3): report it at the field.
		if field, why := selector.Contradiction(&s, info); why != "" {
			code := diag.BadValue
			if field == "min_bytes" || field == "max_bytes" {
				code = diag.BadWindow
			}
			ds = append(ds, diag.Diagnostic{Code: code, Severity: diag.Error, File: sf, Line: line,
				Col: manifest.FieldCol(text, field), Rank: -1, TB: -1, Step: -1,
				Msg:  fmt.Sprintf("schedule %d: %s; the runtime excludes this entry", line-1, why),
				Hint: "make the entry's " + field + " agree with " + filepath.Base(path)})
		}
	})
	if err != nil {
		return nil, err
	}
	for _, a := range exo {
		lf := filepath.Join(dir, a.Name+manifest.LogSuffix)
		err := eachLine(lf, &ds, func(line int, text []byte) {
			_, dd := manifest.ParseValue(lf, line, text, a.Type, mopt)
			ds = append(ds, dd...)
		})
		if err != nil {
			return nil, err
		}
	}
	return cli.Dedupe(ds), nil
}

// lintShapes are the (nranks, nlocalranks) lint builds a generated entry
// for when the entry names no nranks.
var lintShapes = [][2]int{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {8, 8}, {16, 16}, {4, 2}, {6, 3}, {8, 4}, {16, 8}}

// lintGenerated builds generated entry s (line of manifest sf) at the
// shapes it serves and verifies each program; its channels (CompileChannels'
// prog or literal k) must evaluate at each of them, as the runtime
// evaluates them (selector.ChannelsAt).
func lintGenerated(s *manifest.Schedule, prog *bc.Program, k int, sf string, line int, vo verify.Options) []diag.Diagnostic {
	shapes := lintShapes
	if s.NRanks != 0 {
		l := s.NLocalRanks
		if l == 0 {
			l = s.NRanks
		}
		shapes = [][2]int{{s.NRanks, l}}
	}
	at := func(sev diag.Severity, code diag.Code, hint, format string, args ...any) diag.Diagnostic {
		return diag.Diagnostic{Code: code, Severity: sev, File: sf, Line: line, Col: s.Gen.Col, Rank: -1, TB: -1, Step: -1,
			Msg: fmt.Sprintf("schedule %d: ", line-1) + fmt.Sprintf(format, args...), Hint: hint}
	}
	var ds, faults []diag.Diagnostic
	served := 0
	for _, sh := range shapes {
		o := gen.Options{Collective: s.Collective, NRanks: sh[0], Protocol: s.Gen.Protocol, Avoid: s.Gen.Avoid}
		if gen.Canonical(s.Gen.Algorithm) == "hier" {
			o.NLocalRanks = sh[1]
		}
		if gen.Check(s.Gen.Algorithm, o) != nil {
			continue // the runtime does not match the entry there
		}
		served++
		if _, err := selector.ChannelsAt(s.Gen, prog, k, sh[0], sh[1]); err != nil {
			d := at(diag.Warning, diag.BadValue, "make the channels expression valid at every shape the entry serves",
				"%s at %d ranks (%d per node): %v; the runtime excludes the entry there", s.Gen, sh[0], sh[1], err)
			d.Col = s.Gen.ChannelsCol
			faults = append(faults, d)
			continue
		}
		p, err := gen.Generate(s.Gen.Algorithm, o)
		if err != nil {
			ds = append(ds, at(diag.Error, diag.BadValue, "the runtime excludes the entry for such communicators",
				"%s at %d ranks (%d per node): %v", s.Gen, sh[0], sh[1], err))
			continue
		}
		for _, d := range verify.Verify(p, vo) {
			if d.Severity == diag.Error {
				ds = append(ds, at(diag.Error, d.Code, "a generator bug: report it", "%s at %d ranks (%d per node): %s", s.Gen, sh[0], sh[1], d.Msg))
				break
			}
		}
	}
	// Channels that fault at some shapes exclude the entry there (a
	// warning); at every shape it serves, the entry serves nothing (an
	// error).
	if len(faults) > 0 && len(faults) == served {
		f := faults[0]
		f.Severity = diag.Error
		if served > 1 {
			f.Msg += fmt.Sprintf(", and at the %d other shapes lint builds: it serves nothing", served-1)
		}
		faults = []diag.Diagnostic{f}
	}
	ds = append(ds, faults...)
	if served == 0 && len(shapes) > 1 {
		ds = append(ds, at(diag.Warning, diag.BadValue, "give nranks (and nlocalranks) to lint it at a shape it serves",
			"%s serves none of the shapes lint builds (1-16 ranks)", s.Gen))
	}
	return ds
}

// lintScheduleFile lints the schedule file at path, named by line of the
// schedule manifest sf, appending its diagnostics to ds. It returns what the
// runtime's loader would learn from it (nil when the file is missing, does
// not load, or has errors, which the runtime excludes anyway).
func lintScheduleFile(path, sf string, line int, vo verify.Options, ds []diag.Diagnostic) (*selector.ScheduleInfo, []diag.Diagnostic) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, append(ds, diag.Diagnostic{Code: diag.BadValue, Severity: diag.Warning, File: sf, Line: line, Col: 1,
			Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("schedule %d: file %s does not exist (yet)", line-1, path),
			Hint: "publish the schedule file before its manifest entry"})
	}
	if err := schedfile.CheckExt(path); err != nil { // the runtime's rule: it does not load such a file
		return nil, append(ds, diag.Diagnostic{Code: diag.BadValue, Severity: diag.Error, File: sf, Line: line, Col: 1,
			Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("schedule %d: %v; the runtime excludes this entry", line-1, err),
			Hint: "name a schedule file ending in .json, .xml, .tsb or .tir"})
	}
	src, err := cli.Load(path, nil)
	if err != nil {
		return nil, append(ds, cli.FileDiag(path, diag.BadValue, diag.Error, err.Error(), "name a schedule file (.json, .xml, .tsb)"))
	}
	sd, err := lintSource(src, vo)
	if err != nil {
		return nil, append(ds, cli.FileDiag(path, diag.BadValue, diag.Error, err.Error(), ""))
	}
	ds = append(ds, sd...)
	if verify.HasErrors(sd) {
		return nil, ds
	}
	switch {
	case src.Bundle != nil:
		m := src.Bundle.Meta
		return &selector.ScheduleInfo{Collective: m.Collective, NRanks: m.NRanks, NLocalRanks: m.NLocalRanks,
			MinBytes: m.MinBytes, MaxBytes: m.MaxBytes, InPlace: m.InPlace, OutOfPlace: m.OutOfPlace}, ds
	case src.Program != nil:
		return selector.InfoOf(src.Program), ds
	}
	return nil, ds
}

// eachLine calls f with every complete, non-blank line of path (1-based
// line numbers); a missing file has no lines. A line longer than
// manifest.MaxLineBytes is reported in ds and skipped, as the runtime
// skips it.
func eachLine(path string, ds *[]diag.Diagnostic, f func(line int, text []byte)) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return cli.Usage(err)
	}
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil // a torn last line: not an entry yet
		}
		line := bytes.TrimSuffix(data[:i], []byte("\r"))
		data = data[i+1:]
		if len(line) > manifest.MaxLineBytes {
			*ds = append(*ds, manifest.TooLong(path, n)) // the runtime skips it (manifest.Tail)
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			f(n, line)
		}
	}
	return nil
}
