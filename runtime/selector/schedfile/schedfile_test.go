package schedfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

const repo = "../../.."

func TestLoadExamples(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repo, "examples", "*.json"))
	if len(files) == 0 {
		t.Skip("no examples")
	}
	for _, f := range files {
		info, err := Loader{}.Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if info.Program == nil || info.NRanks != info.Program.NRanks || info.Collective != info.Program.Collective {
			t.Errorf("%s: info %+v", f, info)
		}
	}
	info, err := Loader{}.Load(filepath.Join(repo, "examples", "allreduce_ring_8rank_simple.json"))
	if err != nil || info.Collective != ir.AllReduce || info.NRanks != 8 || !info.InPlace || !info.OutOfPlace {
		t.Fatalf("ring: %+v, %v", info, err)
	}
}

func TestLoadRejectsBadSchedules(t *testing.T) {
	for name, code := range map[string]diag.Code{
		"truncated.json":            diag.Syntax,
		"unknown_op.json":           diag.UnknownOp,
		"chunk_out_of_range.json":   diag.ChunkRange,
		"signal_wait_mismatch.json": diag.SignalWait,
		"deadlock.json":             diag.Deadlock,
		"race.json":                 diag.Race,
		"wrong_result.json":         diag.Postcondition,
	} {
		_, err := Loader{}.Load(filepath.Join(repo, "testdata", "bad", name))
		var le *Error
		if !errors.As(err, &le) {
			t.Errorf("%s: %v, want a *schedfile.Error", name, err)
			continue
		}
		found := false
		for _, d := range le.Diags {
			found = found || d.Code == code
		}
		if !found || !strings.Contains(err.Error(), string(code)) {
			t.Errorf("%s: %v, want %s", name, err, code)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := (Loader{}).Load(filepath.Join(dir, "gone.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	odd := filepath.Join(dir, "x.yaml")
	os.WriteFile(odd, []byte("x"), 0o644)
	if _, err := (Loader{}).Load(odd); err == nil || !strings.Contains(err.Error(), "unknown schedule file extension") {
		t.Errorf("odd extension: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	os.WriteFile(big, make([]byte, 100), 0o644)
	if _, err := (Loader{MaxBytes: 10}).Load(big); err == nil || !strings.Contains(err.Error(), "larger than 10 bytes") {
		t.Errorf("big file: %v", err)
	}
	junk := filepath.Join(dir, "junk.tsb")
	os.WriteFile(junk, []byte("TSBUNDLE"), 0o644)
	var fe *Error
	if _, err := (Loader{}).Load(junk); !errors.As(err, &fe) || len(fe.Diags) == 0 || fe.Diags[0].Code != diag.Syntax {
		t.Errorf("junk bundle: %v", err)
	}
}

// TestLoadBundleBadTables: a bundle whose op tables do not decode (for
// example from an older table format) is refused at load, not at launch.
func TestLoadBundleBadTables(t *testing.T) {
	p := irtest.PairsAllReducePrimitive(2)
	b, err := bundle.New(p, [][]byte{{1}, {2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bad.tsb")
	os.WriteFile(path, data, 0o644)
	if _, err := (Loader{}).Load(path); err == nil || !strings.Contains(err.Error(), "rank 0") {
		t.Fatalf("bad tables loaded: %v", err)
	}
}

func TestLoadBundle(t *testing.T) {
	p := irtest.PairsAllReducePrimitive(2)
	p.MinBytes, p.MaxBytes = 0, 1<<20
	tables, err := optable.LowerAll(p)
	if err != nil {
		t.Fatal(err)
	}
	var raw [][]byte
	for _, tb := range tables {
		b, err := tb.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, b)
	}
	b, err := bundle.New(p, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pairs.tsb")
	os.WriteFile(path, data, 0o644)
	info, err := Loader{}.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Collective != ir.AllReduce || info.NRanks != 2 || info.MaxBytes != 1<<20 || info.Artifact == nil {
		t.Fatalf("info %+v", info)
	}
	if _, ok := info.Artifact.(*bundle.Bundle); !ok {
		t.Fatalf("artifact %T", info.Artifact)
	}
}

// TestSelectorWithRealSchedules runs the selector over a context of real
// schedule files: the verified 8-rank ring is selected; the 1-rank
// allreduce of testdata/bad/wrong_result.json, which parses but computes
// the wrong result, is excluded with the verifier's TS0207, and selection
// for its requests falls back to none.
func TestSelectorWithRealSchedules(t *testing.T) {
	dir := t.TempDir()
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, dst), b, 0o644)
	}
	copyFile(filepath.Join(repo, "examples", "allreduce_ring_8rank_simple.json"), "ring.json")
	copyFile(filepath.Join(repo, "testdata", "bad", "wrong_result.json"), "wrong.json")
	write := func(name, s string) { os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644) }
	write("attribute_manifest.jsonl", `{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}`+"\n")
	write("schedule_manifest.jsonl",
		`{"file":"ring.json","collective":"allreduce","nranks":8,"preference":"1"}`+"\n"+
			`{"file":"wrong.json","collective":"allreduce","nranks":1,"preference":"2"}`+"\n")
	var warns []string
	s, err := selector.New(selector.Options{Dir: dir, CheckPeriod: 1000, Loader: Loader{}, Logger: logger{&warns},
		Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	one := &selector.Request{Coll: ir.AllReduce, Count: 4096, DataType: ir.Float32, RedOp: ir.Sum, Root: -1,
		NRanks: 1, NLocalRanks: 1}
	if id, err := s.Select(ctx, one); err != nil || id != selector.None {
		t.Fatalf("1 rank: Select = %d, %v; want None (the only candidate fails verification)", id, err)
	}
	if !strings.Contains(strings.Join(warns, "\n"), "TS0207") {
		t.Fatalf("no TS0207 warning for wrong.json: %q", warns)
	}
	eight := *one
	eight.NRanks, eight.NLocalRanks = 8, 8
	if id, err := s.Select(ctx, &eight); err != nil || id != 0 {
		t.Fatalf("8 ranks: Select = %d, %v; want 0", id, err)
	}
	ref, ok := s.Schedule(0)
	if !ok || ref.Info.Program == nil || ref.Info.Program.Name != "allreduce_ring_8rank_simple" {
		t.Fatalf("Schedule(0) = %+v", ref)
	}
}

type logger struct{ warns *[]string }

func (l logger) Warnf(format string, args ...any) {
	*l.warns = append(*l.warns, fmt.Sprintf(format, args...))
}
func (l logger) Infof(string, ...any) {}

// TestLoadMSCCLPPPlan: an MSCCL++ execution plan (.json without "version")
// loads through compiler/load and the verifier, as
// docs/selection-context.md §1 promises; it used to be excluded with "no
// version field". Skipped without ../shared/corpus.
func TestLoadMSCCLPPPlan(t *testing.T) {
	path := filepath.Join(repo, "..", "shared", "corpus", "mscclpp-json", "v0.7", "mscclpp-v0.7.0_allreduce.json")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no corpus: %v", err)
	}
	info, err := Loader{}.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := [4]any{info.Collective, info.NRanks, info.InPlace, info.OutOfPlace}
	if want := [4]any{ir.AllReduce, 2, true, false}; got != want || info.Program == nil {
		t.Fatalf("info (collective, nranks, in-place, out-of-place) = %v, want %v", got, want)
	}
}
