package main

import (
	"fmt"

	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// memIO moves test data between this process and a rank's backend memory,
// outside the timed loop: on the host backend through a view of the memory
// (Comm.HostBytes), on others through the backend's synchronous copies.
type memIO struct {
	c *theseus.Comm
}

// Write copies data to [p, p+len(data)).
func (m memIO) Write(p theseus.Ptr, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if m.c.BackendName() == "host" {
		b, err := m.c.HostBytes(p, int64(len(data)))
		if err != nil {
			return err
		}
		copy(b, data)
		return nil
	}
	if err := m.c.Internal().Backend().Upload(p, data); err != nil {
		return fmt.Errorf("rank %d: writing %d bytes at %#x: %w", m.c.Rank(), len(data), p, err)
	}
	return nil
}

// Fill sets n bytes at p to v.
func (m memIO) Fill(p theseus.Ptr, n int64, v byte) error {
	if n <= 0 {
		return nil
	}
	if m.c.BackendName() == "host" {
		b, err := m.c.HostBytes(p, n)
		if err != nil {
			return err
		}
		fill(b, v)
		return nil
	}
	buf := make([]byte, n)
	fill(buf, v)
	if err := m.c.Internal().Backend().Upload(p, buf); err != nil {
		return fmt.Errorf("rank %d: filling %d bytes at %#x: %w", m.c.Rank(), n, p, err)
	}
	return nil
}

// Read returns a copy of [p, p+n) (host backend: a view, valid until the
// next call writes it).
func (m memIO) Read(p theseus.Ptr, n int64) ([]byte, error) {
	if n <= 0 {
		return nil, nil
	}
	if m.c.BackendName() == "host" {
		return m.c.HostBytes(p, n)
	}
	b := make([]byte, n)
	if err := m.c.Internal().Backend().Download(b, p); err != nil {
		return nil, fmt.Errorf("rank %d: reading %d bytes at %#x: %w", m.c.Rank(), n, p, err)
	}
	return b, nil
}
