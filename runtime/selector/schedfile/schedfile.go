// Package schedfile loads the schedules a selection context names and
// verifies them, for the selector (selector.ScheduleLoader and
// selector.RankLoader):
//
//   - .tsb: a compiled bundle (codegen/bundle), opened without reading its
//     sections (bundle.Open checks the format, every range and the ID over
//     the head); the calling rank's section is read and checked (its hash,
//     its table against the summary) and, when the bundle does not record
//     that it was verified where it was built, every other section too
//     with the cross-rank checks (Bundle.CheckTables). The bundle is the
//     Artifact the executor runs, and reads other ranks' sections on
//     demand;
//   - .json: Theseus schedule JSON v1 (compiler/frontends/schedjson), or an
//     MSCCL++ execution plan when the file is not Theseus JSON
//     (compiler/frontends/mscclpp);
//   - .xml: an MSCCL algorithm (compiler/frontends/msccl);
//   - .tir: the textual IR (ir/irtext);
//   - a generated entry (LoadFor with a selector.GenSpec): the built-in
//     generator's program for the communicator's shape, verified once per
//     shape and process, with only the tables of the ranks asked for
//     legalised and lowered (gen.go).
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

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

// DefaultMaxBytes bounds the size of a schedule file.
const DefaultMaxBytes = 256 << 20

// Loader implements selector.ScheduleLoader and selector.RankLoader. The
// zero Loader is ready.
type Loader struct {
	// MaxBytes bounds the size in bytes of a source file (0:
	// DefaultMaxBytes); a bundle is opened whatever its size, since only its
	// head and the sections asked for are read.
	MaxBytes int64
	// Rank is the rank whose section Load reads and checks first (LoadFor
	// takes the request's).
	Rank int
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

// Load reads, parses and verifies path for rank l.Rank (see LoadFor).
// Errors: a missing file wraps fs.ErrNotExist (the selector retries it
// later); a source file over MaxBytes, an unknown extension, a malformed or
// invalid bundle, or an *Error with the diagnostics of a schedule that fails
// to parse or verify.
func (l Loader) Load(path string) (*selector.ScheduleInfo, error) {
	return l.loadFile(path, l.Rank)
}

// LoadFor implements selector.RankLoader: a file entry is loaded as Load
// does, for req.Rank; a generated entry is built for req's shape
// (generated). Errors: Load's, or a generator's failure for the shape.
func (l Loader) LoadFor(req selector.LoadRequest) (*selector.ScheduleInfo, error) {
	if req.Gen != nil {
		return generated(req)
	}
	return l.loadFile(req.Path, req.Rank)
}

func (l Loader) loadFile(path string, rank int) (*selector.ScheduleInfo, error) {
	if err := CheckExt(path); err != nil {
		if _, serr := os.Stat(path); serr != nil {
			return nil, serr
		}
		return nil, err
	}
	if strings.EqualFold(filepath.Ext(path), ".tsb") {
		return openBundle(path, rank)
	}
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
	src := load.Parse(path, load.Detect(path, data), data)
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

// openBundle opens the bundle at path and checks what rank runs: its
// section (hash, table against the summary); and, unless the bundle records
// that it was verified where it was built, every section with the
// cross-rank checks (CheckTables).
func openBundle(path string, rank int) (*selector.ScheduleInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	b, err := bundle.Open(fileAt(path), st.Size())
	if errors.Is(err, bundle.ErrFormat) || errors.Is(err, bundle.ErrVersion) || errors.Is(err, bundle.ErrChecksum) {
		return nil, &Error{Path: path, Diags: []diag.Diagnostic{load.BundleDiag(path, err)}}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case !b.Verified:
		err = b.CheckTables()
	case rank >= 0 && rank < b.Meta.NRanks:
		_, err = b.Table(rank)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return bundleInfo(b), nil
}

// bundleInfo describes a bundle for the selector.
func bundleInfo(b *bundle.Bundle) *selector.ScheduleInfo {
	m := b.Meta
	return &selector.ScheduleInfo{Collective: m.Collective, NRanks: m.NRanks, NLocalRanks: m.NLocalRanks,
		MinBytes: m.MinBytes, MaxBytes: m.MaxBytes, InPlace: m.InPlace, OutOfPlace: m.OutOfPlace,
		Protocol: m.Protocol, Artifact: b}
}

// fileAt reads a bundle file by path: each ReadAt opens it, so an opened
// bundle holds no file descriptor between the sections it reads (schedule
// files are append-only, never rewritten; each section's hash is checked).
type fileAt string

func (p fileAt) ReadAt(b []byte, off int64) (int, error) {
	f, err := os.Open(string(p))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(b, off)
}
