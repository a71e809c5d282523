package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

// TestFlagRanges (finding 12, L7): sizes and margins out of range, and a
// cluster of 3 replicas with no routes to its peers (it would wait for
// them forever, silently), are usage errors before anything starts.
func TestFlagRanges(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-schedule-bytes", "0"}, "--max-schedule-bytes 0"},
		{[]string{"--max-schedule-bytes", "-1"}, "--max-schedule-bytes -1"},
		{[]string{"--propagation-margin", "-5s"}, "--propagation-margin -5s"},
		{[]string{"--replicas", "0"}, "--replicas 0"},
		{[]string{"--cluster-listen", "127.0.0.1:0"}, "needs the routes of the other nodes"},
	} {
		var out, errs bytes.Buffer
		s := cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errs}
		dir := t.TempDir()
		args := append([]string{"--data", dir + "/data", "--contexts", dir + "/contexts", "--socket", dir + "/s.sock"}, tc.args...)
		if code := cli.Execute(newRoot(s), args, s); code != cli.ExitUsage || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit %d, %s; want a usage error naming %q", tc.args, code, errs.String(), tc.want)
		}
	}
	var out bytes.Buffer
	s := cli.Streams{In: strings.NewReader(""), Out: &out, Err: &out}
	cli.Execute(newRoot(s), []string{"--help"}, s)
	if strings.Contains(out.String(), "-1ns") {
		t.Errorf("--help shows a -1ns default:\n%s", out.String())
	}
}
