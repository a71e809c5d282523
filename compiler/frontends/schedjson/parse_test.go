package schedjson

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// mark is where a test input expects its first diagnostic; it is removed
// before parsing.
const mark = "§"

// doc is a valid one-rank schedule with holes: header fields, then the
// rank, threadblock and op text.
func doc(header, rank, tb, op string) string {
	if header == "" {
		header = `"version": 1, "name": "t", "collective": "allreduce", "nranks": 1, "protocol": "simple",
  "chunks_per_block": 1, "inplace": false, "outofplace": true`
	}
	if op == "" {
		op = `{"op": "copy", "src": {"buf": "i", "off": 0}, "dst": {"buf": "o", "off": 0}, "count": 1}`
	}
	return "{\n  " + header + ",\n  \"ranks\": [\n    {" + rank + "\"threadblocks\": [\n      {" + tb +
		"\"ops\": [\n        " + op + "\n      ]}\n    ]}\n  ]\n}\n"
}

func TestParseValid(t *testing.T) {
	p, ds := Parse("t.json", []byte(doc("", "", "", "")))
	if len(ds) != 0 {
		t.Fatalf("diagnostics: %v", ds)
	}
	want := irtest.New(ir.AllReduce, 1, 1).Name("t")
	want.Rank(0).PrimTB().Copy(1, I(0), O(0))
	if d := irtest.Diff(want.Build(), p); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if p.File != "t.json" {
		t.Errorf("File = %q", p.File)
	}
	// Positions: the opening brace of each element.
	for _, c := range []struct {
		what string
		got  ir.Pos
		want ir.Pos
	}{
		{"program", p.Pos, ir.Pos{Line: 1, Col: 1}},
		{"rank", p.Ranks[0].Pos, ir.Pos{Line: 5, Col: 5}},
		{"threadblock", p.Ranks[0].TBs[0].Pos, ir.Pos{Line: 6, Col: 7}},
		{"op", p.Ranks[0].TBs[0].Ops[0].Pos, ir.Pos{Line: 7, Col: 9}},
	} {
		if c.got != c.want {
			t.Errorf("%s at %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	rooted := `"version": 1, "name": "t", "collective": "broadcast", "nranks": 1, "protocol": "simple",
  "chunks_per_block": 1, "inplace": false, "outofplace": true`
	cases := []struct {
		name string
		in   string
		code diag.Code
		msg  string // a substring of the first diagnostic's message or hint
	}{
		{"empty", mark, diag.Syntax, "unexpected end"},
		{"byte-order mark", mark + "\ufeff" + doc("", "", "", ""), diag.Syntax, "byte-order mark"},
		{"truncated", `{"version": 1, "ranks": [` + mark, diag.Syntax, "unexpected end"},
		{"truncated in string", `{"version": 1, "na` + mark, diag.Syntax, "unexpected end"},
		{"trailing comma", `{"version": 1,` + mark + `}`, diag.Syntax, "looking for beginning of object key"},
		{"second value", `{"version": 1} ` + mark + `{}`, diag.Syntax, "after top-level value"},
		{"bad literal", "{\n  \"inplace\": tru" + mark + "\n}", diag.Syntax, "in literal true"},
		{"not an object", mark + `[1, 2]`, diag.BadValue, "must be an object"},
		{"unknown field", strings.Replace(doc("", "", "", ""), `"nranks"`, mark+`"nrank"`, 1), diag.UnknownField, `did you mean "nranks"`},
		{"unknown op field", doc("", "", "", `{"op": "nop", `+mark+`"cnt": 1}`), diag.UnknownField, `did you mean "count"`},
		{"string for int", strings.Replace(doc("", "", "", ""), `"nranks": 1`, `"nranks": `+mark+`"1"`, 1), diag.BadValue, "must be an integer, not a string"},
		{"fraction", doc("", "", "", `{"op": "copy", "src": "i[0]", "dst": "o[0]", "count": `+mark+`1.5}`), diag.BadValue, "must be an integer"},
		{"huge int", doc("", "", "", `{"op": "copy", "src": "i[0]", "dst": "o[0]", "count": `+mark+`99999999999999999999}`), diag.BadValue, "out of range"},
		{"negative offset", doc("", "", "", `{"op": "copy", "src": {"buf": "i", "off": `+mark+`-1}, "dst": "o[0]", "count": 1}`), diag.BadValue, "out of range [0, "},
		{"index below -1", doc("", "", `"send_peer": `+mark+`-2, `, ""), diag.BadValue, "out of range [-1, "},
		{"null", doc("", "", `"chan": `+mark+`null, `, ""), diag.BadValue, "not null"},
		{"duplicate field", doc("", "", "", `{"op": "nop", "publish": true, `+mark+`"publish": false}`), diag.BadValue, "appears twice"},
		{"bad protocol", strings.Replace(doc("", "", "", ""), `"protocol": "simple"`, `"protocol": `+mark+`"ll128"`, 1), diag.BadValue, "unknown protocol"},
		{"bad buffer", doc("", "", "", `{"op": "copy", "src": {"buf": `+mark+`"x", "off": 0}, "dst": "o[0]", "count": 1}`), diag.BadValue, "unknown buffer"},
		{"bad ref string", doc("", "", "", `{"op": "copy", "src": `+mark+`"i3", "dst": "o[0]", "count": 1}`), diag.BadValue, "want [@CHAN:]BUF[OFF][/pkt]"},
		{"ref number", doc("", "", "", `{"op": "copy", "src": `+mark+`3, "dst": "o[0]", "count": 1}`), diag.BadValue, "ref object or string"},
		{"ref without off", doc("", "", "", `{"op": "copy", "src": `+mark+`{"buf": "i"}, "dst": "o[0]", "count": 1}`), diag.MissingField, `needs "buf" and "off"`},
		{"src and srcs", doc("", "", "", `{"op": "copy", "src": "i[0]", "srcs": `+mark+`["i[0]"], "dst": "o[0]", "count": 1}`), diag.BadValue, `both "src" and "srcs"`},
		{"dep shape", doc("", "", "", `{"op": "nop", "deps": [`+mark+`[1]]}`), diag.BadValue, "want 2"},
		{"barrier fields", doc("", "", "", `{"op": "barrier", "barrier": `+mark+`{"id": 0}}`), diag.MissingField, "threadblocks"},
		{"meta value", strings.Replace(doc("", "", "", ""), `"outofplace": true`, `"outofplace": true, "meta": {"k": `+mark+`1}`, 1), diag.BadValue, "must be a string"},
		{"missing count", doc("", "", "", mark+`{"op": "copy", "src": "i[0]", "dst": "o[0]"}`), diag.MissingField, `no "count"`},
		{"missing op", doc("", "", "", mark+`{"count": 1}`), diag.MissingField, `no "op"`},
		{"missing peer", doc("", `"channels": [`+mark+`{"id": 0}], `, "", ""), diag.MissingField, `no "peer"`},
		{"missing header field", mark + `{"version": 1, "ranks": []}`, diag.MissingField, `no "name"`},
		{"missing root", mark + doc(rooted, "", "", ""), diag.MissingField, `needs a "root"`},
		{"unknown op", doc("", "", "", `{"op": `+mark+`"sendd", "src": "i[0]", "count": 1}`), diag.UnknownOp, `did you mean "send"`},
		{"msccl op name", doc("", "", "", `{"op": `+mark+`"glres", "src": "i[0]", "count": 1}`), diag.UnknownOp, "use one of nop, copy"},
		{"near op name", doc("", "", "", `{"op": `+mark+`"coppy", "src": "i[0]", "count": 1}`), diag.UnknownOp, `did you mean "copy"`},
		{"foreign op name", doc("", "", "", `{"op": `+mark+`"cpy", "src": "i[0]", "count": 1}`), diag.UnknownOp, "MSCCL cpy is copy"},
		{"version 2", strings.Replace(doc("", "", "", ""), `"version": 1`, `"version": `+mark+`2`, 1), diag.BadVersion, "unsupported schedule format version 2"},
		{"version string", strings.Replace(doc("", "", "", `{"bogus": 1}`), `"version": 1`, `"version": `+mark+`"1"`, 1), diag.BadVersion, "must be the number 1"},
		{"missing version", strings.Replace(mark+doc("", "", "", ""), `"version": 1,`, ``, 1), diag.MissingField, `add "version": 1`},
		{"rank id", doc("", `"rank": `+mark+`1, `, "", ""), diag.DuplicateID, "is 1 but this is rank 0"},
		{"tb id", doc("", "", `"id": `+mark+`3, `, ""), diag.DuplicateID, "is 3 but this is threadblock 0"},
		{"rank and id", doc("", `"rank": 0, "id": `+mark+`0, `, "", ""), diag.BadValue, `both "rank" and "id"`},
		{"nranks too large", strings.Replace(doc("", "", "", ""), `"nranks": 1`, `"nranks": `+mark+`65537`, 1), diag.TooLarge, "over the limit of 65536"},
		{"nranks zero", strings.Replace(doc("", "", "", ""), `"nranks": 1`, `"nranks": `+mark+`0`, 1), diag.BadValue, "out of range [1, 65536]"},
		{"unknown collective", strings.Replace(doc("", "", "", ""), `"allreduce"`, mark+`"allreduc"`, 1), diag.UnknownCollective, "unknown collective"},
		{"crlf lines", strings.ReplaceAll(doc("", "", "", `{"op": `+mark+`"bad"}`), "\n", "\r\n"), diag.UnknownOp, "unknown op"},
		{"tabs and utf-8", "{\n\t\"name\": \"ünïcode\", " + mark + "\"x\": 1}", diag.UnknownField, `unknown field "x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at := strings.Index(c.in, mark)
			if at < 0 {
				t.Fatal("no mark")
			}
			in := strings.Replace(c.in, mark, "", 1)
			line := strings.Count(in[:at], "\n") + 1
			col := at - strings.LastIndex(in[:at], "\n")
			p, ds := Parse("in.json", []byte(in))
			if p != nil || len(ds) == 0 {
				t.Fatalf("want errors, got program %v and %v", p != nil, ds)
			}
			// The diagnostic this case is about (others may come with it,
			// such as missing fields after an unknown one).
			d := ds[0]
			for _, x := range ds {
				if x.Code == c.code && x.Line == line && x.Col == col {
					d = x
					break
				}
			}
			if d.Code != c.code || d.Line != line || d.Col != col {
				t.Errorf("no %s at %d:%d in %v", c.code, line, col, ds)
			}
			for i := 1; i < len(ds); i++ {
				if ds[i].Line < ds[i-1].Line || ds[i].Line == ds[i-1].Line && ds[i].Col < ds[i-1].Col {
					t.Errorf("diagnostics out of order: %v", ds)
				}
			}
			if !strings.Contains(d.Msg+" hint: "+d.Hint, c.msg) {
				t.Errorf("diagnostic %q does not mention %q", d, c.msg)
			}
			for _, d := range ds {
				if d.File != "in.json" || d.Line < 1 || d.Col < 1 || d.Hint == "" || d.Severity != diag.Error {
					t.Errorf("incomplete diagnostic %+v", d)
				}
				if _, ok := diag.Lookup(d.Code); !ok {
					t.Errorf("undocumented code in %v", d)
				}
			}
		})
	}
}

// TestParseErrorSubject checks that diagnostics inside a rank, threadblock
// or op name them.
func TestParseErrorSubject(t *testing.T) {
	_, ds := Parse("x", []byte(doc("", "", "", `{"op": "nope"}`)))
	if len(ds) != 1 || ds[0].Rank != 0 || ds[0].TB != 0 || ds[0].Step != 0 {
		t.Fatalf("got %+v", ds)
	}
	_, ds = Parse("x", []byte(strings.Replace(doc("", "", "", ""), `"outofplace": true`, `"outofplace": 1`, 1)))
	if len(ds) != 1 || ds[0].Rank != -1 || ds[0].TB != -1 || ds[0].Step != -1 {
		t.Fatalf("got %+v", ds)
	}
	want := "x:3:58: error[TS0003]: outofplace must be true or false, not a number (hint: use a value of the documented type and range)"
	if got := ds[0].String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestParseManyErrors: the walk goes on after value errors and reports
// each, in position order.
func TestParseManyErrors(t *testing.T) {
	in := doc("", `"input_chunks": "a", `, `"send_peer": "b", `, `{"op": "copy", "src": "i[x]", "dst": "o[0]", "count": -4, "zzz": 0}`)
	_, ds := Parse("m", []byte(in))
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s %d:%d", d.Code, d.Line, d.Col))
	}
	want := []string{"TS0003 5:22", "TS0003 6:21", "TS0003 7:31", "TS0003 7:63", "TS0002 7:67"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s\n%v", d, ds)
	}
}

func TestLimits(t *testing.T) {
	small := limits{input: 1 << 20, ranks: 2, ops: 3, channels: 2, tbs: 2, list: 2}
	cases := []struct {
		name, rank, tb, op string
		msg                string
	}{
		{"ops", "", "", `{"op": "nop"}, {"op": "nop"}, {"op": "nop"}, ` + mark + `{"op": "nop"}`, "more than 3 ops"},
		{"list", "", "", `{"op": "signal", "chans": [0, 1, ` + mark + `2]}`, "more than 2 chans entries"},
		{"deps", "", "", `{"op": "nop", "deps": [[0, 0], [0, 0], ` + mark + `[0, 0]]}`, "more than 2 deps entries"},
		{"srcs", "", "", `{"op": "reduce", "srcs": ["i[0]", "i[0]", ` + mark + `"i[0]"], "dst": "o[0]", "count": 1}`, "more than 2 srcs entries"},
		{"channels", `"channels": [{"peer": 0}, {"peer": 0}, ` + mark + `{"peer": 0}], `, "", "", "more than 2 channels"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := doc("", c.rank, c.tb, c.op)
			at := strings.Index(in, mark)
			in = strings.Replace(in, mark, "", 1)
			_, ds := parse("l", []byte(in), small)
			if len(ds) != 1 || ds[0].Code != diag.TooLarge || !strings.Contains(ds[0].Msg, c.msg) {
				t.Fatalf("got %v", ds)
			}
			line := strings.Count(in[:at], "\n") + 1
			if ds[0].Line != line {
				t.Errorf("line %d, want %d", ds[0].Line, line)
			}
		})
	}
	// Ranks and threadblocks.
	in := `{"ranks": [{}, {}, {}]}`
	if _, ds := parse("l", []byte(in), small); len(ds) != 1 || ds[0].Code != diag.TooLarge || ds[0].Col != 20 {
		t.Errorf("ranks: %v", ds)
	}
	in = `{"ranks": [{"threadblocks": [{}, {}]}, {"threadblocks": [{}]}]}`
	if _, ds := parse("l", []byte(in), small); len(ds) != 1 || ds[0].Code != diag.TooLarge || !strings.Contains(ds[0].Msg, "threadblocks") {
		t.Errorf("threadblocks: %v", ds)
	}
	// Input size.
	if _, ds := parse("l", []byte(`{"version": 1}`), limits{input: 4}); len(ds) != 1 || ds[0].Code != diag.TooLarge || ds[0].Line != 1 {
		t.Errorf("input: %v", ds)
	}
	// The real rank limit with a real (small) file.
	many := `{"ranks": [` + strings.Repeat("{}, ", ir.MaxRanks) + `{}]}`
	if _, ds := Parse("l", []byte(many)); len(ds) != 1 || ds[0].Code != diag.TooLarge {
		t.Errorf("%d ranks: %v", ir.MaxRanks+1, ds)
	}
}

func TestParseRef(t *testing.T) {
	for _, c := range []struct {
		in   string
		want ir.Ref
	}{
		{"i[3]", ir.Ref{Buf: ir.Input, Off: 3, Chan: -1}},
		{"o[0]", ir.Ref{Buf: ir.Output, Chan: -1}},
		{"s[9223372036854775807]", ir.Ref{Buf: ir.Scratch, Off: 1<<63 - 1, Chan: -1}},
		{"@1:s[4]/pkt", ir.Ref{Buf: ir.Scratch, Off: 4, Chan: 1, Packet: true}},
		{"s[2]/pkt", ir.Ref{Buf: ir.Scratch, Off: 2, Chan: -1, Packet: true}},
		{"@0:o[7]", ir.Ref{Buf: ir.Output, Off: 7, Chan: 0}},
	} {
		got, err := ParseRef(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if s := FormatRef(got); s != c.in {
			t.Errorf("FormatRef(%+v) = %q, want %q", got, s, c.in)
		}
	}
	for _, in := range []string{"", "i", "i[]", "i[-1]", "i[1", "x[1]", "@:i[1]", "@-1:i[1]", "@1i[1]", "i[1]/pk",
		"i[9223372036854775808]", "@2147483648:i[0]", "ii[1]", "i[ 1]", "i[+1]", "@1:@2:i[0]", "i[0]/pkt/pkt"} {
		if r, err := ParseRef(in); err == nil {
			t.Errorf("ParseRef(%q) = %+v, want an error", in, r)
		}
	}
}

func TestDefaultPeerChannels(t *testing.T) {
	ch := func(peer int, typ ir.ChannelType) ir.Channel { return ir.Channel{Peer: peer, Type: typ} }
	M, P := ir.MemoryChannel, ir.PortChannel
	p := &ir.Program{Ranks: []ir.Rank{
		{Channels: []ir.Channel{ch(1, M), ch(1, P), ch(1, M), ch(2, M), ch(0, M), ch(0, M), ch(7, M)}},
		{Channels: []ir.Channel{ch(0, P), ch(0, M), ch(0, M), ch(2, P)}},
		{Channels: []ir.Channel{ch(1, M), ch(-1, M)}},
	}}
	want := [][]int{
		{1, 0, 2, -1, 4, 5, -1}, // ch 3: rank 2 has no memory channel to 0; 4, 5: self-channels pair with themselves
		{1, 0, 2, -1},           // rank 2's channel to 1 is memory, not port
		{-1, -1},
	}
	if d := cmp.Diff(want, DefaultPeerChannels(p)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// Parse applies it only where peer_channel is absent.
	in := doc("", `"channels": [{"peer": 0}, {"peer": 0, "peer_channel": 0}, {"peer": 0, "type": "port"}], `, "", "")
	got, ds := Parse("c", []byte(in))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	if pc := []int{got.Ranks[0].Channels[0].PeerChannel, got.Ranks[0].Channels[1].PeerChannel, got.Ranks[0].Channels[2].PeerChannel}; !cmp.Equal(pc, []int{0, 0, 2}) {
		t.Errorf("peer channels %v, want [0 0 2]", pc)
	}
}

// TestCompactAndObjectRefsAgree: the two ref forms parse alike.
func TestCompactAndObjectRefsAgree(t *testing.T) {
	a, ds := Parse("a", []byte(doc("", `"channels": [{"peer": 0}], "scratch_chunks": 4, `, "",
		`{"op": "reduce", "srcs": ["i[0]", "@0:s[3]/pkt"], "dsts": ["o[0]", "@0:o[0]"], "count": 1}`)))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	b, ds := Parse("b", []byte(doc("", `"channels": [{"peer": 0}], "scratch_chunks": 4, `, "",
		`{"op": "reduce", "srcs": [{"buf": "input", "off": 0}, {"buf": "s", "off": 3, "chan": 0, "packet": true}], "dsts": [{"buf": "o", "off": 0, "chan": -1}, {"off": 0, "buf": "o", "chan": 0, "packet": false}], "count": 1}`)))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	if d := irtest.Diff(a, b); d != "" {
		t.Errorf("(-compact +object):\n%s", d)
	}
}

// TestGolden formats non-canonical inputs (testdata/golden/*.json) and
// compares with the .golden files (regenerate with -update).
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/golden/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, ds := Parse(f, data)
			if len(ds) != 0 {
				t.Fatal(ds)
			}
			out, err := Format(p)
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(f, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), string(out)); d != "" {
				t.Errorf("(-golden +got):\n%s", d)
			}
			roundTrip(t, p)
		})
	}
}

// TestHostileInputs: deep nesting and long inputs fail fast with positions.
func TestHostileInputs(t *testing.T) {
	deep := `{"meta": ` + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + `}`
	_, ds := Parse("deep", []byte(deep))
	if len(ds) != 1 || ds[0].Code != diag.Syntax || !strings.Contains(ds[0].Msg, "depth") {
		t.Errorf("deep nesting: %v", ds)
	}
	// Nesting under the scanner's limit inside an unknown field is skipped
	// without recursion.
	nested := `{"zz": ` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`
	_, ds = Parse("nested", []byte(nested))
	if len(ds) == 0 || ds[0].Code != diag.MissingField || ds[len(ds)-1].Code != diag.UnknownField {
		t.Errorf("nested: %v", ds)
	}
	// Numbers that claim a lot cost nothing.
	_, ds = Parse("n", []byte(strings.Replace(doc("", `"scratch_chunks": 9223372036854775807, `, "", ""), `"chunks_per_block": 1`, `"chunks_per_block": 9223372036854775807`, 1)))
	if len(ds) != 0 {
		t.Errorf("large sizes: %v", ds)
	}
}
