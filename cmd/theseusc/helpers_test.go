package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// Paths of the repository's shared inputs, relative to this package.
const (
	examplesDir = "../../examples"
	badDir      = "../../testdata/bad"
)

// corpusDirFlag is ../shared/corpus as seen from this package (-corpus moves it,
// for running the test binary elsewhere).
var corpusDirFlag = flag.String("corpus", "../../../shared/corpus", "the third-party corpus directory")

// result is one in-process run of theseusc.
type result struct {
	out, err string
	code     cli.ExitCode
}

// theseusc runs the command tree in-process with args and stdin.
func theseuscIn(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, cli.Streams{In: strings.NewReader(stdin), Out: &out, Err: &errb})
	return result{out.String(), errb.String(), code}
}

func theseusc(t testing.TB, args ...string) result {
	t.Helper()
	return theseuscIn(t, "", args...)
}

// want fails the test unless r exited with code.
func (r result) want(t testing.TB, code cli.ExitCode) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d (%v), want %d (%v)\nstdout:\n%s\nstderr:\n%s", r.code, r.code, code, code, clip(r.out), clip(r.err))
	}
	return r
}

func clip(s string) string {
	if len(s) > 4000 {
		return s[:4000] + "\n...[clipped]"
	}
	return s
}

// golden compares got with testdata/golden/name, or rewrites it under
// -update.
func golden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs from the golden file (-want +got; go test -update rewrites it):\n%s", name, d)
	}
}

var timeRE = regexp.MustCompile(`(time=)\S+|("elapsed_ns": )\d+`)

// stripTimes replaces the wall times of sim output, which vary.
func stripTimes(s string) string { return timeRE.ReplaceAllString(s, "${1}${2}T") }

func glob(t testing.TB, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// corpusFiles lists ../shared/corpus, or skips the test when it is absent.
func corpusFiles(t testing.TB) []string {
	t.Helper()
	dir := *corpusDirFlag
	fs := append(glob(t, filepath.Join(dir, "msccl-xml", "*.xml")), glob(t, filepath.Join(dir, "mscclpp-json", "*", "*.json"))...)
	if len(fs) == 0 {
		t.Skipf("no corpus at %s", dir)
	}
	return fs
}
