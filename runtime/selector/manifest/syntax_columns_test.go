package manifest

import (
	"testing"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
)

// TestSyntaxColumns: malformed JSON in a value log is reported at
// the offending byte, whichever side of it encoding/json's
// SyntaxError.Offset lands ("garbage" was reported at column 2, {"value":
// [1,2} at 13, "not json" at 3; fixed by manifest.badByte). Found with
// theseusc select on a copy of examples/contexts/default, appending to
// ll_max_bytes.jsonl (2026-11-29 review).
func TestSyntaxColumns(t *testing.T) {
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
