package cuda

/*
#include "kernel/launch.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// Port channels across nodes (docs/transport.md, "Integration"): the
// backend's side of the proxy is pinned, device-mapped host memory for the
// FIFOs, semaphores and staging buffers the proxy shares with the kernel
// (device.HostMapper), the device-to-host copy of the staged path, and
// the launch's port records (kernel/launch.h, theseus_port_launch), which
// the kernel's port-channel ops read (kernel/port_exec.cuh).

// The backend's side of the proxy: host memory the kernel and the proxy
// share, and the staged path's copies, batched (device.AsyncToHost).
var (
	_ device.HostMapper  = (*Backend)(nil)
	_ device.AsyncToHost = (*Backend)(nil)
)

// Sizes of the port records.
const (
	portRTBytes     = C.sizeof_theseus_port_rt
	portFenceBytes  = C.sizeof_theseus_port_fence
	portLaunchBytes = C.sizeof_theseus_port_launch
)

// AllocMapped implements device.HostMapper: cuMemHostAlloc with
// CU_MEMHOSTALLOC_DEVICEMAP (and PORTABLE), zeroed, and its device address
// (cuMemHostGetDevicePointer).
func (b *Backend) AllocMapped(size int64) (device.MappedMem, error) {
	if size <= 0 {
		return device.MappedMem{}, fmt.Errorf("cuda: mapped host allocation of %d bytes", size)
	}
	var mm device.MappedMem
	err := b.with(func() error {
		h, d, err := driver.HostAlloc(size)
		if err != nil {
			return err
		}
		clear(unsafe.Slice((*byte)(h), size))
		mm = device.MappedMem{Host: h, Dev: device.Ptr(d), Size: size}
		return nil
	})
	return mm, err
}

// BindThread implements device.HostMapper: the context current on the
// calling (locked) OS thread.
func (b *Backend) BindThread() error { return b.dev.SetCurrent() }

// FreeMapped implements device.HostMapper.
func (b *Backend) FreeMapped(m device.MappedMem) error {
	if m.Host == nil {
		return nil
	}
	return b.with(func() error { return driver.FreeHost(m.Host) })
}

// ToHost implements device.HostMapper: a device-to-host copy on the
// backend's staging stream (non-blocking: a copy on the legacy default
// stream would wait for the kernel that waits for this very copy), waited
// for. dst is pinned memory (the proxy's staging buffer).
func (b *Backend) ToHost(dst unsafe.Pointer, src device.Ptr, n int64) error {
	return b.stageCopy(dst, src, n, true)
}

// ToHostAsync implements device.AsyncToHost: ToHost's copy, queued on
// the staging stream and not waited for (SyncToHost waits).
func (b *Backend) ToHostAsync(dst unsafe.Pointer, src device.Ptr, n int64) error {
	return b.stageCopy(dst, src, n, false)
}

// stageCopy queues a device-to-host copy of n bytes on the staging stream
// and, with wait, waits for the stream.
func (b *Backend) stageCopy(dst unsafe.Pointer, src device.Ptr, n int64, wait bool) error {
	if n <= 0 {
		return nil
	}
	return b.with(func() error {
		s, err := b.stageStream()
		if err != nil {
			return err
		}
		if err := driver.CopyDtoHAsync(unsafe.Slice((*byte)(dst), n), driver.Ptr(src), s); err != nil || !wait {
			return err
		}
		return s.Synchronize()
	})
}

// SyncToHost implements device.AsyncToHost: it waits for every copy of
// the staging stream.
func (b *Backend) SyncToHost() error {
	return b.with(func() error {
		s, err := b.stageStream()
		if err != nil {
			return err
		}
		return s.Synchronize()
	})
}

// stageStream is the staging copies' stream (non-blocking: a copy on the
// legacy default stream would wait for the kernel that waits for it),
// created on first use; the caller has the context current.
func (b *Backend) stageStream() (driver.Stream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stage == nil {
		s, err := driver.NewStream()
		if err != nil {
			return s, err
		}
		b.stage = &s
	}
	return *b.stage, nil
}

// portRecords fills the port fields of the channel records rts (one per
// end of a) and returns the launch's port block (theseus_port_launch) and
// its records as bytes to upload, or nil when no end of a goes through the
// proxy and a has no fence with other nodes. The block's pointers are
// relative to its own start (base), which the caller fixes with fixPort.
func portRecords(a *device.Args, rts []ChanRT) []byte {
	var ends []*device.End
	for i := range a.Ends {
		if a.Ends[i].Port != nil {
			ends = append(ends, &a.Ends[i])
		}
	}
	if len(ends) == 0 && len(a.PortFence) == 0 && a.PortMirror == nil {
		return nil
	}
	mapWords := 0
	if a.PortMirror != nil {
		mapWords = len(a.PortMirror.Map)
	}
	n := portLaunchBytes + len(ends)*portRTBytes + len(a.PortFence)*portFenceBytes + 4*mapWords
	buf := make([]byte, (n+15)/16*16)
	pl := (*C.theseus_port_launch)(unsafe.Pointer(&buf[0]))
	off := portLaunchBytes
	pl.ends = C.uint64_t(off)
	k := 0
	stage := a.PortStage != nil && len(ends) > 0
	for i := range a.Ends {
		e := &a.Ends[i]
		if e.Port == nil {
			continue
		}
		p := e.Port
		rt := (*C.theseus_port_rt)(unsafe.Pointer(&buf[off+k*portRTBytes]))
		rt.fifo = C.uint64_t(p.Conn.FIFO())
		rt.head = C.uint64_t(p.Head)
		for b := range 3 {
			rt.src_base[b] = C.uint64_t(uint64(a.Buf[b].Ptr) - uint64(p.Local[b].Off))
			rt.src_region[b] = C.uint16_t(p.Local[b].Region)
			rt.dst_region[b] = C.uint16_t(p.Peer[b].Region)
			rts[i].peer_buf[b] = C.uint64_t(p.Peer[b].Off) // the kernel's arithmetic then yields region offsets
		}
		rt.channel = C.uint16_t(p.Channel)
		if a.PortMirror != nil && p.Mirror.Size > 0 {
			rt.mirror_base = C.uint64_t(a.PortMirror.Mem.Dev)
			rt.mirror_region = C.uint16_t(p.Mirror.Region)
		}
		if p.Stage.Size > 0 {
			rt.stage_region = C.uint16_t(p.Stage.Region)
		} else {
			stage = false // an end whose connection lacks the buffer: the proxy stages
		}
		rts[i].peer_inbound = 0
		k++
		rts[i].port = C.int32_t(k)
	}
	off += len(ends) * portRTBytes
	pl.fences = C.uint64_t(off)
	pl.nfence = C.int32_t(len(a.PortFence))
	for i, f := range a.PortFence {
		fr := (*C.theseus_port_fence)(unsafe.Pointer(&buf[off+i*portFenceBytes]))
		fr.fifo = C.uint64_t(f.Conn.FIFO())
		fr.head = C.uint64_t(f.Head)
		fr.inbound = C.uint64_t(f.Inbound)
		fr.expected = C.uint64_t(f.Expected)
		fr.channel = C.uint32_t(f.Channel)
		fr.peer = C.int32_t(f.Peer)
	}
	off += len(a.PortFence) * portFenceBytes
	if st := a.PortStage; stage {
		pl.stage = C.uint64_t(st.Mem.Dev)
		pl.stage_tbs = C.int32_t(st.TBs)
		pl.stage_tb_bytes = C.int64_t(st.TBBytes)
	}
	if m := a.PortMirror; m != nil {
		pl.mirror = C.uint64_t(m.Mem.Dev)
		pl.mirror_map = C.uint64_t(off)
		pl.mirror_chunks = C.int64_t(m.Chunks)
		pl.mirror_bytes = C.int64_t(m.Mem.Size)
		for i, w := range m.Map {
			*(*uint32)(unsafe.Pointer(&buf[off+4*i])) = w
		}
	}
	return buf
}

// fixPort turns the relative pointers of a port block uploaded at base
// into device addresses.
func fixPort(buf []byte, base driver.Ptr) {
	pl := (*C.theseus_port_launch)(unsafe.Pointer(&buf[0]))
	pl.ends += C.uint64_t(base)
	pl.fences += C.uint64_t(base)
	if pl.mirror != 0 {
		pl.mirror_map += C.uint64_t(base)
	}
}

// setPort sets a launch's port block.
func setPort(a *Launch, p driver.Ptr) { a.port = C.uint64_t(p) }
