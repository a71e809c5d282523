// Package schedfile loads the schedule files a selection context names and
// verifies them, for the selector (selector.ScheduleLoader):
//
//   - .tsb: a compiled bundle (codegen/bundle), whose Decode checks the
//     format, every range and both hashes; the bundle is the Artifact the
//     executor runs;
//   - .json: Theseus schedule JSON v1 (compiler/frontends/schedjson), or an
//     MSCCL++ execution plan when the file is not Theseus JSON
//     (compiler/frontends/mscclpp);
//   - .xml: an MSCCL algorithm (compiler/frontends/msccl);
//   - .tir: the textual IR (ir/irtext).
//
// Formats are told and parsed by compiler/load, as theseusc does.
//
// Source formats are proven by compiler/verify (structure, synchronisation,
// deadlock freedom, races and the collective's postcondition) before they
// are accepted; a file with any error diagnostic is rejected with those
// diagnostics.
package schedfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

// DefaultMaxBytes bounds the size of a schedule file.
const DefaultMaxBytes = 256 << 20

// Loader implements selector.ScheduleLoader. The zero Loader is ready.
type Loader struct {
	// MaxBytes bounds a file's size in bytes (0: DefaultMaxBytes).
	MaxBytes int64
}

// Error is a schedule file that failed to parse or verify.
type Error struct {
	Path  string
	Diags []diag.Diagnostic // the error diagnostics, sorted by position
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s fails verification", e.Path)
	for i, d := range e.Diags {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Diags)-3)
			break
		}
		b.WriteString("; ")
		b.WriteString(d.String())
	}
	return b.String()
}

func errorsOf(path string, ds []diag.Diagnostic) error {
	var errs []diag.Diagnostic
	for _, d := range ds {
		if d.Severity == diag.Error {
			errs = append(errs, d)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &Error{Path: path, Diags: errs}
}

// CheckExt is nil when path names a file the runtime loads as a schedule
// (by extension: .tsb, .json, .xml or .tir, any case), and otherwise the
// error Load returns for it. theseusc lint applies the same rule.
func CheckExt(path string) error {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".tsb", ".json", ".xml", ".tir":
		return nil
	default:
		return fmt.Errorf("%s: unknown schedule file extension %q (want .tsb, .json, .xml or .tir)", path, ext)
	}
}

// Load reads, parses and verifies path. Errors: a missing file wraps
// fs.ErrNotExist (the selector retries it later); a file over MaxBytes, an
// unknown extension, a malformed or invalid bundle, or an *Error with the
// diagnostics of a schedule that fails to parse or verify.
func (l Loader) Load(path string) (*selector.ScheduleInfo, error) {
	limit := l.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	if err := CheckExt(path); err != nil {
		return nil, err
	}
	src := load.Parse(path, load.Detect(path, data), data)
	if b := src.Bundle; b != nil {
		// Decode checked the container; the executor runs the op tables, so
		// check every rank's table against the metadata and the others too
		// (a bundle from an older table format is excluded here, not at
		// launch).
		if err := b.CheckTables(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		m := b.Meta
		return &selector.ScheduleInfo{Collective: m.Collective, NRanks: m.NRanks, NLocalRanks: m.NLocalRanks,
			MinBytes: m.MinBytes, MaxBytes: m.MaxBytes, InPlace: m.InPlace, OutOfPlace: m.OutOfPlace,
			Protocol: m.Protocol, Artifact: b}, nil
	}
	p, ds := src.Program, src.Diags
	if err := errorsOf(path, ds); err != nil || p == nil {
		if err == nil {
			err = errors.New(path + ": no schedule")
		}
		return nil, err
	}
	if err := errorsOf(path, verify.Verify(p, verify.Options{})); err != nil {
		return nil, err
	}
	return selector.InfoOf(p), nil
}
