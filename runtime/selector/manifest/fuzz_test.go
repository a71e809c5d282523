package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
)

// FuzzParseLine feeds one line to every parser: none panics, and every
// diagnostic names the file and line, has a column inside the line (or
// just past it) and a hint.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"name":"slow_rank","type":"int","origin":"exo","default":-1,"valid_after":"2025-01-02T03:04:05"}`,
		`{"name":"msgsize","type":"int","origin":"endo","path":"request.messagesize"}`,
		`{"file":"ring.json","collective":"allreduce","nranks":8,"usable":"msgsize > 0","preference":"1","replaces":0}`,
		`{"value":[1,2,3],"valid_after":1700000000.5}`,
		`{"gen":"p2p","collective":"sendrecv","chunk_bytes":131072,"slots":4,"channels":8,"direct":true,"eager_bytes":0}`,
		`{"value":true}`, `{"a":{"b":[1,{"c":null}]}}`, `{`, `"x"`, `{"name":"x","name":"x"}`,
		`9999999999`, `-9.2e9`, `1735689600.5`, `2261-12-31T23:59:59Z`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		_, d1 := ParseAttribute("a.jsonl", 2, line, utc)
		_, d2 := ParseSchedule("s.jsonl", 2, line, utc)
		for _, typ := range []bc.Type{bc.Int, bc.Float, bc.Bool, bc.Vector} {
			_, d3 := ParseValue("v.jsonl", 2, line, typ, utc)
			d2 = append(d2, d3...)
		}
		for _, d := range append(d1, d2...) {
			if d.Line != 2 || d.File == "" || d.Col < 1 || d.Col > len(line)+1 || d.Hint == "" || d.Msg == "" {
				t.Fatalf("bad diagnostic for %q: %+v", line, d)
			}
		}
		for _, key := range []string{"file", "nranks", "value"} {
			if c := FieldCol(line, key); c < 1 || c > len(line)+1 {
				t.Fatalf("FieldCol(%q, %q) = %d", line, key, c)
			}
		}
		// ParseTime (theseusc select --at) never wraps: a time it accepts
		// lies in 1678-2261.
		if ns, err := ParseTime(string(line), time.UTC); err == nil {
			if y := time.Unix(0, ns).UTC().Year(); y < 1678 || y > 2261 {
				t.Fatalf("ParseTime(%q) = year %d", line, y)
			}
		}
	})
}

// FuzzTail writes arbitrary bytes in arbitrary pieces and checks that Tail
// delivers exactly the newline-terminated lines, in order, never the torn
// remainder.
func FuzzTail(f *testing.F) {
	f.Add([]byte("a\nbb\r\n{\"x\":1}\ntorn"), uint8(3))
	f.Add([]byte("\n\n\n"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		path := filepath.Join(t.TempDir(), "f.jsonl")
		w, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		tl := NewTail(path)
		defer tl.Close()
		var got [][]byte
		n := int(step%16) + 1
		for i := 0; i < len(data); i += n {
			if _, err := w.Write(data[i:min(i+n, len(data))]); err != nil {
				t.Fatal(err)
			}
			if err := tl.Read(func(l Line) { got = append(got, append([]byte(nil), l.Text...)) }); err != nil {
				t.Fatal(err)
			}
		}
		var want [][]byte
		parts := bytes.Split(data, []byte("\n"))
		for _, p := range parts[:len(parts)-1] {
			want = append(want, bytes.TrimSuffix(p, []byte("\r")))
		}
		if !cmp.Equal(want, got, cmp.Comparer(bytes.Equal)) {
			t.Fatalf("lines %q, want %q", got, want)
		}
	})
}
