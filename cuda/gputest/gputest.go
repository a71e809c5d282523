// Package gputest is the one rule for GPU tests (cuda, cuda/driver): skip,
// saying so, only when this machine has no NVIDIA driver (libcuda.so.1
// absent) or the driver sees no device; fail on any other error loading
// the driver or counting devices, so that a broken GPU machine does not
// report ok. Only tests import it.
package gputest

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/cuda/driver"
)

// Require skips t when there is no driver or no device and fails it when
// the driver is present but does not load or cannot count its devices.
func Require(t testing.TB) {
	t.Helper()
	if reason, err := Absent(); err != nil {
		t.Fatalf("GPU test: the CUDA driver is present but unusable: %v", err)
	} else if reason != "" {
		t.Skip("no GPU: " + reason)
	}
}

// Absent says why there is no GPU to test on ("" when there is one), or
// returns the error of a driver that is present but unusable.
func Absent() (reason string, err error) {
	if err := driver.Load(); err != nil {
		switch {
		case errors.Is(err, driver.ErrNoDriver):
			return "libcuda.so.1 not found; GPU tests need an NVIDIA driver and GPU", nil
		case driver.IsResult(err, driver.ErrorNoDevice):
			return "the driver sees no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)", nil
		}
		return "", err
	}
	n, err := driver.DeviceCount()
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "the driver sees no CUDA device", nil
	}
	return "", nil
}
