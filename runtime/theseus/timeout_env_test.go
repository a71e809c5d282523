//go:build linux

package theseus

import (
	"testing"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// TestHugeTimeout: a THESEUS_TIMEOUT far beyond any real wait (users set
// one to mean "never") is taken as env.MaxTimeout. Such values used to
// overflow the bootstrap's deadline arithmetic, which then hung or failed
// at once with a timeout.
func TestHugeTimeout(t *testing.T) {
	t.Setenv("THESEUS_TIMEOUT", "9223372036854")
	env.Reset()
	t.Cleanup(env.Reset)
	comms, _ := localComms(t, 2, func(c *Config) { c.Options.Timeout = 0 })
	errs := onEach(comms, func(c *Comm) error {
		p, err := c.MemAlloc(4096)
		if err != nil {
			return err
		}
		return c.AllReduce(p, p+1024, 8, Float32, Sum, nil)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
