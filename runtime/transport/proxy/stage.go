package proxy

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/env"
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

// BatchStager is a Stager that can start copies without waiting for them
// (ToHostAsync, in order on one queue: a CUDA stream) and wait for all it
// started at once (Sync). The proxy then starts the copies of every staged
// put it drains in one round and waits once before putting them, instead
// of one synchronous copy per put (each a round trip to the device, under
// MPS a long one). THESEUS_PROXY_STAGE_BATCH=0 uses ToHost instead.
type BatchStager interface {
	Stager
	ToHostAsync(dst unsafe.Pointer, src uintptr, n int) error
	Sync() error
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
	// batch (a BatchStager, batching on) holds the pieces whose copies are
	// started and whose puts are not issued yet, in order (flush).
	bs    BatchStager
	batch []stagedPiece
}

// stagedPiece is a piece copied (or being copied) into the staging buffer
// whose put is still to issue.
type stagedPiece struct {
	h, n  int
	pe    *peer
	raddr uint64
	rk    *ucx.RKey
}

// DefaultStageBytes is the staging buffer of a Conn unless
// ConnOptions.StageBytes or THESEUS_PROXY_STAGE_BYTES says otherwise:
// 16 pieces of StagePiece.
const DefaultStageBytes = 16 << 20

// StagePiece is the largest piece of one staging copy and put (bytes);
// buffers under two pieces are cut in two halves.
const StagePiece = 1 << 20

// stageBytes is THESEUS_PROXY_STAGE_BYTES (DefaultStageBytes; at least 2,
// at most 1 GiB).
func stageBytes() int {
	if v, err := env.ProxyStage.Size(); err == nil && v >= 2 {
		return int(min(v, 1<<30))
	}
	return DefaultStageBytes
}

// DescribeStaging is the INIT log's account of the staged path with
// Stager s and the default staging buffer (THESEUS_PROXY_STAGE_BYTES,
// THESEUS_PROXY_STAGE_BATCH), for example "staging 16 MiB in 16 pieces,
// copies batched".
func DescribeStaging(s Stager) string { return DescribeStagingBytes(s, 0) }

// DescribeStagingBytes is DescribeStaging for a Conn whose
// ConnOptions.StageBytes is size (0: the default buffer).
func DescribeStagingBytes(s Stager, size int) string {
	if size <= 0 {
		size = stageBytes()
	}
	piece, n := stagePieces(size)
	how := "one synchronous copy per put"
	if _, ok := s.(BatchStager); ok && stageBatch() {
		how = "copies batched"
	}
	return fmt.Sprintf("staging %d KiB in %d pieces of %d KiB, %s", size>>10, n, piece>>10, how)
}

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
	st := &stager{blk: blk, mem: mem, piece: piece, reqs: make([]*ucx.Request, n), s: o.Stager}
	if bs, ok := o.Stager.(BatchStager); ok && stageBatch() {
		st.bs = bs
	}
	return st, nil
}

// checkStageEnv reports a malformed THESEUS_PROXY_STAGE_BYTES (not a size,
// or under 2 bytes) or THESEUS_PROXY_STAGE_BATCH (not a boolean): New
// refuses them instead of running with the defaults.
func checkStageEnv() error {
	v, err := env.ProxyStage.Size()
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if v < 2 {
		return fmt.Errorf("proxy: THESEUS_PROXY_STAGE_BYTES=%s: want at least 2 bytes (1 GiB at most is used)", env.ProxyStage.String())
	}
	if _, err := env.ProxyBatch.Bool(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if _, err := env.ProxyStaging.Enum(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return nil
}

// stageBatch is THESEUS_PROXY_STAGE_BATCH (default on).
func stageBatch() bool {
	v, err := env.ProxyBatch.Bool()
	return err != nil || v
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
		if len(s.batch) > 0 && s.batch[0].h == h {
			// Every piece holds a copy of this round: put them first.
			if err := s.flush(&c.stats); err != nil {
				return err
			}
		}
		if r := s.reqs[h]; r != nil {
			s.reqs[h] = nil
			t0 := time.Now()
			err := r.Wait(t0.Add(c.p.timeout))
			c.stats.stageWaitNs.Add(uint64(time.Since(t0)))
			if err != nil {
				return err
			}
		}
		dst := unsafe.Add(s.blk.Ptr, h*s.piece)
		c.stats.stageCopies.Add(1)
		if s.bs != nil {
			t0 := time.Now()
			err := s.bs.ToHostAsync(dst, src+uintptr(off), k)
			c.stats.stageCopyNs.Add(uint64(time.Since(t0)))
			if err != nil {
				return err
			}
			s.batch = append(s.batch, stagedPiece{h: h, n: k, pe: pe, raddr: raddr + uint64(off), rk: rk})
			off += k
			if len(s.batch) >= max(1, len(s.reqs)/2) {
				// Half the ring copied: put it, so that the wire carries one
				// half while the copies fill the other.
				if err := s.flush(&c.stats); err != nil {
					return err
				}
			}
			continue
		}
		t0 := time.Now()
		err := s.s.ToHost(dst, src+uintptr(off), k)
		c.stats.stageCopyNs.Add(uint64(time.Since(t0)))
		if err != nil {
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

// flush waits for the copies of the batch and issues their puts, in
// order: put calls it when the batch holds half the pieces, the proxy
// before a descriptor's signal or flush (which must follow the channel's
// puts) and before it publishes the tail (a staged put's descriptor is
// done once its source is copied).
func (s *stager) flush(st *statCounters) error {
	if len(s.batch) == 0 {
		return nil
	}
	b := s.batch
	s.batch = s.batch[:0]
	t0 := time.Now()
	err := s.bs.Sync()
	st.stageSyncNs.Add(uint64(time.Since(t0)))
	if err != nil {
		return err
	}
	for _, p := range b {
		r, err := p.pe.ep.PutTracked(uintptr(unsafe.Add(s.blk.Ptr, p.h*s.piece)), p.n, p.raddr, p.rk, s.mem)
		if err != nil {
			return err
		}
		s.reqs[p.h] = r
	}
	return nil
}

func (s *stager) free() {
	if len(s.batch) > 0 {
		s.bs.Sync() // (copies started, their puts never issued: the Conn failed)
	}
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
