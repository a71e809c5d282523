package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// compileContext precompiles the policies of the selection context in dir
// (theseusc compile --context): every schedule entry's usable and
// preference expressions are compiled against the attributes the
// attribute manifest declares, and the programs written into the entry
// (manifest.Precompile: usable_program, preference_program), as
// theseus-context publishes them. Lines that are not schedule entries
// (blank, malformed) are kept as they are, so no id moves. Nothing is
// written when any expression has an error, or with check, which only
// reports entries whose programs are missing or stale (an error each).
// The manifest is rewritten through a temporary file and a rename: do it
// before the context is in use, since a context in use is append-only.
func compileContext(dir string, check bool, s cli.Streams) error {
	sf := filepath.Join(dir, manifest.ScheduleManifest)
	data, err := os.ReadFile(sf)
	if errors.Is(err, fs.ErrNotExist) {
		return cli.Usagef("%s: no %s: not a selection context", dir, manifest.ScheduleManifest)
	}
	if err != nil {
		return cli.Usage(err)
	}
	attrs := policy.AttrMap{}
	var ds []diag.Diagnostic
	af := filepath.Join(dir, manifest.AttributeManifest)
	if err := eachLine(af, &ds, func(line int, text []byte) {
		a, dd := manifest.ParseAttribute(af, line, text, manifest.Options{})
		if _, dup := attrs[a.Name]; !verify.HasErrors(dd) && !dup {
			attrs[a.Name] = policy.Attr{Name: a.Name, Type: a.Type, Origin: a.Origin, Path: a.Path}
		}
	}); err != nil {
		return err
	}
	var out bytes.Buffer
	stale, done := 0, 0
	for n := 1; len(data) > 0; n++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 { // a torn last line is kept as it is
			out.Write(data)
			break
		}
		line := data[:i]
		data = data[i+1:]
		text := bytes.TrimSuffix(line, []byte("\r"))
		e, dd := manifest.ParseSchedule(sf, n, text, manifest.Options{})
		if len(bytes.TrimSpace(text)) == 0 || len(text) > manifest.MaxLineBytes || verify.HasErrors(dd) {
			out.Write(line)
			out.WriteByte('\n')
			continue
		}
		if check {
			for _, x := range []struct {
				field, src string
				bin        []byte
				want       policy.Want
			}{{manifest.UsableProgramField, e.Usable, e.UsableProgram, policy.WantBool},
				{manifest.PreferenceProgramField, e.Preference, e.PreferenceProgram, policy.WantNumber}} {
				if _, err := manifest.Verified(x.bin, x.src, attrs, policy.Options{Want: x.want}); err != nil {
					stale++
					ds = append(ds, diag.Diagnostic{Code: diag.BadValue, Severity: diag.Error, File: sf, Line: n, Col: manifest.FieldCol(text, x.field),
						Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("schedule %d: %s: %v", n-1, x.field, err), Hint: "run theseusc compile --context " + dir})
				}
			}
			continue
		}
		pre, dd := manifest.Precompile(sf, n, text, attrs, manifest.Options{})
		ds = append(ds, dd...)
		if pre == nil {
			out.Write(line)
		} else {
			out.Write(pre)
			if len(text) < len(line) {
				out.WriteByte('\r')
			}
			done++
		}
		out.WriteByte('\n')
	}
	ds = cli.Dedupe(ds)
	cli.PrintDiags(s.Err, ds)
	if cli.CountErrors(ds) > 0 {
		if check {
			fmt.Fprintf(s.Err, "compile --context: %s: %d program(s) missing or stale\n", dir, stale)
		} else {
			fmt.Fprintf(s.Err, "compile --context: %s: %s; nothing written\n", dir, summary(ds))
		}
		return cli.Findings()
	}
	if check {
		return nil
	}
	info, err := os.Stat(sf)
	if err != nil {
		return cli.Usage(err)
	}
	if err := writeFileAtomic(sf, out.Bytes(), info.Mode().Perm()); err != nil {
		return err
	}
	fmt.Fprintf(s.Err, "compile --context: %s: %d schedule entr%s precompiled\n", sf, done, map[bool]string{true: "y", false: "ies"}[done == 1])
	return nil
}
