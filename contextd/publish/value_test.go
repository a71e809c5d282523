package publish

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

func TestParseValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		t    bc.Type
		want string
	}{
		{"3", bc.Int, "3"}, {" -1 ", bc.Int, "-1"}, {"2.5", bc.Float, "2.5"}, {"1e6", bc.Float, "1e+06"}, {"3", bc.Float, "3"},
		{"true", bc.Bool, "true"}, {"[1, 2.5]", bc.Vector, "[1,2.5]"}, {"1,2.5", bc.Vector, "[1,2.5]"}, {"[]", bc.Vector, "[]"}, {"", bc.Vector, "[]"},
	} {
		got, err := ParseValue(tc.in, tc.t, 0)
		if err != nil || string(got) != tc.want {
			t.Errorf("ParseValue(%q, %s) = %s, %v; want %s", tc.in, tc.t, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in string
		t  bc.Type
	}{
		{"2.5", bc.Int}, {"9223372036854775808", bc.Int}, {"0x10", bc.Int}, {"NaN", bc.Float}, {"inf", bc.Float}, {"1e999", bc.Float},
		{"1", bc.Bool}, {"True", bc.Bool}, {"[1,", bc.Vector}, {"[1,,2]", bc.Vector}, {"1,2,3,4,5", bc.Vector},
	} {
		if got, err := ParseValue(tc.in, tc.t, 4); err == nil {
			t.Errorf("ParseValue(%q, %s) = %s, want an error", tc.in, tc.t, got)
		}
	}
}

func TestValidAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"", now.Add(2 * time.Second).Round(time.Millisecond).UnixNano()},
		{"+0s", now.Round(time.Millisecond).UnixNano()},
		{"+1m", now.Add(time.Minute).Round(time.Millisecond).UnixNano()},
		{"always", manifest.Always},
		{"1700000000.5", 1700000000_500000000},
		{"2026-01-02T03:04:05Z", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()},
	} {
		got, err := ResolveValidAfter(tc.in, now, 2*time.Second)
		if err != nil || got != tc.want {
			t.Errorf("ResolveValidAfter(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"+-1s", "+x", "soon", "3000-01-01T00:00:00Z"} {
		if _, err := ResolveValidAfter(in, now, 0); err == nil {
			t.Errorf("ResolveValidAfter(%q) accepted", in)
		}
	}
	for _, ns := range []int64{0, 1, 1772366400_000000000, 1772366400_123000000, -1_500000000, 1772366400_123456789} {
		raw, _ := FormatValidAfter(ns)
		got, err := manifest.ParseTime(string(raw), time.UTC)
		if d := got - ns; err != nil || d > 500 || d < -500 {
			t.Errorf("FormatValidAfter(%d) = %s reads back as %d, %v", ns, raw, got, err)
		}
	}
}

// FuzzParseValue: ParseValue never panics, and every value it accepts is a
// value line the runtime reads as the same value whichever way it is
// written again.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"3", "-1", "2.5", "1e6", "true", "false", "[1, 2.5]", "1,2", "[]", "", " 7 ", "[1,", "0x1", "NaN"} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, s string, k uint8) {
		typ := []bc.Type{bc.Int, bc.Float, bc.Bool, bc.Vector}[k%4]
		raw, err := ParseValue(s, typ, 8)
		if err != nil {
			return
		}
		line, _ := json.Marshal(struct {
			Value json.RawMessage `json:"value"`
		}{raw})
		v, ds := manifest.ParseValue("x.jsonl", 1, line, typ, manifest.Options{MaxVectorLen: 8})
		if len(ds) > 0 {
			t.Fatalf("ParseValue(%q, %s) = %s, which the runtime rejects: %v", s, typ, raw, ds)
		}
		again, err := ParseValue(string(raw), typ, 8)
		if err != nil || string(again) != string(raw) {
			t.Fatalf("ParseValue(%s) = %s, %v: not a fixed point", raw, again, err)
		}
		v2, _ := manifest.ParseValue("x.jsonl", 1, []byte(`{"value":`+string(again)+`}`), typ, manifest.Options{MaxVectorLen: 8})
		if d := cmp.Diff(v.Value, v2.Value); d != "" {
			t.Fatal(d)
		}
	})
}

// FuzzResolveValidAfter: --valid-after never panics, and every time it
// accepts is written as a valid_after the runtime reads back as that time.
func FuzzResolveValidAfter(f *testing.F) {
	for _, s := range []string{"", "+0s", "+1h30m", "always", "1700000000.5", "2026-01-02T03:04:05Z", "2026-01-02 03:04", "-5", "+-1s", "9e99"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		ns, err := ResolveValidAfter(s, now, time.Second)
		if err != nil {
			return
		}
		raw, ok := FormatValidAfter(ns)
		if !ok {
			if ns != manifest.Always {
				t.Fatalf("%q: %d has no field", s, ns)
			}
			return
		}
		got, err := manifest.ParseTime(string(raw), time.UTC)
		if d := got - ns; err != nil || d > 1000 || d < -1000 {
			t.Fatalf("%q: %d written %s reads back as %d, %v", s, ns, raw, got, err)
		}
	})
}
