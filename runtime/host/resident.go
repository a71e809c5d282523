//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/resident"
)

// The host backend's persistent executor (device.ResidentBackend): a
// resident goroutine per communicator rank fed through the same queue
// (runtime/resident) as the CUDA backend's resident kernel, with the
// release and the wait for completion as memory operations on the
// caller's stream (its goroutine stores the item's seq into the item's
// doorbell and waits for the done word), so that the protocol the GPU runs
// — descriptors ahead of their release, wraparound, starts and idle exits,
// the abort — runs in CI too. A launch of more threadblocks than
// ResidentConfig.Blocks is the stream's own, as on CUDA.

// NewResident implements device.ResidentBackend.
func (b *backend) NewResident(cfg device.ResidentConfig) (device.Resident, error) {
	if cfg.Slots == 0 {
		cfg.Slots = resident.DefaultSlots
	}
	if cfg.Blocks < 1 || cfg.Blocks > resident.MaxBlocks {
		return nil, fmt.Errorf("host: resident executor of %d threadblocks (want 1 to %d)", cfg.Blocks, resident.MaxBlocks)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = launch.DefaultTimeout
	}
	abort, err := b.word(cfg.Abort)
	if err != nil {
		return nil, fmt.Errorf("host: resident executor's abort word: %w", err)
	}
	// The queue is Go memory (the producer and the consumer are goroutines
	// of this process); its words are accessed atomically, so it is made
	// of 8-byte words.
	mem := make([]uint64, (resident.Bytes(cfg.Slots)+7)/8)
	q, err := resident.New(unsafe.Pointer(&mem[0]), cfg.Slots)
	if err != nil {
		return nil, err
	}
	return &residentExec{cfg: cfg, mem: mem, q: q, abort: abort, doorbell: make([]uint32, cfg.Slots),
		preps: make([]*prepared, cfg.Slots), streams: map[device.Stream]*residentStream{}}, nil
}

// residentExec is one rank's resident executor on the host backend.
type residentExec struct {
	cfg      device.ResidentConfig
	mem      []uint64 // the queue's memory
	q        *resident.Queue
	abort    *uint64
	doorbell []uint32 // per slot: the seq of the last item released (the stream's memWrite)
	done     uint32   // the seq of the last item finished

	// preps[slot] is the prepared launch of the item in the slot, set
	// before the slot's seq is written (resident.Write: the consumer reads
	// it after the seq), so Desc.Arg is unused on the host backend.
	preps []*prepared

	mu      sync.Mutex
	streams map[device.Stream]*residentStream
	exited  chan struct{} // closed when the running consumer returns; nil before the first
	closed  bool

	err                      atomic.Pointer[error] // the first failure of a queued launch
	queued, fallback, starts atomic.Uint64
}

// residentStream is a stream whose launches go through the queue.
type residentStream struct {
	r  *residentExec
	st *stream
}

// Stream implements device.Resident.
func (r *residentExec) Stream(st device.Stream) (device.Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, device.ErrClosed
	}
	if rs, ok := r.streams[st]; ok {
		return rs, nil
	}
	hs, ok := st.(*stream)
	if !ok {
		return nil, fmt.Errorf("host: resident executor on a %T", st)
	}
	rs := &residentStream{r: r, st: hs}
	r.streams[st] = rs
	return rs, nil
}

// Launch implements device.Stream: the launch through the queue, or the
// stream's own when the consumer does not take it.
func (s *residentStream) Launch(p device.Prepared, counter uint64, fence bool) error {
	hp, ok := p.(*prepared)
	if !ok || hp == nil {
		return errors.New("host: launch of state another backend prepared")
	}
	r := s.r
	if len(hp.table.TBs) > r.cfg.Blocks {
		r.fallback.Add(1)
		return s.st.Launch(p, counter, fence)
	}
	if counter == 0 {
		return errors.New("host: launch counter 0")
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	seq, slot, err := r.q.Reserve(func(polls int) error {
		if atomic.LoadUint64(r.abort) != 0 {
			return fmt.Errorf("host: rank %d: waiting for a queue slot: %w", r.cfg.Rank, launch.ErrAborted)
		}
		return resident.Backoff(polls, deadline, time.Millisecond)
	})
	if err != nil {
		return err
	}
	d := resident.Desc{Launch: counter, Grid: uint32(max(len(hp.table.TBs), 1))}
	r.preps[seq&uint32(r.q.Slots()-1)] = hp
	if fence {
		d.NFence = int32(len(hp.fence))
	}
	// Issued (and the consumer started) before the release and the wait
	// are on the stream, as the CUDA backend must.
	start, err := r.q.Commit(seq)
	if err != nil {
		return err
	}
	if start {
		r.start()
	}
	resident.Write(slot, seq, d)
	r.queued.Add(1)
	return s.st.memOps(task{mem: memWrite, word: &r.doorbell[seq&uint32(r.q.Slots()-1)], val: seq},
		task{mem: memWait, word: &r.done, val: seq})
}

// start runs a consumer (Commit found the queue stopped). The previous
// one has left the queue Stopped, its last access to it.
func (r *residentExec) start() {
	r.starts.Add(1)
	ch := make(chan struct{})
	r.mu.Lock()
	r.exited = ch
	r.mu.Unlock()
	go func() {
		defer close(ch)
		r.serve()
	}()
}

// serve is the consumer: theseus_resident's loop (cuda/kernel/executor.cuh)
// on the host.
func (r *residentExec) serve() {
	c := r.q.Consumer()
	idle := time.Now()
	polls := 0
	wait := func() {
		resident.Backoff(polls, time.Time{}, 50*time.Microsecond)
		polls++
	}
	for {
		if atomic.LoadUint64(r.abort) != 0 {
			if !r.q.Idle() {
				// Issued launches that will not run fail, as the
				// kernel's waits do on the abort word.
				err := error(&LaunchError{Rank: r.cfg.Rank, Launch: 0, Peer: -1, Err: launch.ErrAborted})
				r.err.CompareAndSwap(nil, &err)
			}
			c.Abandon(&r.done)
			return
		}
		seq, d, ok := c.Next()
		if !ok {
			if (c.ExitRequested() || r.cfg.Idle > 0 && time.Since(idle) > r.cfg.Idle) && c.TryExit() {
				return
			}
			wait()
			continue
		}
		if int32(atomic.LoadUint32(&r.doorbell[seq&uint32(r.q.Slots()-1)])-seq) < 0 {
			wait() // not released yet
			continue
		}
		if r.err.Load() == nil {
			t := task{p: r.preps[seq&uint32(r.q.Slots()-1)], launch: d.Launch, fence: d.NFence > 0}
			if err := runLaunch(context.Background(), t); err != nil {
				r.err.CompareAndSwap(nil, &err)
			}
		}
		atomic.StoreUint32(&r.done, seq)
		c.Done()
		idle, polls = time.Now(), 0
	}
}

// Stop implements device.Resident.
func (r *residentExec) Stop() error {
	r.q.Exit(true)
	defer r.q.Exit(false)
	deadline := time.Now().Add(r.cfg.Timeout)
	for polls := 0; !(r.q.Load(resident.OffState) == resident.Stopped && (r.q.Idle() || r.q.Load(resident.OffAborted) != 0)); polls++ {
		if err := resident.Backoff(polls, deadline, time.Millisecond); err != nil {
			return fmt.Errorf("host: rank %d: the resident executor did not stop within %v: %w", r.cfg.Rank, r.cfg.Timeout, launch.ErrTimeout)
		}
	}
	r.mu.Lock()
	ch := r.exited
	r.mu.Unlock()
	if ch != nil {
		<-ch
	}
	return nil
}

// Close implements device.Resident.
func (r *residentExec) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	return r.Stop()
}

// Stats implements device.Resident.
func (r *residentExec) Stats() device.ResidentStats {
	return device.ResidentStats{Queued: r.queued.Load(), Fallback: r.fallback.Load(), Starts: r.starts.Load()}
}

// Queue is the resident executor's queue (tests).
func (r *residentExec) Queue() *resident.Queue { return r.q }

func (r *residentExec) failure() error {
	if e := r.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Synchronize implements device.Stream: the stream's work (which waits for
// its queued launches), then the first failure of the stream or the queue.
func (s *residentStream) Synchronize() error {
	if err := s.st.Synchronize(); err != nil {
		return err
	}
	return s.r.failure()
}

// Err implements device.Stream.
func (s *residentStream) Err() error {
	if err := s.st.Err(); err != nil {
		return err
	}
	return s.r.failure()
}

// After implements device.StreamOrderer: the underlying streams' order.
func (s *residentStream) After(prev device.Stream) error {
	if p, ok := prev.(*residentStream); ok {
		prev = p.st
	}
	return s.st.After(prev)
}

// Capturing implements device.Stream (a host stream is never captured).
func (s *residentStream) Capturing() bool { return false }

// Close implements device.Stream: the wrapper only (the caller's stream
// stays open).
func (s *residentStream) Close() error { return nil }
