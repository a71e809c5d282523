package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/theseus-ccl/theseus"

// group is the layer a package of the module belongs to: the first
// element of its path, with ir itself, ir's subpackages and cuda's
// measurement helpers told apart.
func group(path string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	first, _, _ := strings.Cut(rel, "/")
	switch {
	case rel == "ir":
		return "ir"
	case first == "ir":
		return "ir/..."
	case first == "internal" || first == "examples":
		return "leaf"
	}
	return first
}

// below lists, for each group, the groups its packages may import (its own
// included where listed). The order is docs/design/layering.md's:
// ir, diag ← ir/... ← codegen ← compiler ← runtime ← cuda, contextd ←
// ncclabi ← cmd. "leaf" packages (internal/..., examples/...) import
// nothing of the module and may be imported by anything.
var below = map[string][]string{
	"ir":       {"leaf"},
	"diag":     {"leaf"},
	"leaf":     {},
	"ir/...":   {"ir", "diag", "ir/...", "leaf"},
	"codegen":  {"ir", "diag", "ir/...", "codegen", "leaf"},
	"compiler": {"ir", "diag", "ir/...", "codegen", "compiler", "leaf"},
	"runtime":  {"ir", "diag", "ir/...", "codegen", "compiler", "runtime", "leaf"},
	"cuda":     {"ir", "diag", "ir/...", "codegen", "compiler", "runtime", "cuda", "leaf"},
	"contextd": {"ir", "diag", "ir/...", "codegen", "compiler", "runtime", "contextd", "leaf"},
	"ncclabi":  {"ir", "diag", "ir/...", "codegen", "compiler", "runtime", "cuda", "ncclabi", "leaf"},
	"cmd":      {"ir", "diag", "ir/...", "codegen", "compiler", "runtime", "cuda", "contextd", "ncclabi", "cmd", "leaf"},
}

// forbidden are edges the group order allows but the design does not,
// within a layer: the backend interface (runtime/device) sits below the
// runtime's other packages, a backend does not reach into the layers that
// drive it, and runtime/theseus (the Go API) is the runtime's top.
var forbidden = []struct{ from, to, why string }{
	{"runtime/device", "runtime/", "the backend interface imports no other runtime package but the launch contract"},
	{"runtime/host", "runtime/executor", "a backend does not import the executor above it"},
	{"runtime/host", "runtime/comm", "a backend does not import the communicator above it"},
	{"runtime/host", "runtime/selector", "a backend does not import the selector"},
	{"cuda", "runtime/executor", "a backend does not import the executor above it"},
	{"cuda", "runtime/comm", "a backend does not import the communicator above it"},
	{"cuda", "runtime/selector", "a backend does not import the selector"},
	{"cuda", "runtime/interp", "the CUDA backend shares the launch contract, not the host interpreter"},
	{"runtime/", "runtime/theseus", "runtime/theseus is the Go API, the top of the runtime"},
}

// contract is the launch contract's package (issue 21), which the
// backend interface, the backends and the interpreter share: no forbidden
// edge applies to it.
const contract = "runtime/launch"

// allowed lists edges that break a rule above and are being removed:
// TEMPORARY, each to be deleted by the change that removes its edge. None
// is left (issue 21 moved the launch contract out of runtime/interp and
// took runtime/replay out of runtime/device).
var allowed = map[[2]string]string{}

// pkg is what the test reads of `go list -json`.
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
}

// list returns every package of the module (non-test imports only).
func list(t *testing.T) []pkg {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(gobin, "list", "-e", "-json=ImportPath,Name,Imports", module+"/...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var ps []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if len(ps) < 20 {
		t.Fatalf("go list found %d packages of %s; expected the whole module", len(ps), module)
	}
	return ps
}

// rel is path within the module ("" for a package outside it).
func rel(path string) string {
	if path == module {
		return "."
	}
	r, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return ""
	}
	return r
}

// helper reports whether package path is a test helper (its last element
// ends in "test": irtest, devicetest, commtest, gputest, ...) or a
// measurement helper (cuda/cudabench), which only tests may import.
func helper(path string) bool {
	base := filepath.Base(path)
	return strings.HasSuffix(base, "test") || rel(path) == "cuda/cudabench"
}

// matches reports whether package r (module-relative) is or lies under
// prefix p ("runtime/" matches every runtime package).
func matches(r, p string) bool {
	if strings.HasSuffix(p, "/") {
		return strings.HasPrefix(r, p)
	}
	return r == p || strings.HasPrefix(r, p+"/")
}

// TestLayering fails on any import of a product package (its non-test
// files) that runs against the layer order, breaks a forbidden edge, or
// reaches a test or measurement helper; an allow-list entry whose edge is
// gone fails too, so that it is deleted with the edge. A library package
// that only tests import (no package's non-test files, and it is no
// command) counts as a test helper whatever its name
// (runtime/interp/internal/progs).
func TestLayering(t *testing.T) {
	for _, s := range check(list(t), allowed) {
		t.Error(s)
	}
}

// check returns the problems of packages ps under the rules, with allow
// as the allow-list.
func check(ps []pkg, allow map[[2]string]string) []string {
	imported := map[string]bool{}
	for _, p := range ps {
		for _, imp := range p.Imports {
			imported[imp] = true
		}
	}
	testOnly := func(p pkg) bool { return helper(p.ImportPath) || (p.Name != "main" && !imported[p.ImportPath]) }
	var problems []string
	seen := map[[2]string]bool{}
	for _, p := range ps {
		from := rel(p.ImportPath)
		if from == "" || strings.HasPrefix(from, "internal/layering") {
			continue
		}
		g := group(p.ImportPath)
		ok, known := below[g]
		if !known {
			problems = append(problems, from+": in no layer (add its group to internal/layering and docs/design/layering.md)")
			continue
		}
		for _, imp := range p.Imports {
			to := rel(imp)
			if to == "" {
				continue
			}
			if !contains(ok, group(imp)) {
				problems = append(problems, from+" imports "+to+": "+g+" may import only "+strings.Join(ok, ", "))
				continue
			}
			if testOnly(p) {
				continue // test helpers may import anything the layers allow
			}
			if helper(imp) {
				problems = append(problems, from+" imports "+to+": a test or measurement helper (only tests may)")
			}
			edge := [2]string{from, to}
			for _, f := range forbidden {
				if !matches(from, f.from) || !matches(to, f.to) || matches(to, from) || to == contract {
					continue
				}
				if _, temp := allow[edge]; temp {
					seen[edge] = true
					continue
				}
				problems = append(problems, from+" imports "+to+": "+f.why)
			}
		}
	}
	for edge, why := range allow {
		if !seen[edge] {
			problems = append(problems, "allow-list entry "+edge[0]+" -> "+edge[1]+" ("+why+") has no edge left: delete it")
		}
	}
	sort.Strings(problems)
	return problems
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestRules: the rules themselves, and check on made-up packages (no go
// list): each kind of problem is found, and nothing else.
func TestRules(t *testing.T) {
	for _, c := range []struct {
		path, group string
	}{
		{module + "/ir", "ir"}, {module + "/ir/irtext", "ir/..."}, {module + "/diag", "diag"},
		{module + "/codegen/optable", "codegen"}, {module + "/cuda/driver", "cuda"},
		{module + "/internal/ranks", "leaf"}, {module + "/examples/contexts", "leaf"}, {module + "/cmd/theseusc", "cmd"},
	} {
		if g := group(c.path); g != c.group {
			t.Errorf("group(%s) = %s, want %s", c.path, g, c.group)
		}
	}
	for _, c := range []struct {
		path string
		want bool
	}{
		{module + "/runtime/device/devicetest", true}, {module + "/ir/irtest", true}, {module + "/cuda/gputest", true},
		{module + "/cuda/cudabench", true}, {module + "/cmd/theseus-bench", false}, {module + "/runtime/device", false},
	} {
		if got := helper(c.path); got != c.want {
			t.Errorf("helper(%s) = %v, want %v", c.path, got, c.want)
		}
	}
	if contains(below["runtime"], "cuda") || contains(below["compiler"], "runtime") || len(below["ir"]) != 1 || len(below["diag"]) != 1 {
		t.Error("the layer order runs the wrong way")
	}
	m := func(r string) string { return module + "/" + r }
	ps := []pkg{
		{m("ir"), "ir", []string{m("diag")}},
		{m("diag"), "diag", nil},
		{m("codegen/optable"), "optable", []string{m("ir"), m("compiler/verify")}},
		{m("compiler/verify"), "verify", []string{m("ir"), m("diag")}},
		{m("runtime/device"), "device", []string{m("runtime/executor"), m("runtime/replay"), m("runtime/launch")}},
		{m("runtime/launch"), "launch", []string{m("ir")}},
		{m("runtime/executor"), "executor", []string{m("runtime/device"), m("runtime/theseus")}},
		{m("runtime/replay"), "replay", nil},
		{m("runtime/theseus"), "theseus", []string{m("runtime/executor"), m("runtime/theseus/internal/x")}},
		{m("runtime/theseus/internal/x"), "x", nil},
		{m("runtime/device/devicetest"), "devicetest", []string{m("runtime/device"), m("runtime/executor")}},
		{m("runtime/interp/internal/progs"), "progs", []string{m("ir/irtest")}},
		{m("runtime/interp/internal/fixtures"), "fixtures", []string{m("ir/irtest")}}, // only tests import it
		{m("ir/irtest"), "irtest", []string{m("ir")}},
		{m("cuda"), "cuda", []string{m("ncclabi"), m("runtime/device"), m("cuda/cudabench")}},
		{m("cuda/cudabench"), "cudabench", nil},
		{m("ncclabi"), "main", []string{m("cuda")}},
		{m("cmd/x"), "main", []string{m("runtime/device/devicetest"), m("runtime/theseus"), m("runtime/interp/internal/progs")}},
	}
	got := check(ps, map[[2]string]string{{"runtime/device", "runtime/replay"}: "temporary", {"cuda", "runtime/interp"}: "gone"})
	want := []string{
		"allow-list entry cuda -> runtime/interp (gone) has no edge left: delete it",
		"codegen/optable imports compiler/verify: codegen may import only ir, diag, ir/..., codegen, leaf",
		"cmd/x imports runtime/device/devicetest: a test or measurement helper (only tests may)",
		"runtime/interp/internal/progs imports ir/irtest: a test or measurement helper (only tests may)",
		"cuda imports cuda/cudabench: a test or measurement helper (only tests may)",
		"cuda imports ncclabi: cuda may import only ir, diag, ir/..., codegen, compiler, runtime, cuda, leaf",
		"ir imports diag: ir may import only leaf",
		"runtime/device imports runtime/executor: " + forbidden[0].why,
		"runtime/executor imports runtime/theseus: " + forbidden[len(forbidden)-1].why,
	}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("check on made-up packages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
