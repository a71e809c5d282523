package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/diag"
	"github.com/theseus-ccl/theseus/compiler/passes"
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
// that a failed write never leaves half a file.
func writeOutput(path string, data []byte, stdout io.Writer) error {
	if path == "" || path == "-" {
		_, err := stdout.Write(data)
		return cli.Internal(err)
	}
	return cli.Internal(writeFileAtomic(path, data, 0o644))
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if e := f.Chmod(mode); err == nil {
		err = e
	}
	if e := f.Close(); err == nil {
		err = e
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
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
