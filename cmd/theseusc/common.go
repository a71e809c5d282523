package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// pipelineOptions adapts o to p: a program without transfer ops is left
// as it is by legalize, so the verify pass would prove the very program
// verify-input has just proven; it is skipped (unless asked for by
// name in --print-after, or verify-input itself is skipped).
func pipelineOptions(p *ir.Program, o passes.Options) passes.Options {
	if p.Level() == ir.LevelTransfer || slices.Contains(o.Skip, "verify-input") ||
		slices.Contains(o.Skip, "verify") || slices.Contains(o.PrintAfter, "verify") {
		return o
	}
	o.Skip = append(slices.Clone(o.Skip), "verify")
	if o.StopAfter == "verify" {
		o.StopAfter = "legalize"
	}
	return o
}

// check runs the front half of the pipeline on p (verify-input, legalize,
// verify): what lint reports and what sim needs. It returns the state
// (s.Prog is the legalised program) and an internal error, if any.
func check(p *ir.Program, vo passes.Options) (*passes.State, error) {
	vo.StopAfter = "verify"
	vo = pipelineOptions(p, vo)
	if slices.Contains(vo.Skip, "verify") {
		vo.StopAfter = "legalize"
	}
	st, err := passes.Run(p, vo)
	if st == nil {
		return nil, cli.Usage(err)
	}
	if err != nil {
		return st, cli.Internal(err)
	}
	return st, nil
}

// loadProgram loads path, printing the frontend's diagnostics to standard
// error. It fails with a findings error when the file has
// errors or, for a bundle, no embedded source.
func loadProgram(path string, s cli.Streams) (*cli.Source, error) {
	src, err := cli.Load(path, s.In)
	if err != nil {
		return nil, err
	}
	cli.PrintDiags(s.Err, src.Diags)
	if src.HasErrors() {
		return nil, cli.Findings()
	}
	if src.Program == nil {
		return nil, cli.Findingsf("%s: the bundle carries no source (compile it with --embed-source)", path)
	}
	return src, nil
}

// writeOutput writes data to path: "" or "-" is standard output; a file is
// written through a temporary file in the same directory and renamed, so
// that a failed write never leaves half a file (writeFileAtomic's errors).
func writeOutput(path string, data []byte, stdout io.Writer) error {
	return streamOutput(path, stdout, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// streamOutput is writeOutput for contents that write writes (for example
// a bundle's WriteTo, which never builds them in memory).
func streamOutput(path string, stdout io.Writer, write func(io.Writer) error) error {
	if path == "" || path == "-" {
		return cli.Internal(write(stdout))
	}
	return writeAtomic(path, 0o644, write)
}

// writeFileAtomic writes data to path with mode through a temporary file in
// path's directory, renamed over path. Errors name path, never the
// temporary file: a directory that is missing, not a directory or not
// writable, or a path that is a directory, is a usage error (ExitUsage);
// a failure while writing (a full disk) is an internal failure.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	return writeAtomic(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeAtomic is writeFileAtomic for contents that write writes.
func writeAtomic(path string, mode os.FileMode, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
			return cli.Usagef("cannot write %s: %s is not a directory", path, dir)
		}
		return cli.Usagef("cannot write %s: cannot create a file in %s: %v", path, dir, cause(err))
	}
	tmp := f.Name()
	err = write(f)
	if e := f.Chmod(mode); err == nil {
		err = e
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err != nil {
		os.Remove(tmp)
		return cli.Internal(fmt.Errorf("writing %s: %v", path, cause(err)))
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		if st, serr := os.Stat(path); serr == nil && st.IsDir() {
			return cli.Usagef("cannot write %s: it is a directory", path)
		}
		return cli.Usagef("cannot write %s: %v", path, cause(err))
	}
	return nil
}

// cause strips the path from a *PathError or *LinkError (which would name
// the temporary file) and returns the system error alone.
func cause(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// summary is "N error(s), M warning(s)".
func summary(ds []diag.Diagnostic) string {
	e, w := 0, 0
	for _, d := range ds {
		switch d.Severity {
		case diag.Error:
			e++
		case diag.Warning:
			w++
		}
	}
	return fmt.Sprintf("%d error(s), %d warning(s)", e, w)
}

// runLegalize runs only the legalize pass on p.
func runLegalize(p *ir.Program) (*passes.State, error) {
	st, err := passes.Run(p, passes.Options{StopAfter: "legalize", Skip: []string{"verify-input"}})
	if st == nil || err != nil {
		return st, cli.Internal(err)
	}
	return st, nil
}
