// Package importtest holds the test scaffolding the MSCCL XML and MSCCL++
// JSON importers share: the corpus summary and its golden files, the
// parse-or-fail helpers, the invariants every fuzz input must keep, and the
// benchmark drivers. Only _test.go files import it.
package importtest

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// ParseFunc is an importer's Parse: the program (nil when any diagnostic is
// an error) and the diagnostics of the file data read from filename.
type ParseFunc func(filename string, data []byte) (*ir.Program, []diag.Diagnostic)

var update = flag.Bool("update", false, "rewrite the golden summaries in testdata/golden")

// Summary is what a corpus test pins for each file: the shape of the
// imported program and every diagnostic. Fields left zero are omitted from
// the golden JSON.
type Summary struct {
	Name           string            `json:"name,omitempty"`
	Collective     string            `json:"collective,omitempty"`
	Protocol       string            `json:"protocol,omitempty"`
	NRanks         int               `json:"nranks,omitempty"`
	Root           int               `json:"root,omitempty"`
	ChunksPerBlock int64             `json:"chunks_per_block,omitempty"`
	InPlace        bool              `json:"inplace,omitempty"`
	OutOfPlace     bool              `json:"outofplace,omitempty"`
	MinBytes       int64             `json:"min_bytes,omitempty"`
	MaxBytes       int64             `json:"max_bytes,omitempty"`
	NumThreads     int               `json:"num_threads,omitempty"`
	SliceBytes     int64             `json:"slice_bytes,omitempty"`
	TBs            []int             `json:"tbs,omitempty"`      // per rank
	Channels       []int             `json:"channels,omitempty"` // per rank
	Chunks         [][3]int64        `json:"chunks,omitempty"`   // per rank: input, output, scratch
	Ops            map[string]int    `json:"ops,omitempty"`      // per opcode, all ranks
	Deps           int               `json:"deps,omitempty"`
	Publish        int               `json:"publish,omitempty"`
	MaxSrcs        int               `json:"max_srcs,omitempty"` // widest reduction
	RemoteRefs     int               `json:"remote_refs,omitempty"`
	PacketRefs     int               `json:"packet_refs,omitempty"`
	Unpaired       int               `json:"unpaired,omitempty"` // channel ends without a peer end
	Meta           map[string]string `json:"meta,omitempty"`
	Diagnostics    []string          `json:"diagnostics,omitempty"`
}

// Summarize summarises a Parse result. Diagnostics are written
// "line:col severity[code] subject: message".
func Summarize(p *ir.Program, ds []diag.Diagnostic) Summary {
	var s Summary
	for _, d := range ds {
		subj := d.Subject()
		if subj != "" {
			subj += ": "
		}
		s.Diagnostics = append(s.Diagnostics, fmt.Sprintf("%d:%d %s[%s] %s%s", d.Line, d.Col, d.Severity, d.Code, subj, d.Msg))
	}
	if p == nil {
		return s
	}
	s.Name, s.Collective, s.Protocol = p.Name, p.Collective.String(), p.Protocol.String()
	s.NRanks, s.Root, s.ChunksPerBlock = p.NRanks, p.Root, p.ChunksPerBlock
	s.InPlace, s.OutOfPlace, s.MinBytes, s.MaxBytes = p.InPlace, p.OutOfPlace, p.MinBytes, p.MaxBytes
	s.NumThreads, s.SliceBytes = p.NumThreads, p.SliceBytes
	s.Ops = map[string]int{}
	s.Meta = p.Meta
	for ri, r := range p.Ranks {
		for _, c := range r.Channels {
			if c.Peer < 0 || c.Peer >= len(p.Ranks) || c.PeerChannel < 0 || c.PeerChannel >= len(p.Ranks[c.Peer].Channels) {
				s.Unpaired++
				continue
			}
			if back := p.Ranks[c.Peer].Channels[c.PeerChannel]; back.Peer != ri || back.Type != c.Type {
				s.Unpaired++
			}
		}
		s.TBs = append(s.TBs, len(r.TBs))
		s.Channels = append(s.Channels, len(r.Channels))
		s.Chunks = append(s.Chunks, r.Chunks)
		for _, tb := range r.TBs {
			for _, op := range tb.Ops {
				s.Ops[op.Code.String()]++
				s.Deps += len(op.Deps)
				if op.Publish {
					s.Publish++
				}
				s.MaxSrcs = max(s.MaxSrcs, len(op.Srcs))
				for _, ref := range append(append([]ir.Ref(nil), op.Srcs...), op.Dsts...) {
					if ref.Chan >= 0 {
						s.RemoteRefs++
					}
					if ref.Packet {
						s.PacketRefs++
					}
				}
			}
		}
	}
	return s
}

// CorpusDir returns ../shared/corpus relative to the repository root (the
// directory holding go.mod), and skips the test when there is none.
func CorpusDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Skip("no go.mod above the test directory")
		}
		dir = parent
	}
	c := filepath.Join(dir, "..", "shared", "corpus")
	if _, err := os.Stat(c); err != nil {
		tb.Skipf("corpus not found at %s (../shared/corpus relative to the repository): %v", c, err)
	}
	return c
}

// CorpusTest is one importer's corpus test (see Corpus).
type CorpusTest struct {
	Parse   ParseFunc
	Pattern string                   // glob of the files, relative to CorpusDir
	Golden  func(path string) string // the golden file of a corpus file
	// Adjust, when set, edits a summary before the comparison (for fields
	// a format's goldens do not pin).
	Adjust func(*Summary)
	// Check, when set, runs further checks on a file's result.
	Check func(t *testing.T, path string, p *ir.Program)
}

// Corpus runs one subtest per corpus file, in name order: it parses the
// file under its base name, summarises the result and compares it with its
// golden file (Golden). It fails when no file matches.
func Corpus(t *testing.T, c CorpusTest) {
	t.Helper()
	pattern := filepath.Join(CorpusDir(t), c.Pattern)
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in %s: %v", filepath.Dir(pattern), err)
	}
	sort.Strings(files)
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, ds := c.Parse(base, data)
			got := Summarize(p, ds)
			if c.Adjust != nil {
				c.Adjust(&got)
			}
			Golden(t, c.Golden(f), got)
			if c.Check != nil {
				c.Check(t, f, p)
			}
		})
	}
}

// Golden compares got with the summary in the golden file (JSON), or
// rewrites the file when the test runs with -update.
func Golden(t *testing.T, golden string, got Summary) {
	t.Helper()
	if *update {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(got); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	var want Summary
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("summary (-want +got):\n%s", d)
	}
}

// MustParse parses src as file and fails on any error diagnostic or a nil
// program.
func MustParse(t *testing.T, parse ParseFunc, file, src string) (*ir.Program, []diag.Diagnostic) {
	t.Helper()
	p, ds := parse(file, []byte(src))
	for _, d := range ds {
		if d.Severity == diag.Error {
			t.Fatalf("unexpected error: %v", d)
		}
	}
	if p == nil {
		t.Fatal("nil program without errors")
	}
	return p, ds
}

// WantErr parses src as file and checks that no program comes back, that
// exactly codes are reported as errors, each with a full position (in file)
// and a hint, and that the first error mentions msg. It returns the
// diagnostics.
func WantErr(t *testing.T, parse ParseFunc, file, src, msg string, codes ...diag.Code) []diag.Diagnostic {
	t.Helper()
	p, ds := parse(file, []byte(src))
	if p != nil {
		t.Errorf("program returned despite errors")
	}
	var got []diag.Code
	var first *diag.Diagnostic
	for i, d := range ds {
		if d.Severity != diag.Error {
			continue
		}
		got = append(got, d.Code)
		if first == nil {
			first = &ds[i]
		}
		if d.Line < 1 || d.Col < 1 || d.File != file || d.Hint == "" {
			t.Errorf("error without a full position or hint: %+v", d)
		}
	}
	if d := cmp.Diff(codes, got); d != "" {
		t.Fatalf("error codes (-want +got):\n%s\nall: %v", d, ds)
	}
	if first != nil && !strings.Contains(first.Msg, msg) {
		t.Errorf("message %q does not contain %q", first.Msg, msg)
	}
	return ds
}

// CheckResult fails t unless a Parse result keeps the invariants both
// importers promise for any input: every diagnostic has a documented code
// and every error a position; a program comes back exactly when no
// diagnostic is an error; and a returned program has one rank per gpu, a
// positive ChunksPerBlock, and valid opcodes with positions and at least
// their minimum of srcs. It returns the program's presence, so that the
// caller can go on to its format's own checks.
func CheckResult(t *testing.T, p *ir.Program, ds []diag.Diagnostic) bool {
	t.Helper()
	errs := 0
	for _, d := range ds {
		if _, ok := diag.Lookup(d.Code); !ok {
			t.Fatalf("undocumented code %q: %v", d.Code, d)
		}
		if d.Severity == diag.Error {
			errs++
			if d.Line < 1 || d.Col < 1 {
				t.Fatalf("error without position: %v", d)
			}
		}
	}
	if (p == nil) != (errs > 0) {
		t.Fatalf("program %v with %d errors: %v", p != nil, errs, ds)
	}
	if p == nil {
		return false
	}
	if len(p.Ranks) != p.NRanks || p.NRanks < 1 || p.ChunksPerBlock < 1 {
		t.Fatalf("bad program shape: nranks %d ranks %d C %d", p.NRanks, len(p.Ranks), p.ChunksPerBlock)
	}
	for r, rk := range p.Ranks {
		for tbi, tb := range rk.TBs {
			for i, op := range tb.Ops {
				if !op.Code.Valid() || !op.Pos.IsValid() {
					t.Fatalf("rank %d tb %d op %d: %+v", r, tbi, i, op)
				}
				if len(op.Srcs) < op.Code.Info().MinSrcs {
					t.Fatalf("rank %d tb %d op %d: %v with %d srcs", r, tbi, i, op.Code, len(op.Srcs))
				}
			}
		}
	}
	return true
}

// BenchSizes runs parse on gen(n) for n = 64, 1024 and 8192 ranks, as
// sub-benchmarks ranks=n reporting bytes and allocations; a parse that
// returns no program fails the benchmark.
func BenchSizes(b *testing.B, parse ParseFunc, file string, gen func(n int) []byte) {
	for _, n := range []int{64, 1024, 8192} {
		data := gen(n)
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if p, ds := parse(file, data); p == nil {
					b.Fatal(ds)
				}
			}
		})
	}
}

// BenchFiles runs parse on every file matching pattern (relative to
// CorpusDir), one sub-benchmark per file named after it; it skips when
// nothing matches.
func BenchFiles(b *testing.B, parse ParseFunc, pattern string) {
	files, _ := filepath.Glob(filepath.Join(CorpusDir(b), pattern))
	if len(files) == 0 {
		b.Skip("corpus not found")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(filepath.Base(f), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				parse(f, data)
			}
		})
	}
}
