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

// stager is a Conn's staging buffer: pinned host memory
// (ConnOptions.Alloc), registered with UCX, cut into pieces used in turn,
// so that the copy of one piece overlaps the puts of the pieces before it
// still on the wire. A piece is reused once the put from it has completed;
// only when every piece is still in flight does the proxy wait for the
// oldest (with two pieces, each copy waited for the put before last: the
// wire and the copies only half overlapped; docs/transport.md, "Staging").
type stager struct {
	blk   HostBlock
	mem   *ucx.Mem
	piece int            // bytes of one piece
	reqs  []*ucx.Request // the put from each piece still in flight, or nil
	turn  int            // the next piece
	s     Stager
}

// DefaultStageBytes is the staging buffer of a Conn unless
// ConnOptions.StageBytes or THESEUS_PROXY_STAGE_BYTES says otherwise:
// 16 pieces of StagePiece.
const DefaultStageBytes = 16 << 20

// StagePiece is the largest piece of one staging copy and put (bytes);
// buffers under two pieces are cut in two halves.
const StagePiece = 1 << 20

// stagePieces cuts a staging buffer of size bytes: pieces of StagePiece
// (at least two), or two halves of a smaller buffer.
func stagePieces(size int) (piece, n int) {
	piece = StagePiece
	if size < 2*piece {
		piece = size / 2
	}
	return piece, size / piece
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
	piece, n := stagePieces(o.StageBytes)
	return &stager{blk: blk, mem: mem, piece: piece, reqs: make([]*ucx.Request, n), s: o.Stager}, nil
}

// put copies n bytes at device address src through the staging pieces
// and puts each piece to raddr onwards. Before copying into a piece it
// waits (bounded) for the put that last used it, which is the oldest in
// flight.
func (s *stager) put(c *Conn, pe *peer, src uintptr, n int, raddr uint64, rk *ucx.RKey) error {
	if s.s == nil {
		return errors.New("a put from device memory, and this UCX build has no CUDA support: the staged path needs ConnOptions.Stager")
	}
	for off := 0; off < n; {
		k := min(n-off, s.piece)
		h := s.turn
		s.turn = (s.turn + 1) % len(s.reqs)
		if r := s.reqs[h]; r != nil {
			s.reqs[h] = nil
			if err := r.Wait(time.Now().Add(c.p.timeout)); err != nil {
				return err
			}
		}
		dst := unsafe.Add(s.blk.Ptr, h*s.piece)
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
