package bytecode

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestMarshalRoundTrip(t *testing.T) {
	p := good()
	p.Floats = []float64{math.Inf(-1), 0.5}
	p.Vecs = [][]float64{{1, 2, 3}, {}}
	b := Marshal(p)
	q, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(p, q); d != "" {
		t.Fatalf("round trip differs (-want +got):\n%s", d)
	}
	if !strings.HasPrefix(string(b), Magic) {
		t.Fatalf("missing magic")
	}
}

func TestUnmarshalRejects(t *testing.T) {
	b := Marshal(good())
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "magic"},
		{"magic", append([]byte("XXXX"), b[4:]...), "magic"},
		{"version", append(append([]byte(Magic), 9), b[5:]...), "version 9"},
		{"truncated", b[:len(b)-3], "do not fit"},
		{"truncated header", b[:6], "truncated"},
		{"trailing", append(append([]byte(nil), b...), 0), "trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Unmarshal(tc.in)
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Unmarshal = %v, want ErrFormat mentioning %q", err, tc.want)
			}
		})
	}
	// Well-formed bytes of a bad program fail verification.
	bad := good()
	bad.Args[3] = 1
	var ve *VerifyError
	if _, err := Unmarshal(Marshal(bad)); !errors.As(err, &ve) {
		t.Fatalf("Unmarshal of a bad program = %v, want a *VerifyError", err)
	}
}

func TestDisassemble(t *testing.T) {
	want := `; source: "msgsize <= 65536 && slow_rank != 2"
; result bool, stack 2
; import 0: msgsize int endo request.messagesize
; import 1: slow_rank int exo
0000  REQ      11      ; request.messagesize  ` + "`msgsize`" + `
0001  PUSHI    0       ; 65536  ` + "`65536`" + `
0002  LEI              ;  ` + "`msgsize <= 65536`" + `
0003  JFK      7       ; -> 0007  ` + "`msgsize <= 65536 && slow_rank != 2`" + `
0004  ATTRI    1       ; slow_rank  ` + "`slow_rank`" + `
0005  PUSHI    1       ; 2  ` + "`2`" + `
0006  NEI              ;  ` + "`slow_rank != 2`" + `
`
	if d := cmp.Diff(want, good().Disassemble()); d != "" {
		t.Fatalf("Disassemble (-want +got):\n%s", d)
	}
}

// FuzzUnmarshal: decoding arbitrary bytes never panics; whatever decodes
// is a verified program that re-encodes to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	f.Add(Marshal(good()))
	f.Add([]byte(Magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Unmarshal(b)
		if err != nil {
			return
		}
		if err := Verify(p); err != nil {
			t.Fatalf("Unmarshal returned an unverified program: %v", err)
		}
		if got := Marshal(p); string(got) != string(b) {
			// Varints have one canonical form in Marshal but several accepted
			// spellings; re-decoding must still give the same program.
			q, err := Unmarshal(got)
			if err != nil || !cmp.Equal(p, q, cmpopts.EquateNaNs()) {
				t.Fatalf("re-encoding changed the program: %v", err)
			}
		}
	})
}
