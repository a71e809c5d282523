package load

import (
	"testing"

	"github.com/theseus-ccl/theseus/diag"
)

func TestDetect(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       Kind
	}{
		{"a.tsb", "", KindBundle},
		{"a.tir", "", KindIRText},
		{"a.xml", "", KindMSCCL},
		{"a.json", `{"version":1,"gpus":[]}`, KindTheseus},
		{"a.json", `{"name":"x","gpus":[]}`, KindMSCCLPP},
		{"a.json", `{"name":"x"}`, KindTheseus},
		{"a.json", `{"gpus": [`, KindMSCCLPP},
		{"-", `<algo/>`, KindMSCCL},
		{"-", "  {\"version\":1}", KindTheseus},
		{"-", "program \"x\"", KindIRText},
		{"-", "TSBUNDLE....", KindBundle},
		{"-", "", KindUnknown},
		{"-", "42", KindUnknown},
	} {
		if got := Detect(c.name, []byte(c.data)); got != c.want {
			t.Errorf("Detect(%q, %q) = %v, want %v", c.name, c.data, got, c.want)
		}
	}
}

func TestParseErrorsDropProgram(t *testing.T) {
	s := Parse("bad.json", KindTheseus, []byte(`{"version": 1,`))
	if s.Program != nil || !s.HasErrors() || s.Diags[0].Code != diag.Syntax {
		t.Fatalf("got %+v", s)
	}
	s = Parse("x", KindUnknown, nil)
	if !s.HasErrors() {
		t.Fatal("unknown format accepted")
	}
}
