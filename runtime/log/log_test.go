package log

import (
	"bytes"
	"regexp"
	"testing"
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
