package cuda

/*
#include <stdlib.h>
#include "kernel/launch.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// The op trace of the CUDA backend (device.OpTracer; docs/trace.md): each
// traced launch's blocks record every op and their launch, with
// %globaltimer, into a buffer in device memory (kernel/launch.h,
// theseus_trace), which Drain copies to the host and maps to the host's
// clock.

// Sizes of the trace records and the offsets of their fields
// (kernel/launch.h).
const (
	traceHeader = C.THESEUS_TRACE_HEADER
	traceRec    = C.THESEUS_TRACE_REC
	traceLaunch = C.THESEUS_TRACE_LAUNCH

	recBegin  = unsafe.Offsetof(C.theseus_trace_rec{}.begin)
	recEnd    = unsafe.Offsetof(C.theseus_trace_rec{}.end)
	recSlice  = unsafe.Offsetof(C.theseus_trace_rec{}.slice)
	recTB     = unsafe.Offsetof(C.theseus_trace_rec{}.tb)
	recStep   = unsafe.Offsetof(C.theseus_trace_rec{}.step)
	recOp     = unsafe.Offsetof(C.theseus_trace_rec{}.op)
	recLaunch = unsafe.Offsetof(C.theseus_trace_rec{}.launch)
	recSize   = unsafe.Sizeof(C.theseus_trace_rec{})
	hdrHead   = unsafe.Offsetof(C.theseus_trace{}.head)
	hdrCap    = unsafe.Offsetof(C.theseus_trace{}.cap)
	hdrSize   = unsafe.Sizeof(C.theseus_trace{})
)

// The record and header sizes are what the kernel assumes.
var _ = [1]struct{}{}[recSize-traceRec]
var _ = [1]struct{}{}[hdrSize-traceHeader]

// opTrace is one rank's trace buffer.
type opTrace struct {
	b   *Backend
	mem driver.Ptr // header, then cap records
	cap int64
}

// NewOpTrace implements device.OpTracer: a buffer of records records in
// device memory, and the clock mapping made (calibrate) if it is not yet.
// Errors: an allocation's, or records < 1.
func (b *Backend) NewOpTrace(records int) (device.OpTrace, error) {
	if records < 1 {
		return nil, fmt.Errorf("cuda: op trace of %d records", records)
	}
	t := &opTrace{b: b, cap: int64(records)}
	err := b.with(func() error {
		var err error
		if t.mem, err = b.zeroed(traceHeader + t.cap*traceRec); err != nil {
			return err
		}
		var capw [8]byte
		binary.LittleEndian.PutUint64(capw[:], uint64(t.cap))
		if err := driver.CopyHtoDAsync(t.mem+driver.Ptr(hdrCap), capw[:], b.ctl); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
	if err != nil {
		b.free(t.mem)
		return nil, err
	}
	b.clock.calibrate(b) // a failure leaves the mapping unset: see calibrate
	return t, nil
}

// Drain implements device.OpTrace: the records are copied to the host,
// the buffer emptied, and each complete record (its launch word written)
// passed to f with its times on the host's clock.
func (t *opTrace) Drain(f func(device.OpSpan)) uint64 {
	var raw []byte
	var head uint64
	err := t.b.with(func() error {
		var hdr [8]byte
		if err := driver.CopyDtoHAsync(hdr[:], t.mem+driver.Ptr(hdrHead), t.b.ctl); err != nil {
			return err
		}
		if err := t.b.ctl.Synchronize(); err != nil {
			return err
		}
		head = binary.LittleEndian.Uint64(hdr[:])
		n := min(int64(head), t.cap)
		if n == 0 {
			return nil
		}
		raw = make([]byte, n*traceRec)
		if err := driver.CopyDtoHAsync(raw, t.mem+traceHeader, t.b.ctl); err != nil {
			return err
		}
		if err := driver.MemsetD8Async(t.mem+traceHeader, 0, n*traceRec, t.b.ctl); err != nil {
			return err
		}
		if err := driver.MemsetD8Async(t.mem+driver.Ptr(hdrHead), 0, 8, t.b.ctl); err != nil {
			return err
		}
		return t.b.ctl.Synchronize()
	})
	if err != nil {
		return 0
	}
	if time.Since(t.b.clock.when()) > time.Second {
		t.b.clock.calibrate(t.b)
	}
	off := t.b.clock.offset()
	for i := 0; i+traceRec <= len(raw); i += traceRec {
		r := raw[i : i+traceRec]
		launch := binary.LittleEndian.Uint32(r[recLaunch:])
		if launch == 0 {
			continue // a record a launch was still writing
		}
		s := device.OpSpan{Launch: uint64(launch), Begin: int64(binary.LittleEndian.Uint64(r[recBegin:])) + off,
			End: int64(binary.LittleEndian.Uint64(r[recEnd:])) + off, Slice: int64(binary.LittleEndian.Uint32(r[recSlice:])),
			TB: int(binary.LittleEndian.Uint16(r[recTB:])), Step: int(binary.LittleEndian.Uint16(r[recStep:]))}
		if s.Step == traceLaunch {
			s.Step = -1
		} else {
			s.Op, _ = optable.OpcodeOfWire(r[recOp])
		}
		f(s)
	}
	return max(head, uint64(t.cap)) - uint64(t.cap)
}

// Close implements device.OpTrace.
func (t *opTrace) Close() { t.b.free(t.mem) }

// clockMap maps the GPU's %globaltimer to the host's wall clock: host
// Unix ns = globaltimer + off.
type clockMap struct {
	mu  sync.Mutex
	off atomic.Int64
	at  atomic.Int64 // when it was made (Unix ns); 0: never
	// out is the host-mapped word theseus_clock writes (allocated once).
	outHost unsafe.Pointer
	outDev  driver.Ptr
}

func (m *clockMap) offset() int64 { return m.off.Load() }

func (m *clockMap) when() time.Time { return time.Unix(0, m.at.Load()) }

// clockSamples and clockRun are how many times calibrate reads the GPU's
// clock and how long theseus_clock runs for it.
const (
	clockSamples = 256
	clockRun     = 2 * time.Millisecond
)

// calibrate makes the mapping: theseus_clock stores %globaltimer into
// host-mapped memory over and over while the host reads it, clockSamples
// times. A value g read at host time h was stored at a host time at most
// h, so the offset is at most h - g; the smallest h - g over the samples
// is taken, which is late by at most the store's trip to host memory and
// one store period (about a microsecond on the H200: docs/trace.md,
// "Clocks"). Without the clock kernel (a module built before it, loaded
// through THESEUS_PTX_DIR) or when the kernel does not start within a
// second, the mapping is left as it was (unset: offset 0, and the GPU's
// spans then lie where %globaltimer puts them, which on most drivers is
// close to Unix time already).
func (m *clockMap) calibrate(b *Backend) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return b.with(func() error {
		k, err := kernel(b.dev.Context(), ir.Float32)
		if err != nil {
			return err
		}
		if k.clock == 0 {
			return errors.New("cuda: the kernel module has no " + ClockKernelName)
		}
		if m.outHost == nil {
			if m.outHost, m.outDev, err = driver.HostAlloc(64); err != nil {
				return err
			}
		}
		word := (*uint64)(m.outHost)
		atomic.StoreUint64(word, 0)
		arg := (*C.theseus_clock_arg)(C.calloc(1, C.sizeof_theseus_clock_arg))
		defer C.free(unsafe.Pointer(arg))
		arg.out = C.uint64_t(m.outDev)
		arg.ns = C.uint64_t(clockRun.Nanoseconds())
		if err := driver.Launch1(k.clock, 1, 32, 0, b.ctl, unsafe.Pointer(arg)); err != nil {
			return err
		}
		defer b.ctl.Synchronize()
		deadline := time.Now().Add(time.Second)
		for atomic.LoadUint64(word) == 0 {
			if time.Now().After(deadline) {
				return errors.New("cuda: " + ClockKernelName + " did not start within a second")
			}
		}
		best := int64(1<<63 - 1)
		for range clockSamples {
			g := atomic.LoadUint64(word)
			h := time.Now().UnixNano()
			best = min(best, h-int64(g))
		}
		m.off.Store(best)
		m.at.Store(time.Now().UnixNano())
		return nil
	})
}

// fillTrace sets a launch's trace buffer (0: untraced).
func fillTrace(a *Launch, t driver.Ptr) { a.trace = C.uint64_t(t) }
