package executor

import (
	"testing"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// TestSliceBytesFromEnv: THESEUS_SLICE_BYTES under one 128-byte line is
// refused (1-byte slices made a 4 MiB collective take minutes); the
// default and sizes with units are taken.
func TestSliceBytesFromEnv(t *testing.T) {
	for _, c := range []struct {
		val  string
		want int64
		err  bool
	}{{"", 1 << 20, false}, {"128", 128, false}, {"64KB", 64 << 10, false},
		{"127", 0, true}, {"1", 0, true}, {"0", 0, true}, {"-5", 0, true}, {"x", 0, true}} {
		restore := env.SetLookupForTest(func(k string) (string, bool) { return c.val, k == "THESEUS_SLICE_BYTES" && c.val != "" })
		got, err := SliceBytesFromEnv()
		restore()
		if (err != nil) != c.err || got != c.want {
			t.Errorf("THESEUS_SLICE_BYTES=%q: %d, %v; want %d, error %v", c.val, got, err, c.want, c.err)
		}
	}
}
