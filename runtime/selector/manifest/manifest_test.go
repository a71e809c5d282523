package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // DST zones for the valid_after tests, wherever they run

	"github.com/google/go-cmp/cmp"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

var utc = Options{Location: time.UTC, MaxVectorLen: 4}

func ptr[T any](v T) *T { return &v }

func TestParseAttribute(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Attribute
	}{
		{`{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}`,
			Attribute{Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqMessageSize, ValidAfter: Always}},
		{`{"name":"slow_rank","type":"int","origin":"exo","default":-1,"valid_after":"2025-01-02T03:04:05"}`,
			Attribute{Name: "slow_rank", Type: bc.Int, Origin: bc.Exo, Default: Value{Type: bc.Int, Bits: -1},
				ValidAfter: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()}},
		{`{"name":"load","type":"float","origin":"exo","default":0.5,"description":"avg link load"}`,
			Attribute{Name: "load", Type: bc.Float, Origin: bc.Exo, Default: Value{Type: bc.Float, Bits: bc.Bits(0.5)}, ValidAfter: Always, Description: "avg link load"}},
		{`{"name":"degraded","type":"bool","origin":"exo"}`,
			Attribute{Name: "degraded", Type: bc.Bool, Origin: bc.Exo, Default: Value{Type: bc.Bool}, ValidAfter: Always}},
		{` { "name" : "bw", "type":"vector", "origin":"exo", "default":[1, 2.5e1, -3], "valid_after": 1700000000 } `,
			Attribute{Name: "bw", Type: bc.Vector, Origin: bc.Exo, Default: Value{Type: bc.Vector, Vec: []float64{1, 25, -3}}, ValidAfter: 1700000000e9}},
	} {
		got, ds := ParseAttribute("a.jsonl", 1, []byte(tc.line), utc)
		if len(ds) > 0 {
			t.Errorf("%s: %v", tc.line, ds)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.line, d)
		}
	}
}

type bad struct {
	line string
	code diag.Code
	col  int
	msg  string
}

func checkBad(t *testing.T, kind string, cases []bad, parse func(line []byte) []diag.Diagnostic) {
	t.Helper()
	for _, tc := range cases {
		ds := parse([]byte(tc.line))
		if len(ds) == 0 {
			t.Errorf("%s %s: no diagnostic", kind, tc.line)
			continue
		}
		d := ds[0]
		if d.Code != tc.code || d.Col != tc.col || d.Line != 3 || d.File != "f.jsonl" || !strings.Contains(d.Msg, tc.msg) || d.Hint == "" {
			t.Errorf("%s %s:\n got %v\nwant %s at col %d containing %q", kind, tc.line, d, tc.code, tc.col, tc.msg)
		}
	}
}

func TestParseAttributeErrors(t *testing.T) {
	checkBad(t, "attribute", []bad{
		{`{"name":"x","type":"int"`, diag.Syntax, 25, "unexpected end of line"},
		{`{"name":"x",,}`, diag.Syntax, 13, "malformed JSON"},
		{`[1,2]`, diag.Syntax, 1, "not a JSON object"},
		{`{"name":"x","type":"int","origin":"exo"} x`, diag.Syntax, 42, "text after"},
		{`{"name":"x","type":"int","origin":"exo","nmae":1}`, diag.UnknownField, 41, `unknown field "nmae"`},
		{`{"name":"x","type":"int","origin":"exo","name":"y"}`, diag.BadValue, 41, "appears twice"},
		{`{"type":"int","origin":"exo"}`, diag.MissingField, 1, `lacks "name"`},
		{`{"name":"min","type":"int","origin":"exo"}`, diag.BadValue, 9, "invalid attribute name"},
		{`{"name":"a.b","type":"int","origin":"exo"}`, diag.BadValue, 9, "invalid attribute name"},
		{`{"name":"x","type":"string","origin":"exo"}`, diag.BadValue, 20, "unknown type"},
		{`{"name":"x","type":"int","origin":"endogenous"}`, diag.BadValue, 35, "unknown origin"},
		{`{"name":"x","type":"int","origin":"endo"}`, diag.MissingField, 1, `lacks "path"`},
		{`{"name":"x","type":"int","origin":"endo","path":"request.stream"}`, diag.PolicyEndoPath, 49, "unsupported endogenous path"},
		{`{"name":"x","type":"float","origin":"endo","path":"request.count"}`, diag.BadValue, 1, "request fields are ints"},
		{`{"name":"x","type":"int","origin":"endo","path":"request.count","default":3}`, diag.BadValue, 65, "has a default"},
		{`{"name":"x","type":"int","origin":"exo","path":"request.count"}`, diag.BadValue, 41, "has a path"},
		{`{"name":"x","type":"int","origin":"exo","default":1.5}`, diag.BadValue, 51, "integer"},
		{`{"name":"x","type":"int","origin":"exo","default":9223372036854775808}`, diag.BadValue, 51, "integer"},
		{`{"name":"x","type":"bool","origin":"exo","default":1}`, diag.BadValue, 52, "true or false"},
		{`{"name":"x","type":"float","origin":"exo","default":"1"}`, diag.BadValue, 53, "must be a number"},
		{`{"name":"x","type":"float","origin":"exo","default":1e999}`, diag.BadValue, 53, "out of range"},
		{`{"name":"x","type":"vector","origin":"exo","default":[1,"a"]}`, diag.BadValue, 54, "element 1 must be a number"},
		{`{"name":"x","type":"vector","origin":"exo","default":null}`, diag.BadValue, 54, "array of numbers"},
		{`{"name":"x","type":"vector","origin":"exo","default":[1,2,3,4,5]}`, diag.PolicyVector, 54, "over THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=4"},
		{`{"name":"x","type":"int","origin":"exo","valid_after":"yesterday"}`, diag.BadValue, 55, "valid_after"},
		{`{"name":"x","type":"int","origin":"exo","valid_after":"3000-01-01"}`, diag.BadValue, 55, "outside 1678-2261"},
	}, func(line []byte) []diag.Diagnostic {
		_, ds := ParseAttribute("f.jsonl", 3, line, utc)
		return ds
	})
}

func TestParseSchedule(t *testing.T) {
	line := `{"file":"ring.json","collective":"all_reduce","nranks":8,"nlocalranks":4,"min_bytes":1024,"max_bytes":1048576,` +
		`"inplace":true,"outofplace":false,"usable":"msgsize > 0","preference":"1.5","replaces":2,"valid_after":"2025-01-01","name":"ring"}`
	got, ds := ParseSchedule("s.jsonl", 6, []byte(line), utc)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	want := Schedule{File: "ring.json", Collective: ir.AllReduce, NRanks: 8, NLocalRanks: 4, MinBytes: 1024, MaxBytes: 1048576,
		InPlace: ptr(true), OutOfPlace: ptr(false), Usable: "msgsize > 0", UsableCol: strings.Index(line, "msgsize > 0") + 1,
		Preference: "1.5", PreferenceCol: strings.Index(line, `1.5"`) + 1, Replaces: 2,
		ValidAfter: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(), Name: "ring"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	got, ds = ParseSchedule("s.jsonl", 1, []byte(`{"file":"a.json","collective":"allgather","nranks":2}`), utc)
	want = Schedule{File: "a.json", Collective: ir.AllGather, NRanks: 2, Usable: "true", Preference: "0", Replaces: -1, ValidAfter: Always}
	if d := cmp.Diff(want, got); d != "" || len(ds) > 0 {
		t.Fatalf("defaults %v (-want +got):\n%s", ds, d)
	}
}

func TestParseScheduleErrors(t *testing.T) {
	const head = `{"file":"a.json","collective":"allreduce","nranks":8`
	checkBad(t, "schedule", []bad{
		{`{"file":"a.json","collective":"allreduce"}`, diag.MissingField, 1, `lacks "nranks"`},
		{`{"file":"a.json","collective":"allmerge","nranks":8}`, diag.UnknownCollective, 31, "unknown collective"},
		{`{"file":"","collective":"allreduce","nranks":8}`, diag.BadValue, 9, "file is empty"},
		{head + `,"nranks2":1}`, diag.UnknownField, 54, `unknown field "nranks2"`},
		{`{"file":"a.json","collective":"allreduce","nranks":0}`, diag.BadValue, 52, "integer in [1, 65536]"},
		{head + `,"nlocalranks":-1}`, diag.BadValue, 68, "integer in [0, 65536]"},
		{head + `,"min_bytes":10,"max_bytes":5}`, diag.BadWindow, 1, "min_bytes 10 > max_bytes 5"},
		{head + `,"inplace":false,"outofplace":false}`, diag.NoArrangement, 1, "both false"},
		{head + `,"inplace":"yes"}`, diag.BadValue, 64, "true or false"},
		{head + `,"usable":true}`, diag.BadValue, 63, "must be a string"},
		{head + `,"replaces":2}`, diag.BadValue, 65, "this entry's id is 2"},
		{head + `,"replaces":-1}`, diag.BadValue, 65, "integer in [0,"},
	}, func(line []byte) []diag.Diagnostic {
		_, ds := ParseSchedule("f.jsonl", 3, line, utc)
		return ds
	})
}

func TestParseGenerated(t *testing.T) {
	line := `{"gen":"ring","protocol":"LL","channels":"clamp(64 / nranks, 1, 32)","collective":"allreduce","avoid":[1],"name":"r"}`
	got, ds := ParseSchedule("s.jsonl", 2, []byte(line), utc)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	want := Schedule{Gen: &Generator{Algorithm: "ring", Protocol: ir.LL, Channels: "clamp(64 / nranks, 1, 32)",
		ChannelsCol: strings.Index(line, `clamp`) + 1, Avoid: []int{1}, Col: strings.Index(line, `ring"`) + 1},
		Collective: ir.AllReduce, Usable: "true", Preference: "0", Replaces: -1, ValidAfter: Always, Name: "r"}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	if l, g := got.Label(), got.Gen.String(); l != "r" || g != "gen:ring ll channels=clamp(64 / nranks, 1, 32) avoid=[1]" {
		t.Errorf("Label %q, String %q", l, g)
	}
	got, ds = ParseSchedule("s.jsonl", 1, []byte(`{"gen":"hierarchical","collective":"allgather","nranks":8,"channels":4}`), utc)
	if len(ds) > 0 || got.Gen == nil || got.Gen.Channels != "4" || got.NRanks != 8 || got.Label() != "gen:hierarchical" {
		t.Fatalf("%+v %v", got, ds)
	}
}

func TestParseGeneratedErrors(t *testing.T) {
	const head = `{"gen":"ring","collective":"allreduce"`
	checkBad(t, "schedule", []bad{
		{`{"collective":"allreduce","nranks":8}`, diag.MissingField, 1, `lacks "file" (or "gen")`},
		{`{"gen":"ring","file":"a.json","collective":"allreduce"}`, diag.BadValue, 2, "both file and gen"},
		{`{"gen":"ring","collective":"alltoall"}`, diag.BadValue, 8, `generator "ring" does not serve alltoall`},
		{`{"gen":"nosuch","collective":"allreduce"}`, diag.BadValue, 8, `unknown generator "nosuch"`}, // t1 L9: it said "does not serve"
		{head + `,"channels":0}`, diag.BadValue, 51, "channels must be in [1, 32]"},
		{head + `,"channels":33}`, diag.BadValue, 51, "channels must be in [1, 32]"},
		{head + `,"channels":"-5"}`, diag.BadValue, 51, "channels must be in [1, 32], got -5"},
		{head + `,"channels":"100"}`, diag.BadValue, 51, "channels must be in [1, 32], got 100"},
		{head + `,"channels":""}`, diag.BadValue, 51, "channels is empty"},
		{head + `,"channels":true}`, diag.BadValue, 51, "must be a string"},
		{head + `,"protocol":"LL128x"}`, diag.BadValue, 51, "protocol"},
		{head + `,"avoid":3}`, diag.BadValue, 48, "array of ranks"},
		{head + `,"avoid":[-1]}`, diag.BadValue, 48, "outside [0, 65536)"},
		{head + `,"avoid":[2,2]}`, diag.BadValue, 8, "repeated"},
		{`{"file":"a.json","collective":"allreduce","nranks":8,"channels":2}`, diag.UnknownField, 54, `"channels" in an entry without gen`},
	}, func(line []byte) []diag.Diagnostic {
		_, ds := ParseSchedule("f.jsonl", 3, line, utc)
		return ds
	})
}

func TestParseValue(t *testing.T) {
	got, ds := ParseValue("v.jsonl", 1, []byte(`{"value":[1,2],"valid_after":"2025-01-01T00:00:00Z"}`), bc.Vector, utc)
	want := ValueEntry{Value: Value{Type: bc.Vector, Vec: []float64{1, 2}}, ValidAfter: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
	if d := cmp.Diff(want, got); d != "" || len(ds) > 0 {
		t.Fatalf("%v (-want +got):\n%s", ds, d)
	}
	checkBad(t, "value", []bad{
		{`{"valid_after":"2025-01-01"}`, diag.MissingField, 1, `lacks "value"`},
		{`{"value":3,"when":1}`, diag.UnknownField, 12, `unknown field "when"`},
		{`{"value":"3"}`, diag.BadValue, 10, "integer"},
		{`{"value":3`, diag.Syntax, 11, "unexpected end"},
	}, func(line []byte) []diag.Diagnostic {
		_, ds := ParseValue("f.jsonl", 3, line, bc.Int, utc)
		return ds
	})
}

func TestValidAfterLocalStandardTime(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	// New York standard time is UTC-5 all year, also in July (DST ignored).
	for _, tc := range []struct{ in, utc string }{
		{"2025-01-15T12:00:00", "2025-01-15T17:00:00Z"},
		{"2025-07-15T12:00:00", "2025-07-15T17:00:00Z"},
		{"2025-03-09 02:30:00", "2025-03-09T07:30:00Z"}, // skipped by DST, still well defined
		{"2025-11-02T01:30", "2025-11-02T06:30:00Z"},    // repeated by DST, still one instant
		{"2025-07-15", "2025-07-15T05:00:00Z"},
		{"2025-07-15T12:00:00.5", "2025-07-15T17:00:00.5Z"},
		{"2025-07-15T12:00:00+02:00", "2025-07-15T10:00:00Z"}, // an explicit zone wins
	} {
		got, err := ParseValidAfter(tc.in, ny)
		want, _ := time.Parse(time.RFC3339Nano, tc.utc)
		if err != nil || got != want.UnixNano() {
			t.Errorf("ParseValidAfter(%q) = %v, %v; want %s", tc.in, time.Unix(0, got).UTC(), err, tc.utc)
		}
	}
	// Southern hemisphere: Sydney's standard offset is +10 (DST in January).
	syd, _ := time.LoadLocation("Australia/Sydney")
	if off := StandardOffset(syd, 2025); off != 10*3600 {
		t.Errorf("Sydney standard offset %d", off)
	}
}

func TestTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.jsonl")
	tl := NewTail(path)
	var got []string
	read := func() []string {
		got = got[:0]
		if err := tl.Read(func(l Line) {
			s := string(l.Text)
			if l.TooLong {
				s = "TOOLONG:" + s[:3]
			}
			got = append(got, s)
		}); err != nil {
			t.Fatal(err)
		}
		return append([]string(nil), got...)
	}
	if r := read(); len(r) != 0 {
		t.Fatalf("missing file gave %v", r)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func(s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write("a\nb\r\n{\"torn")
	if r := read(); !cmp.Equal(r, []string{"a", "b"}) {
		t.Fatalf("got %v", r)
	}
	if r := read(); len(r) != 0 {
		t.Fatalf("torn line delivered early: %v", r)
	}
	write("\":1}\n\n")
	if r := read(); !cmp.Equal(r, []string{`{"torn":1}`, ""}) {
		t.Fatalf("got %v", r)
	}
	write(strings.Repeat("x", MaxLineBytes+10) + "\nz\n")
	if r := read(); !cmp.Equal(r, []string{"TOOLONG:xxx", "z"}) {
		t.Fatalf("got %v", r)
	}
	if tl.Lines() != 6 {
		t.Fatalf("Lines = %d", tl.Lines())
	}
	if n := testing.AllocsPerRun(100, func() { tl.Read(func(Line) {}) }); n != 0 {
		t.Fatalf("an idle Read allocates %v times", n)
	}
}

func TestFieldCol(t *testing.T) {
	line := []byte(`{"file":"a.json", "collective" : "allreduce","nranks":8}`)
	for key, want := range map[string]int{"file": 9, "collective": 34, "nranks": 55, "absent": 1} {
		if got := FieldCol(line, key); got != want {
			t.Errorf("FieldCol(%q) = %d, want %d", key, got, want)
		}
	}
	if got := FieldCol([]byte(`not json`), "file"); got != 1 {
		t.Errorf("FieldCol(malformed) = %d, want 1", got)
	}
}

// TestParseTime: Unix seconds and timestamps, and times outside 1678–2261
// rejected rather than wrapped (theseusc select --at used to print 1970
// for 9999999999 and 1e300).
func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in  string
		utc string // "" for an error
	}{
		{"1735689600", "2025-01-01T00:00:00Z"},
		{" 1735689600.5 ", "2025-01-01T00:00:00.5Z"},
		{"-1e3", "1969-12-31T23:43:20Z"},
		{"2025-01-01T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"2025-01-01", "2025-01-01T00:00:00Z"},
		{"9999999999", ""},
		{"-99999999999999", ""},
		{"99999999999999", ""},
		{"1e300", ""},
		{"-9220000000", ""}, // 1677-10-30: inside int64 nanoseconds, outside 1678-2261
		{"9220000000", ""},  // 2262-03-03
		{"-9200000000", "1678-06-18T12:26:40Z"},
		{"9210000000", "2261-11-08T05:20:00Z"},
		{"1677-12-31", ""},
		{"2262-01-01", ""},
		{"NaN", ""},
		{"yesterday", ""},
	} {
		got, err := ParseTime(tc.in, time.UTC)
		if tc.utc == "" {
			if err == nil {
				t.Errorf("ParseTime(%q) = %v, %v; want an error", tc.in, time.Unix(0, got).UTC(), err)
			}
			continue
		}
		want, _ := time.Parse(time.RFC3339Nano, tc.utc)
		if err != nil || got != want.UnixNano() {
			t.Errorf("ParseTime(%q) = %v, %v; want %s", tc.in, time.Unix(0, got).UTC(), err, tc.utc)
		}
	}
	if _, err := ParseTime("9999999999", time.UTC); err == nil || err.Error() != "9999999999 seconds is outside 1678-2261" {
		t.Errorf("error %v", err)
	}
}

func TestParseP2P(t *testing.T) {
	line := `{"gen":"p2p","collective":"sendrecv","nlocalranks":2,"chunk_bytes":262144,"slots":8,"channels":16,"threads":1024,` +
		`"eager_bytes":4096,"direct":false,"preference":"nranks","name":"wide"}`
	got, ds := ParseSchedule("s.jsonl", 4, []byte(line), utc)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	eager, direct := int64(4096), false
	want := Schedule{Collective: ir.SendRecv, NLocalRanks: 2, Usable: "true", Preference: "nranks", PreferenceCol: strings.Index(line, `nranks"`) + 1,
		Replaces: -1, ValidAfter: Always, Name: "wide",
		P2P: &P2PEntry{ChunkBytes: 262144, Slots: 8, Channels: 16, Threads: 1024, EagerBytes: &eager, Direct: &direct}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	const head = `{"gen":"p2p","collective":"sendrecv"`
	checkBad(t, "p2p", []bad{
		{`{"gen":"p2p"}`, diag.MissingField, 1, `lacks "collective"`},
		{`{"gen":"p2p","collective":"allreduce"}`, diag.BadValue, 27, "serves sendrecv"},
		{head + `,"chunk_bytes":1000}`, diag.BadValue, 52, "integer in [1024,"},
		{head + `,"chunk_bytes":1100}`, diag.BadValue, 52, "multiple of 256"},
		{head + `,"channels":33}`, diag.BadValue, 49, "integer in [1, 32]"},
		{head + `,"threads":100}`, diag.BadValue, 48, "multiple of 32"},
		{head + `,"file":"x.json"}`, diag.UnknownField, 38, `unknown field "file"`},
		{head + `,"min_bytes":1}`, diag.UnknownField, 38, `unknown field "min_bytes"`},
	}, func(line []byte) []diag.Diagnostic {
		_, ds := ParseSchedule("f.jsonl", 3, line, utc)
		return ds
	})
}
