package schedjson

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/theseus-ccl/theseus/diag"
)

// fuzzMaxBytes bounds the work of one fuzz input: the fuzzer's mutations
// grow inputs, and its minimizer's cost grows faster than their length
// (minimizing the 11-21 KB example schedules stalled the fuzzer for
// seconds per new input). Larger schedules are parsed by the unit tests.
const fuzzMaxBytes = 1 << 10

// FuzzParse checks that Parse never panics or hangs, that every diagnostic
// is complete (known code, position, hint), that it returns a program
// exactly when it reports no error, and that every program it returns
// round-trips: Parse(Format(p)) == p and Format is a fixed point.
//
// Seeds: the committed corpus in testdata/fuzz/FuzzParse, and the example
// schedules, bad-input files and golden inputs of at most fuzzMaxBytes;
// longer inputs are skipped.
func FuzzParse(f *testing.F) {
	for _, glob := range []string{
		filepath.Join(repoRoot, "examples", "*.json"),
		filepath.Join(repoRoot, "testdata", "bad", "*.json"),
		filepath.Join("testdata", "golden", "*.json"),
	} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			if len(data) <= fuzzMaxBytes {
				f.Add(data)
			}
		}
	}
	f.Add([]byte(doc("", "", "", "")))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > fuzzMaxBytes {
			return
		}
		p, ds := Parse("fuzz.json", data)
		errs := 0
		for _, d := range ds {
			if _, ok := diag.Lookup(d.Code); !ok || d.Line < 1 || d.Col < 1 || d.Hint == "" || d.File != "fuzz.json" || d.Msg == "" {
				t.Fatalf("incomplete diagnostic %+v", d)
			}
			if d.Severity == diag.Error {
				errs++
			}
		}
		if (p == nil) != (errs > 0) {
			t.Fatalf("program %v with %d errors: %v", p != nil, errs, ds)
		}
		if p != nil {
			roundTrip(t, p)
		}
	})
}
