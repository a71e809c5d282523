package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/diag"
)

// The formats and parsing live in compiler/load (shared with the
// selector's schedule loader); these names keep theseusc's code short.
type (
	Kind   = load.Kind
	Source = load.Source
)

const (
	KindUnknown   = load.KindUnknown
	KindTheseus   = load.KindTheseus
	KindMSCCL     = load.KindMSCCL
	KindMSCCLPP   = load.KindMSCCLPP
	KindIRText    = load.KindIRText
	KindBundle    = load.KindBundle
	KindContext   = load.KindContext
	MaxInputBytes = load.MaxInputBytes
	SourceSuffix  = load.SourceSuffix
)

// Detect tells the format of a schedule file (load.Detect).
func Detect(name string, data []byte) Kind { return load.Detect(name, data) }

// Parse parses data as format k (load.Parse).
func Parse(name string, k Kind, data []byte) *Source { return load.Parse(name, k, data) }

// FileDiag returns a diagnostic about a whole file (load.FileDiag).
func FileDiag(file string, code diag.Code, sev diag.Severity, msg, hint string) diag.Diagnostic {
	return load.FileDiag(file, code, sev, msg, hint)
}

// Load reads path ("-" reads stdin), detects its format (Detect) and parses
// it with the matching frontend: schedjson, msccl, mscclpp, irtext or
// bundle.Decode. Problems with the contents are diagnostics in the Source;
// the error is a usage error (ExitUsage) for a file that cannot be read or
// whose format cannot be told.
func Load(path string, stdin io.Reader) (*Source, error) {
	var r io.Reader
	if path == "-" {
		if stdin == nil {
			return nil, Usagef("-: no standard input")
		}
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, Usage(err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err == nil && st.IsDir() {
			return nil, Usagef("%s is a directory", path)
		}
		if err == nil && st.Mode().IsRegular() && st.Size() > MaxInputBytes && !strings.EqualFold(filepath.Ext(path), ".tsb") {
			// Its real size, not the limit plus the one byte a bounded read
			// takes to notice it.
			return &Source{Path: path, Diags: []diag.Diagnostic{FileDiag(path, diag.TooLarge, diag.Error,
				fmt.Sprintf("file of %d bytes, more than the %d bytes (%d MiB) theseusc and the runtime read of a schedule file", st.Size(), MaxInputBytes, MaxInputBytes>>20),
				"split the schedule, or name a generator in the selection context instead of a file")}}, nil
		}
		if err == nil && st.Mode().IsRegular() && strings.EqualFold(filepath.Ext(path), ".tsb") {
			// A bundle is read whole (the runtime opens it and reads one
			// rank's section; a 1024-rank ring's is 571 MB).
			data, err := io.ReadAll(f)
			if err != nil {
				return nil, Usage(fmt.Errorf("reading %s: %w", path, err))
			}
			return Parse(path, KindBundle, data), nil
		}
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxInputBytes+1))
	if err != nil {
		return nil, Usage(fmt.Errorf("reading %s: %w", path, err))
	}
	k := Detect(path, data)
	if k == KindUnknown {
		return nil, Usagef("%s: cannot tell the format (want Theseus JSON or an MSCCL++ plan .json, MSCCL XML .xml, textual IR .tir or a bundle .tsb)", path)
	}
	return Parse(path, k, data), nil
}
