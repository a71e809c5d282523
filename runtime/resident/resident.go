// Package resident is the queue of a persistent executor: a resident
// consumer (the CUDA backend's resident kernel, the host backend's
// resident goroutine) that runs one communicator rank's launches as the
// producer (the rank's launching thread) describes them, so that a call
// costs no kernel launch (docs/design/runtime.md, "The persistent
// executor").
//
// The queue lives in host memory both sides see (on CUDA, page-locked
// host memory mapped into the device): a status line, then Slots
// descriptor slots in a ring. An item is a launch of a prepared launch:
// the producer writes its descriptor (Desc) into the slot of its sequence
// number seq (seq mod Slots) and then enqueues, on the caller's stream,
// the item's release and the wait for its completion (on CUDA
// cuStreamWriteValue32 of seq into the doorbell word and
// cuStreamWaitValue32 until the done word reaches seq: stream memory
// operations, which the driver runs when the stream reaches them). The
// consumer takes items in sequence order: it waits for slot seq to hold
// descriptor seq (ahead of the release, so the descriptor is read before
// it is needed), then for the doorbell to reach seq, runs the launch,
// stores seq into the done word and into the status line's Completed.
// Doorbell and done words are device words of the backend, outside this
// package's memory.
//
// One communicator rank has at most one released item at a time: every
// item's stream waits for its completion before it reaches anything
// later, and the executor orders a rank's streams (device.StreamOrderer).
// So items run in sequence order, and the ring only bounds how far the
// producer runs ahead: the producer reuses a slot only once Completed
// says its last item is done (wraparound), waiting otherwise.
//
// Starting and stopping. A consumer runs from a start until it is idle
// (every issued item completed) and either the idle time has passed or
// the producer asked it to exit (Exit); it then leaves the queue Stopped.
// The producer starts a consumer when it issues an item and finds the
// queue Stopped. The two sides decide with a store-then-load handshake on
// State and Issued (each side writes its word, fences, reads the other's),
// so that an item issued while the consumer decides to exit is either seen
// by that consumer or finds the queue Stopped and starts the next one:
//
//	producer: Issued = seq; fence; s = State; while s == Exiting: s = State;
//	          if s == Stopped: State = Running; start a consumer
//	consumer: State = Exiting; fence; if Issued == Completed: State = Stopped, exit
//	          else State = Running, continue
//
// A consumer that finds the abort word set leaves Aborted set, stores
// Completed + Slots into the done word (every item the producer can have
// issued without a later completion: its waits on the streams return) and
// exits; a producer then issues nothing (ErrStopped).
package resident

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// The queue's memory layout (bytes), shared with the CUDA kernel
// (cuda/kernel/queue.h; cuda's TestQueueLayout compares them).
const (
	// The status line.
	OffState     = 0  // uint32: Stopped, Running or Exiting
	OffCompleted = 4  // uint32: seq of the last item the consumer finished
	OffIssued    = 8  // uint32: seq of the last item the producer issued
	OffExit      = 12 // uint32: nonzero: exit as soon as idle (the producer's Exit)
	OffAborted   = 16 // uint32: nonzero: the consumer stopped on the abort word
	OffStarts    = 20 // uint32: consumers started (the producer counts them)
	OffBlocks    = 24 // uint32: blocks of the running consumer that have started (CUDA)
	// OffSMs holds, per block of the last consumer started, the
	// multiprocessor it runs on (CUDA: %smid), MaxBlocks uint32 words.
	OffSMs      = 64
	StatusBytes = OffSMs + 4*MaxBlocks

	// One descriptor slot (Desc).
	SlotArg    = 0  // uint64: the prepared launch's argument (a device address on CUDA)
	SlotLaunch = 8  // uint64: the launch counter
	SlotNFence = 16 // int32: the fence count (0: not fenced)
	SlotSeq    = 20 // uint32: seq of the item the slot holds; written last
	SlotGrid   = 24 // uint32: threadblocks the launch runs on
	SlotFlags  = 28 // uint32: reserved (0)
	SlotIn     = 32 // uint64: the launch's input base (a prepared launch rebased to other buffers shares its base's argument)
	SlotOut    = 40 // uint64: its output base
	SlotBytes  = 48
)

// States of the queue (OffState).
const (
	Stopped = 0
	Running = 1
	Exiting = 2
)

// Limits.
const (
	// MaxBlocks is the most threadblocks a resident consumer may run on.
	MaxBlocks = 32
	// MaxSlots is the deepest ring.
	MaxSlots = 1 << 16
	// DefaultSlots is the ring's depth when the configuration does not
	// say: as many launches as the producer may run ahead of the device.
	DefaultSlots = 256
)

// Bytes is the size of a queue of slots slots.
func Bytes(slots int) int { return StatusBytes + slots*SlotBytes }

// Errors.
var (
	// ErrStopped: the consumer stopped on the abort word; nothing more
	// is issued.
	ErrStopped = errors.New("resident: the resident executor stopped (communicator aborted)")
	// ErrFull: no slot came free within the wait's bound.
	ErrFull = errors.New("resident: the queue stayed full")
)

// Desc describes one item: a launch of a prepared launch.
type Desc struct {
	// Arg is the prepared launch's argument as the consumer reads it (on
	// CUDA the device address of its theseus_launch; on the host backend
	// an index into the resident's table of prepared launches).
	Arg uint64
	// Launch is the launch counter; NFence the fence count (0: not
	// fenced); Grid the threadblocks the launch runs on.
	Launch uint64
	NFence int32
	Grid   uint32
	// In and Out are the launch's input and output bases, which the
	// consumer sets in the argument Arg names (CUDA: a launch rebased to
	// other buffers, device.Rebaser, shares its base's argument).
	In, Out uint64
}

// Queue is the producer's and the consumer's view of one queue's memory.
// The producer's methods (Reserve, Write, Commit, Exit, Stats) are called
// by one goroutine at a time (a communicator's calls are serialised);
// the consumer's (Consumer) by the consumer; the words they share are
// accessed atomically.
type Queue struct {
	mem   unsafe.Pointer
	slots uint32
	next  uint32 // the producer's next seq
}

// New is the queue in mem: Bytes(slots) bytes of zeroed host memory that
// stay mapped while the queue is in use, shared with the consumer. slots
// is a power of two from 1 to MaxSlots. Errors: a bad slot count.
func New(mem unsafe.Pointer, slots int) (*Queue, error) {
	if slots < 1 || slots > MaxSlots || slots&(slots-1) != 0 {
		return nil, fmt.Errorf("resident: %d queue slots (want a power of two from 1 to %d)", slots, MaxSlots)
	}
	if mem == nil {
		return nil, errors.New("resident: no queue memory")
	}
	return &Queue{mem: mem, slots: uint32(slots), next: 1}, nil
}

// Slots is the ring's depth.
func (q *Queue) Slots() int { return int(q.slots) }

func (q *Queue) word(off uintptr) *uint32 { return (*uint32)(unsafe.Add(q.mem, off)) }

// Slot is the address of seq's slot.
func (q *Queue) Slot(seq uint32) unsafe.Pointer {
	return unsafe.Add(q.mem, StatusBytes+uintptr(seq&(q.slots-1))*SlotBytes)
}

// Load reads the 32-bit status word at off (OffState ...).
func (q *Queue) Load(off uintptr) uint32 { return atomic.LoadUint32(q.word(off)) }

// after reports whether a is at or after b in sequence order (32-bit
// wraparound: as cuStreamWaitValue32's GEQ compares).
func after(a, b uint32) bool { return int32(a-b) >= 0 }

// Reserve waits until the slot of the next item is free (Completed has
// reached its previous use: wraparound) and returns the item's seq and its
// slot. wait is called between polls with the number of polls so far (it
// yields or sleeps); its error ends the wait (a timeout, an abort). The
// next Reserve returns the same seq until Commit. Errors: wait's,
// ErrStopped.
func (q *Queue) Reserve(wait func(polls int) error) (uint32, unsafe.Pointer, error) {
	seq := q.next
	for polls := 0; !after(q.Load(OffCompleted), seq-q.slots); polls++ {
		if q.Load(OffAborted) != 0 {
			return 0, nil, ErrStopped
		}
		if err := wait(polls); err != nil {
			return 0, nil, err
		}
	}
	if q.Load(OffAborted) != 0 {
		return 0, nil, ErrStopped
	}
	return seq, q.Slot(seq), nil
}

// Write fills slot (Reserve's) with item seq's descriptor, seq last, so
// that a consumer that sees seq there reads the whole descriptor. The C
// side of the CUDA backend writes the same layout itself.
func Write(slot unsafe.Pointer, seq uint32, d Desc) {
	*(*uint64)(unsafe.Add(slot, SlotArg)) = d.Arg
	*(*uint64)(unsafe.Add(slot, SlotLaunch)) = d.Launch
	*(*int32)(unsafe.Add(slot, SlotNFence)) = d.NFence
	*(*uint32)(unsafe.Add(slot, SlotGrid)) = d.Grid
	*(*uint32)(unsafe.Add(slot, SlotFlags)) = 0
	*(*uint64)(unsafe.Add(slot, SlotIn)) = d.In
	*(*uint64)(unsafe.Add(slot, SlotOut)) = d.Out
	atomic.StoreUint32((*uint32)(unsafe.Add(slot, SlotSeq)), seq)
}

// Read is the descriptor in slot when the slot holds item seq (Write's
// last store), else false. The other fields are read only then: the
// producer rewrites a slot only after the item it held has completed, so
// they do not change while the slot holds seq.
func Read(slot unsafe.Pointer, seq uint32) (Desc, bool) {
	if atomic.LoadUint32((*uint32)(unsafe.Add(slot, SlotSeq))) != seq {
		return Desc{}, false
	}
	return Desc{Arg: *(*uint64)(unsafe.Add(slot, SlotArg)), Launch: *(*uint64)(unsafe.Add(slot, SlotLaunch)),
		NFence: *(*int32)(unsafe.Add(slot, SlotNFence)), Grid: *(*uint32)(unsafe.Add(slot, SlotGrid)),
		In: *(*uint64)(unsafe.Add(slot, SlotIn)), Out: *(*uint64)(unsafe.Add(slot, SlotOut))}, true
}

// Commit issues item seq (Reserve's, whose descriptor the caller writes
// and whose release it enqueues, before or after Commit) and reports
// whether the caller must start a consumer: the queue was Stopped (the
// caller then starts one, which takes the items from Completed + 1 on; a
// consumer waits for an issued item's descriptor and release however long
// they take, so the CUDA backend starts the kernel before the item's
// stream wait is enqueued, which a kernel launch queued behind it on the
// same hardware queue would wait for). A consumer that is deciding to exit is waited for
// (it decides at once). Errors: ErrStopped (the consumer stopped on the
// abort word; the item's wait returns, its launch does not run).
func (q *Queue) Commit(seq uint32) (start bool, err error) {
	q.next = seq + 1
	atomic.StoreUint32(q.word(OffIssued), seq) // (a locked instruction: the handshake's fence)
	for {
		switch s := q.Load(OffState); s {
		case Running:
			return false, nil
		case Exiting:
			runtime.Gosched()
			continue
		default:
			if q.Load(OffAborted) != 0 {
				return false, ErrStopped
			}
			atomic.StoreUint32(q.word(OffState), Running)
			atomic.AddUint32(q.word(OffStarts), 1)
			return true, nil
		}
	}
}

// Idle reports whether every issued item has completed.
func (q *Queue) Idle() bool { return q.Load(OffIssued) == q.Load(OffCompleted) }

// Exit asks the consumer to exit as soon as it is idle (on), or lets
// consumers run until their idle time again (off). The producer starts a
// new consumer at its next Commit either way.
func (q *Queue) Exit(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	atomic.StoreUint32(q.word(OffExit), v)
}

// Stats are a queue's counters.
type Stats struct {
	// Issued is the last item issued, Completed the last one finished,
	// Starts the consumers started.
	Issued, Completed, Starts uint32
	State                     uint32
	Aborted                   bool
}

// Stats reads the status line.
func (q *Queue) Stats() Stats {
	return Stats{Issued: q.Load(OffIssued), Completed: q.Load(OffCompleted), Starts: q.Load(OffStarts),
		State: q.Load(OffState), Aborted: q.Load(OffAborted) != 0}
}

// Consumer is the consumer's side of a queue: the host backend's resident
// goroutine uses it; the CUDA kernel does the same in C (executor.cuh,
// theseus_resident). One consumer runs at a time.
type Consumer struct {
	q        *Queue
	expected uint32
}

// Consumer starts the consumer's side: the next item is Completed + 1.
func (q *Queue) Consumer() *Consumer {
	return &Consumer{q: q, expected: q.Load(OffCompleted) + 1}
}

// Next returns the next item's seq and descriptor once its slot holds it
// (before its release), else false.
func (c *Consumer) Next() (uint32, Desc, bool) {
	d, ok := Read(c.q.Slot(c.expected), c.expected)
	return c.expected, d, ok
}

// Done marks the item Next returned finished (the caller has stored its
// seq into the done word first).
func (c *Consumer) Done() {
	atomic.StoreUint32(c.q.word(OffCompleted), c.expected)
	c.expected++
}

// ExitRequested reports whether the producer asked for an exit (Exit).
func (c *Consumer) ExitRequested() bool { return c.q.Load(OffExit) != 0 }

// TryExit is the consumer's side of the handshake, when Next found
// nothing: it leaves the queue Stopped and reports true when nothing was
// issued meanwhile (the consumer then exits), else it goes on Running.
func (c *Consumer) TryExit() bool {
	atomic.StoreUint32(c.q.word(OffState), Exiting) // (locked: the fence)
	if c.q.Load(OffIssued) == c.expected-1 {
		atomic.StoreUint32(c.q.word(OffState), Stopped)
		return true
	}
	atomic.StoreUint32(c.q.word(OffState), Running)
	return false
}

// Abandon is the consumer's exit on the abort word: done (the done word)
// is set past every item the producer may have issued, Aborted is set and
// the queue left Stopped.
func (c *Consumer) Abandon(done *uint32) {
	atomic.StoreUint32(done, c.expected-1+c.q.slots)
	atomic.StoreUint32(c.q.word(OffAborted), 1)
	atomic.StoreUint32(c.q.word(OffState), Stopped)
}

// Backoff is a wait for Reserve and the consumers' polls: it yields for
// the first polls, then sleeps up to max (1 µs doubling), and fails with
// ErrFull once deadline (when nonzero) has passed.
func Backoff(polls int, deadline time.Time, max time.Duration) error {
	if polls < 64 {
		runtime.Gosched()
		return nil
	}
	if !deadline.IsZero() && time.Now().After(deadline) {
		return ErrFull
	}
	d := time.Microsecond << min(polls-64, 20)
	time.Sleep(min(d, max))
	return nil
}
