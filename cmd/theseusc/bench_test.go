package main

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
)

// Benchmarks of the work `theseusc lint` and `theseusc compile` do
// (docs/benchmarks.md records the results). "compile" is lint+compile: the
// compile pipeline runs lint's checks (verify-input, legalize, verify) and
// then lower and bundle; the CLI benchmarks start from the file on disk
// and end with the bundle written.

// ringFile writes the n-rank ring allreduce of compiler/gen as Theseus JSON.
func ringFile(b *testing.B, n int) string {
	b.Helper()
	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
	if err != nil {
		b.Fatal(err)
	}
	data, err := schedjson.Format(p)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "ring"+strconv.Itoa(n)+".json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// largestCorpusFile is the corpus file that imports with the most ops
// (byOps) or the most bytes.
func largestCorpusFile(b *testing.B, byOps bool) string {
	type f struct {
		path string
		size int
	}
	var fs []f
	for _, path := range corpusFiles(b) {
		src, err := cli.Load(path, nil)
		if err != nil || src.Program == nil {
			continue
		}
		n := len(src.Data)
		if byOps {
			n = src.Program.NumOps()
		}
		fs = append(fs, f{path, n})
	}
	if len(fs) == 0 {
		b.Skip("no corpus file imports")
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].size > fs[j].size })
	b.Logf("largest corpus file by %s: %s (%d)", map[bool]string{true: "ops", false: "bytes"}[byOps], fs[0].path, fs[0].size)
	return fs[0].path
}

func benchCLI(b *testing.B, args ...string) {
	b.Helper()
	b.ReportAllocs()
	b.ResetTimer() // the input was written by the caller
	for i := 0; i < b.N; i++ {
		if r := theseusc(b, args...); r.code != cli.ExitOK {
			b.Fatalf("exit %d: %s", r.code, clip(r.err))
		}
	}
}

func BenchmarkLint(b *testing.B) {
	b.Run("ring64", func(b *testing.B) { benchCLI(b, "lint", ringFile(b, 64)) })
	b.Run("corpus-most-ops", func(b *testing.B) { benchCLI(b, "lint", largestCorpusFile(b, true)) })
	b.Run("corpus-most-bytes", func(b *testing.B) { benchCLI(b, "lint", largestCorpusFile(b, false)) })
	b.Run("ring1024", func(b *testing.B) {
		if testing.Short() {
			b.Skip("seconds per iteration")
		}
		benchCLI(b, "lint", ringFile(b, 1024))
	})
}

// BenchmarkGen writes a generated ring as Theseus JSON (gen, format, and
// the round-trip check).
func BenchmarkGen(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run("ring"+strconv.Itoa(n), func(b *testing.B) {
			if n > 64 && testing.Short() {
				b.Skip("seconds per iteration")
			}
			out := filepath.Join(b.TempDir(), "ring.json")
			benchCLI(b, "gen", "ring", "--coll", "allreduce", "--nranks", strconv.Itoa(n), "-o", out)
		})
	}
}

// BenchmarkCompile is lint+compile from the file to the written bundle.
func BenchmarkCompile(b *testing.B) {
	out := func(b *testing.B) string { return filepath.Join(b.TempDir(), "out.tsb") }
	b.Run("ring64", func(b *testing.B) { benchCLI(b, "compile", ringFile(b, 64), "-o", out(b)) })
	b.Run("corpus-most-ops", func(b *testing.B) { benchCLI(b, "compile", largestCorpusFile(b, true), "-o", out(b)) })
	b.Run("corpus-most-bytes", func(b *testing.B) { benchCLI(b, "compile", largestCorpusFile(b, false), "-o", out(b)) })
	b.Run("ring1024", func(b *testing.B) {
		if testing.Short() {
			b.Skip("minutes per iteration")
		}
		benchCLI(b, "compile", ringFile(b, 1024), "-o", out(b))
	})
}

// BenchmarkPipeline is lint+compile of a generated ring from the IR in
// memory (no JSON): the compiler's own cost, by ranks.
func BenchmarkPipeline(b *testing.B) {
	for _, n := range []int{64, 128, 256, 1024} {
		b.Run("ring"+strconv.Itoa(n), func(b *testing.B) {
			if n > 256 && testing.Short() {
				b.Skip("minutes per iteration")
			}
			p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, ds, err := passes.Compile(p, passes.Options{}); err != nil || cli.CountErrors(ds) > 0 {
					b.Fatal(err, ds)
				}
			}
		})
	}
}

// BenchmarkParseRing64 is the frontend alone: schedjson.Parse of a ring's JSON.
func BenchmarkParseRing64(b *testing.B) {
	data, err := os.ReadFile(ringFile(b, 64))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if p, ds := schedjson.Parse("ring64.json", data); p == nil {
			b.Fatal(ds)
		}
	}
}
