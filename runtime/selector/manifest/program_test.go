package manifest

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/diag"
)

var progAttrs = policy.AttrMap{
	"msgsize":   {Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqMessageSize},
	"slow_rank": {Name: "slow_rank", Type: bc.Int, Origin: bc.Exo},
	"bw":        {Name: "bw", Type: bc.Vector, Origin: bc.Exo},
}

func compiled(t *testing.T, src string, want policy.Want) *bc.Program {
	t.Helper()
	p, ds := policy.Compile(src, progAttrs, policy.Options{Want: want})
	if p == nil {
		t.Fatalf("%s: %v", src, ds)
	}
	return p
}

// TestPrecompile: the fields are added to a line without them, replaced in
// place in a line with them, every other byte is kept, and ParseSchedule
// reads back exactly the programs Marshal wrote, which Program accepts.
func TestPrecompile(t *testing.T) {
	line := `{"file":"a.json","collective":"allreduce","nranks":4, "usable":"msgsize <= 65536","preference":"10 - (slow_rank >= 0 ? 5 : 0)","name":"x"}`
	out, ds := Precompile("s.jsonl", 3, []byte(line), progAttrs, Options{})
	if out == nil || len(ds) > 0 {
		t.Fatalf("Precompile: %v", ds)
	}
	if !strings.HasPrefix(string(out), line[:len(line)-1]+`,"usable_program":"`) {
		t.Fatalf("fields not appended: %s", out)
	}
	s, ds := ParseSchedule("s.jsonl", 3, out, Options{})
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	u := compiled(t, "msgsize <= 65536", policy.WantBool)
	p := compiled(t, "10 - (slow_rank >= 0 ? 5 : 0)", policy.WantNumber)
	if string(s.UsableProgram) != string(bc.Marshal(u)) || string(s.PreferenceProgram) != string(bc.Marshal(p)) {
		t.Fatal("the programs read back differ from the compiled ones")
	}
	if _, err := Program(s.UsableProgram, s.Usable, policy.WantBool, 0); err != nil {
		t.Fatal(err)
	}
	// Again, over a line that has both: replaced where they stand.
	edited := strings.Replace(string(out), "msgsize <= 65536", "msgsize <= 1024", 1)
	again, ds := Precompile("s.jsonl", 3, []byte(edited), progAttrs, Options{})
	if again == nil || len(ds) > 0 {
		t.Fatal(ds)
	}
	if strings.Count(string(again), UsableProgramField) != 1 || !strings.HasSuffix(string(again), `"}`) {
		t.Fatalf("not replaced in place: %s", again)
	}
	s2, _ := ParseSchedule("s.jsonl", 3, again, Options{})
	if _, err := Program(s2.UsableProgram, s2.Usable, policy.WantBool, 0); err != nil {
		t.Fatalf("the recompiled program is not current: %v", err)
	}
	// A line whose expression does not compile gets nothing.
	if out, ds := Precompile("s.jsonl", 3, []byte(`{"file":"a.json","collective":"allreduce","nranks":4,"usable":"nosuch > 1"}`), progAttrs, Options{}); out != nil || len(ds) == 0 || ds[0].Code != diag.PolicyUnknown {
		t.Fatalf("an unknown attribute: out %s, %v", out, ds)
	}
}

// TestProgramStale: each reason the runtime compiles the text instead.
func TestProgramStale(t *testing.T) {
	u := bc.Marshal(compiled(t, "msgsize <= 65536", policy.WantBool))
	p := bc.Marshal(compiled(t, "msgsize", policy.WantNumber))
	v := bc.Marshal(compiled(t, "contains([1, 2, 3, 4, 5], slow_rank)", policy.WantBool))
	bad := append([]byte(nil), u...)
	bad[4] = 99 // the version byte
	for _, tc := range []struct {
		name string
		bin  []byte
		src  string
		want policy.Want
		max  int
		err  string
	}{
		{"absent", nil, "true", policy.WantBool, 0, "no precompiled program"},
		{"other text", u, "msgsize <= 1024", policy.WantBool, 0, "was compiled from"},
		{"version", bad, "msgsize <= 65536", policy.WantBool, 0, "version 99"},
		{"truncated", u[:len(u)-3], "msgsize <= 65536", policy.WantBool, 0, "bad encoding"},
		{"not bool", p, "msgsize", policy.WantBool, 0, "must be bool"},
		{"not a number", u, "msgsize <= 65536", policy.WantNumber, 0, "must be int or float"},
		{"long vector", v, "contains([1, 2, 3, 4, 5], slow_rank)", policy.WantBool, 4, "over THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH=4"},
	} {
		_, err := Program(tc.bin, tc.src, tc.want, tc.max)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
	prog := compiled(t, "slow_rank >= 0 && msgsize > 0", policy.WantBool)
	if err := CheckImports(prog, progAttrs); err != nil {
		t.Fatal(err)
	}
	for name, attrs := range map[string]policy.AttrMap{
		"undeclared": {"msgsize": progAttrs["msgsize"]},
		"retyped":    {"msgsize": progAttrs["msgsize"], "slow_rank": {Name: "slow_rank", Type: bc.Float, Origin: bc.Exo}},
		"other path": {"slow_rank": progAttrs["slow_rank"], "msgsize": {Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqCount}},
	} {
		if err := CheckImports(prog, attrs); err == nil {
			t.Errorf("%s: CheckImports accepted it", name)
		}
	}
}

// TestProgramFieldBad: a program field that is not a base64 string makes
// the line invalid (TS0003) at the value, like any bad field.
func TestProgramFieldBad(t *testing.T) {
	checkBad(t, "schedule", []bad{
		{`{"file":"a","collective":"allreduce","nranks":1,"usable_program":"@@@"}`, diag.BadValue, 66, "not a base64 program"},
		{`{"file":"a","collective":"allreduce","nranks":1,"preference_program":7}`, diag.BadValue, 70, "must be a string"},
		{`{"file":"a","collective":"allreduce","nranks":1,"usable_program":""}`, diag.BadValue, 66, "not a base64 program"},
	}, func(line []byte) []diag.Diagnostic { _, ds := ParseSchedule("f.jsonl", 3, line, utc); return ds })
}

func TestSetFields(t *testing.T) {
	q := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	for _, tc := range []struct{ in, want string }{
		{`{}`, `{"a":"x","b":"y"}`},
		{`{ }`, `{ "a":"x","b":"y"}`},
		{`{"b":1,"c":2} `, `{"b":"y","c":2,"a":"x"} `},
		{`{"a" : [1, 2] , "b":null}`, `{"a" : "x" , "b":"y"}`},
	} {
		got, err := SetFields([]byte(tc.in), []string{"a", "b"}, []json.RawMessage{q("x"), q("y")})
		if err != nil || string(got) != tc.want {
			t.Errorf("SetFields(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := SetFields([]byte(`[1]`), []string{"a"}, []json.RawMessage{q("x")}); err == nil {
		t.Error("SetFields accepted an array")
	}
}

// FuzzProgramFields: for any line, Precompile and SetFields never panic;
// a line Precompile returns parses cleanly, with programs Program accepts
// for its own text, and differs from the input only by the two fields; a
// program field of any content never panics ParseSchedule or Program.
func FuzzProgramFields(f *testing.F) {
	u := bc.Marshal(compiledF("msgsize <= 65536", policy.WantBool))
	for _, s := range []string{
		`{"file":"a.json","collective":"allreduce","nranks":4,"usable":"msgsize <= 65536","preference":"slow_rank"}`,
		`{"file":"a.json","collective":"allreduce","nranks":4,"usable":"msgsize <= 65536","usable_program":"` + base64Std(u) + `"}`,
		`{"file":"a.json","collective":"allreduce","nranks":4,"preference_program":"VFNQQgE="}`,
		`{"file":"a.json","collective":"allreduce","nranks":4,"usable":"contains(bw, 1.5)"}`,
		`{ }`, `{"usable_program":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		s, ds := ParseSchedule("s.jsonl", 1, line, Options{})
		if len(ds) == 0 {
			Program(s.UsableProgram, s.Usable, policy.WantBool, 0)
			Program(s.PreferenceProgram, s.Preference, policy.WantNumber, 0)
		}
		out, ds := Precompile("s.jsonl", 1, line, progAttrs, Options{})
		if out == nil {
			return
		}
		s, ds = ParseSchedule("s.jsonl", 1, out, Options{})
		if len(ds) > 0 {
			t.Fatalf("Precompile(%q) = %q: %v", line, out, ds)
		}
		if _, err := Program(s.UsableProgram, s.Usable, policy.WantBool, 0); err != nil {
			t.Fatalf("Precompile(%q): usable program: %v", line, err)
		}
		if _, err := Program(s.PreferenceProgram, s.Preference, policy.WantNumber, 0); err != nil {
			t.Fatalf("Precompile(%q): preference program: %v", line, err)
		}
		SetFields(line, []string{"x"}, []json.RawMessage{json.RawMessage(`1`)})
	})
}

func compiledF(src string, want policy.Want) *bc.Program {
	p, _ := policy.Compile(src, progAttrs, policy.Options{Want: want})
	return p
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// TestVerifiedForged (finding 10): a program whose code is not what its
// text compiles to (the text says 1, the code computes 1000, its Source
// set to the text) passes Program and CheckImports but not Verified; the
// honest program passes all three.
func TestVerifiedForged(t *testing.T) {
	opt := policy.Options{Want: policy.WantNumber}
	honest := bc.Marshal(compiled(t, "slow_rank < 0 ? 1 : 2", policy.WantNumber))
	if _, err := Verified(honest, "slow_rank < 0 ? 1 : 2", progAttrs, opt); err != nil {
		t.Fatalf("the honest program: %v", err)
	}
	p := compiled(t, "1000", policy.WantNumber)
	p.Source = "0001"
	forged := bc.Marshal(p)
	if q, err := Program(forged, "0001", policy.WantNumber, 0); err != nil || CheckImports(q, progAttrs) != nil {
		t.Fatalf("the forged program should pass the cheap checks: %v", err)
	}
	if _, err := Verified(forged, "0001", progAttrs, opt); err == nil || !strings.Contains(err.Error(), "not what its text compiles to") {
		t.Fatalf("the forged program: %v", err)
	}
}
