package gputest

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/cuda/driver"
)

// TestAbsent: on a machine without a driver Absent gives a reason and no
// error; with a driver it gives either nothing (a GPU) or the no-device
// reason, or an error that is not one of those two cases.
func TestAbsent(t *testing.T) {
	reason, err := Absent()
	switch lerr := driver.Load(); {
	case errors.Is(lerr, driver.ErrNoDriver):
		if reason == "" || err != nil {
			t.Errorf("no driver: Absent() = %q, %v; want a reason and no error", reason, err)
		}
	case lerr == nil:
		if err != nil {
			t.Errorf("driver loaded: Absent() error %v", err)
		}
	default:
		if (reason == "") == (err == nil) {
			t.Errorf("driver load error %v: Absent() = %q, %v; want exactly one of a reason or an error", lerr, reason, err)
		}
	}
}
