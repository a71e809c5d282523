package log

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/theseus-ccl/theseus/runtime/env"
)

func TestLineFormatAndMask(t *testing.T) {
	var buf bytes.Buffer
	SetOutput(&buf)
	SetLevel(Info, Init|Coll)
	SetRank(3)
	Infof(Coll, "allreduce count %d", 7)
	Infof(Net, "hidden")
	Tracef(Coll, "hidden too")
	Warnf(Net, "peer %d lost", 2)
	re := regexp.MustCompile(`^[^:]*:\d+:\d+ \[3\] THESEUS INFO COLL allreduce count 7\n[^:]*:\d+:\d+ \[3\] THESEUS WARN NET peer 2 lost\n$`)
	if !re.MatchString(buf.String()) {
		t.Fatalf("unexpected log:\n%s", buf.String())
	}
	if LastWarning() != "peer 2 lost" {
		t.Fatalf("last warning %q", LastWarning())
	}
}

func TestParseSubsys(t *testing.T) {
	m, err := ParseSubsys("^NET,SHM")
	if err != nil || m != All&^(Net|Shm) {
		t.Fatalf("got %b, %v", m, err)
	}
	if _, err := ParseSubsys("INIT,BOGUS"); err == nil {
		t.Fatal("accepted BOGUS")
	}
}

func TestDisabledLineAllocatesNothing(t *testing.T) {
	SetLevel(Warn, Init)
	x := 42
	allocs := testing.AllocsPerRun(1000, func() {
		if On(Info, Coll) {
			Infof(Coll, "x=%d", x)
		}
	})
	if allocs != 0 {
		t.Fatalf("disabled line allocated %v times", allocs)
	}
}

// TestBadDebugValues: THESEUS_DEBUG=LOUD used to be ignored silently; an
// invalid level or subsystem list is reported once on standard error
// (not through the WARN path, which the bad level would hide).
func TestBadDebugValues(t *testing.T) {
	t.Cleanup(env.Reset)
	for _, tc := range []struct {
		debug, subsys string
		level         Level
		mask          Subsys
		warn          string
	}{
		{"info", "COLL,NET", Info, Coll | Net, ""},
		{"", "INIT", None, Init, ""},
		{"LOUD", "INIT", None, Init, `theseus: warning: THESEUS_DEBUG="LOUD": want one of VERSION, WARN, INFO, ABORT, TRACE; debug output stays off` + "\n"},
		{"WARN", "INIT,BOGUS", Warn, Init, `theseus: warning: THESEUS_DEBUG_SUBSYS="INIT,BOGUS": unknown debug subsystem "BOGUS" (want INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, CALL, EXECUTOR, NCCL, SELECTOR or ALL); using INIT` + "\n"},
	} {
		t.Setenv("THESEUS_DEBUG", tc.debug)
		t.Setenv("THESEUS_DEBUG_SUBSYS", tc.subsys)
		env.Reset()
		var errb bytes.Buffer
		lv, m := configure(&errb)
		if lv != tc.level || m != tc.mask || errb.String() != tc.warn {
			t.Errorf("THESEUS_DEBUG=%q THESEUS_DEBUG_SUBSYS=%q: level %v, mask %b, warning %q; want %v, %b, %q",
				tc.debug, tc.subsys, lv, m, errb.String(), tc.level, tc.mask, tc.warn)
		}
	}
}
