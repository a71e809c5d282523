package proxy

import (
	"errors"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// Stager copies device memory to host memory for the staged path (device
// regions with a UCX build that lacks CUDA support). The CUDA backend
// implements it with a device-to-host copy that returns once the bytes are
// in host memory; it runs on the proxy's goroutine, so it makes its own
// CUDA context current.
type Stager interface {
	ToHost(dst unsafe.Pointer, src uintptr, n int) error
}

// stager is a Conn's staging buffer: two halves of pinned host memory
// (ConnOptions.Alloc), registered with UCX, used in turn so that the copy
// of one piece overlaps the put of the previous one.
type stager struct {
	blk  HostBlock
	mem  *ucx.Mem
	half int
	reqs [2]*ucx.Request
	turn int
	s    Stager
}

func newStager(p *Proxy, o ConnOptions) (*stager, error) {
	blk, err := o.Alloc(o.StageBytes)
	if err != nil {
		return nil, err
	}
	mem, err := p.ctx.Map(uintptr(blk.Ptr), blk.Size, ucx.Host)
	if err != nil {
		if blk.Free != nil {
			blk.Free()
		}
		return nil, err
	}
	return &stager{blk: blk, mem: mem, half: o.StageBytes / 2, s: o.Stager}, nil
}

// put copies n bytes at device address src through the staging halves
// and puts each piece to raddr onwards. It waits (bounded) for the put of
// the piece that last used a half before copying into it again.
func (s *stager) put(c *Conn, pe *peer, src uintptr, n int, raddr uint64, rk *ucx.RKey) error {
	if s.s == nil {
		return errors.New("a put from device memory, and this UCX build has no CUDA support: the staged path needs ConnOptions.Stager")
	}
	for off := 0; off < n; {
		k := min(n-off, s.half)
		h := s.turn
		s.turn ^= 1
		if r := s.reqs[h]; r != nil {
			s.reqs[h] = nil
			if err := r.Wait(time.Now().Add(c.p.timeout)); err != nil {
				return err
			}
		}
		dst := unsafe.Add(s.blk.Ptr, h*s.half)
		if err := s.s.ToHost(dst, src+uintptr(off), k); err != nil {
			return err
		}
		r, err := pe.ep.PutTracked(uintptr(dst), k, raddr+uint64(off), rk, s.mem)
		if err != nil {
			return err
		}
		s.reqs[h] = r
		off += k
	}
	return nil
}

func (s *stager) free() {
	deadline := time.Now().Add(time.Second)
	for _, r := range s.reqs {
		if r != nil {
			r.Wait(deadline)
		}
	}
	s.mem.Unmap()
	if s.blk.Free != nil {
		s.blk.Free()
	}
}
