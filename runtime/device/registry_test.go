package device

import (
	"errors"
	"testing"
)

// TestOpenOnDevice: a backend registered with RegisterOnDevice is opened on
// the device asked for; one without falls back to Open.
func TestOpenOnDevice(t *testing.T) {
	errPlain := errors.New("plain open")
	Register("test-plain", func() (Backend, error) { return nil, errPlain })
	if _, err := OpenOnDevice("test-plain", 3); !errors.Is(err, errPlain) {
		t.Fatalf("fallback: %v", err)
	}
	var got int = -1
	Register("test-multi", func() (Backend, error) { return nil, errPlain })
	RegisterOnDevice("test-multi", func(dev int) (Backend, error) { got = dev; return nil, nil })
	if _, err := OpenOnDevice("test-multi", 3); err != nil || got != 3 {
		t.Fatalf("on device: %v, opened on %d", err, got)
	}
	if _, err := OpenOnDevice("test-missing", 1); err == nil {
		t.Fatal("a backend nobody registered opened")
	}
}
