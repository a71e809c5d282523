package nccltests

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCutAtEOF: a row cut by the end of the file (a run killed mid-
// line, a partial copy) says so, instead of blaming another program's
// output; a row cut mid-file keeps rowHint.
func TestCutAtEOF(t *testing.T) {
	row := "        4096          1024     float     sum      -1    63.22    0.06    0.06       0    73.24    0.06    0.06       0\n"
	cut := "        4096          1024     float     sum      -1    63.22    0.06"
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"at the end, no newline", hdr + row + cut,
			[]string{"f.txt:4:70: row ends after 7 of 13 columns (size count type redop root, then time algbw busbw #wrong out of place and in place) (hint: " + eofHint + ")"}},
		{"at the end, CRLF file", strings.ReplaceAll(hdr+row, "\n", "\r\n") + cut,
			[]string{"f.txt:4:70: row ends after 7 of 13 columns (size count type redop root, then time algbw busbw #wrong out of place and in place) (hint: " + eofHint + ")"}},
		{"mid-file", hdr + cut + "\n" + row,
			[]string{"f.txt:3:70: row ends after 7 of 13 columns (size count type redop root, then time algbw busbw #wrong out of place and in place) (hint: " + rowHint + ")"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Parse("f.txt", []byte(tc.in))
			got := errorStrings(t, err)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
			if len(out.Rows) != 1 || out.Rows[0].Bytes != 4096 {
				t.Errorf("rows %+v, want the whole 4096-byte row", out.Rows)
			}
		})
	}
}
