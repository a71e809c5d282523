package manifest

import (
	"flag"
	"testing"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
)

var reviewKnown = flag.Bool("review.known", false, "run the review's tests of known, unfixed problems (they fail)")

// TestReviewKnownSyntaxColumns: malformed JSON in a value log is reported
// at the offending byte (lineCtx.object's doc), but the column is off by
// one when encoding/json's SyntaxError.Offset comes from the first token
// or from inside a nested value: "garbage" points at column 2 (its 'g' is
// at 1), {"value":[1,2} at 13 (its '}' is at 14), "not json" at 3 (the
// 'o' is at 2); others are right (" x" at 2, {"value":1x} at 11). A UTF-8
// byte order mark (a file saved by a Windows editor) is reported as
// "invalid character 'ï'". Found with theseusc select on a copy of
// examples/contexts/default, appending to ll_max_bytes.jsonl (2026-11-29
// review); fields.go is outside the review's remit.
func TestReviewKnownSyntaxColumns(t *testing.T) {
	if !*reviewKnown {
		t.Skip("known problem, left for its owner (-review.known runs it): JSON syntax error columns off by one")
	}
	for _, c := range []struct {
		line string
		col  int
	}{
		{"garbage", 1},
		{"\x00", 1},
		{"not json", 2},
		{`{"value":[1,2}`, 14},
		{" x", 2},            // right today
		{`{"value":1x}`, 11}, // right today
	} {
		_, ds := ParseValue("ll_max_bytes.jsonl", 1, []byte(c.line), bc.Int, Options{})
		if len(ds) != 1 || ds[0].Col != c.col {
			t.Errorf("%q: diagnostics %v, want one at column %d", c.line, ds, c.col)
		}
	}
}
