package main

// The Go side of every public function (abi.c calls these). Each converts
// C arguments, checks output pointers, and calls internal/abi. Handles and
// strings given to C are C memory (cgo pointer rules).

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"unsafe"

	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
)

func res(r abi.Result) C.ncclResult_t { return C.ncclResult_t(r) }

// recoverTo turns a Go panic in an exported function into
// ncclInternalError with a WARN line (and the stack), instead of taking the
// host process down. Deferred by every export.
func recoverTo(rc *C.ncclResult_t, fn string) {
	if p := recover(); p != nil {
		msg := fmt.Sprintf("%s: internal error (a Go panic: %v); please report it", strings.TrimPrefix(fn, "thsGo"), p)
		log.Warnf(log.NCCL, "%s\n%s", msg, debug.Stack())
		setLastError(msg)
		*rc = C.ncclInternalError
	}
}

func thread(depth *C.int32_t) abi.Thread {
	return abi.Thread{Key: uintptr(unsafe.Pointer(depth)), Depth: (*int32)(unsafe.Pointer(depth))}
}

func handle(c C.ncclComm_t) uintptr { return uintptr(unsafe.Pointer(c)) }

// readConfig reads min(config->size, 48) bytes of a client's ncclConfig_t
// (nil config: nil, Success).
func readConfig(l *abi.Library, p *C.ncclConfig_t, api string) (*abi.Config, abi.Result) {
	if p == nil {
		return nil, abi.Success
	}
	size := *(*uint64)(unsafe.Pointer(p))
	b := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(p)), abi.ReadLen(size))...)
	cfg, e := abi.DecodeConfig(b)
	if e != nil {
		return nil, l.Fail(e.Result, "%s: %s", api, e.Msg)
	}
	if log.On(log.Info, log.Init) {
		var ign []string
		if cfg.CGAClusterSize != abi.UndefInt {
			ign = append(ign, "cgaClusterSize")
		}
		if cfg.MinCTAs != abi.UndefInt || cfg.MaxCTAs != abi.UndefInt {
			ign = append(ign, "minCTAs/maxCTAs")
		}
		if cfg.NetName != 0 {
			ign = append(ign, "netName")
		}
		if cfg.SplitShare != abi.UndefInt {
			ign = append(ign, "splitShare")
		}
		if len(ign) > 0 {
			log.Infof(log.Init, "%s: config (size %d, version %d) blocking %d; ignored (schedules choose their own resources): %s", api, cfg.Size, cfg.Version, cfg.Blocking, strings.Join(ign, ", "))
		}
	}
	return &cfg, abi.Success
}

//export thsGoReject
func thsGoReject(name, reason *C.char) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoReject")
	api := C.GoString(name)
	l, r := library(api)
	if l == nil {
		return r
	}
	return res(l.Reject(api, C.GoString(reason)))
}

//export thsGoFail
func thsGoFail(r C.ncclResult_t, msg *C.char) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoFail")
	setupOnce.Do(setup)
	return res(theLib.Fail(abi.Result(r), "%s", C.GoString(msg)))
}

//export thsGoMemAlloc
func thsGoMemAlloc(ptr *unsafe.Pointer, size C.size_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoMemAlloc")
	l, r := library("ncclMemAlloc")
	if l == nil {
		return r
	}
	if ptr == nil {
		return res(l.Fail(abi.InvalidArgument, "ncclMemAlloc: ptr is NULL"))
	}
	p, rr := l.MemAlloc(uint64(size))
	*(*uintptr)(unsafe.Pointer(ptr)) = p
	return res(rr)
}

//export thsGoMemFree
func thsGoMemFree(ptr unsafe.Pointer) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoMemFree")
	l, r := library("ncclMemFree")
	if l == nil {
		return r
	}
	return res(l.MemFree(uintptr(ptr)))
}

//export thsGoGetUniqueId
func thsGoGetUniqueId(id *C.ncclUniqueId) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoGetUniqueId")
	l, r := library("ncclGetUniqueId")
	if l == nil {
		return r
	}
	if id == nil {
		return res(l.Fail(abi.InvalidArgument, "ncclGetUniqueId: uniqueId is NULL"))
	}
	uid, rr := l.GetUniqueID()
	if rr == abi.Success {
		*(*abi.UniqueID)(unsafe.Pointer(id)) = uid
	}
	return res(rr)
}

var initNames = [...]string{"ncclCommInitRankConfig", "ncclCommInitRank", "ncclCommInitRankScalable"}

//export thsGoCommInitRank
func thsGoCommInitRank(comm *C.ncclComm_t, nranks C.int, id *C.ncclUniqueId, rank C.int, config *C.ncclConfig_t, which C.int, depth *C.int32_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommInitRank")
	api := initNames[which]
	l, r := library(api)
	if l == nil {
		return r
	}
	if comm == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: comm is NULL", api))
	}
	*comm = nil
	cfg := abi.DefaultConfig()
	if config != nil {
		c, rr := readConfig(l, config, api)
		if rr != abi.Success {
			return res(rr)
		}
		cfg = *c
	}
	fixSignals(api)
	h := C.ths_comm_alloc()
	if h == nil {
		return res(l.Fail(abi.SystemError, "%s: out of memory", api))
	}
	keep, rr := l.InitRank(thread(depth), handle(h), *(*abi.UniqueID)(unsafe.Pointer(id)), int(nranks), int(rank), cfg, api)
	if keep {
		*comm = h
	} else {
		C.ths_comm_free(h)
	}
	return res(rr)
}

//export thsGoCommInitAll
func thsGoCommInitAll(comm *C.ncclComm_t, ndev C.int, devlist *C.int) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommInitAll")
	const api = "ncclCommInitAll"
	l, r := library(api)
	if l == nil {
		return r
	}
	if comm == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: comm is NULL", api))
	}
	if ndev < 1 {
		return res(l.Fail(abi.InvalidArgument, "%s: ndev %d must be >= 1", api, int(ndev)))
	}
	fixSignals(api)
	out := unsafe.Slice(comm, int(ndev))
	hs := make([]uintptr, ndev)
	hc := make([]C.ncclComm_t, ndev)
	for i := range hs {
		out[i] = nil
		hc[i] = C.ths_comm_alloc()
		hs[i] = handle(hc[i])
	}
	var devs []int
	if devlist != nil {
		for _, d := range unsafe.Slice(devlist, int(ndev)) {
			devs = append(devs, int(d))
		}
	}
	rr := l.InitAll(hs, devs)
	if rr == abi.Success {
		copy(out, hc)
	}
	return res(rr)
}

//export thsGoCommFinalize
func thsGoCommFinalize(comm C.ncclComm_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommFinalize")
	l, r := library("ncclCommFinalize")
	if l == nil {
		return r
	}
	return res(l.Finalize(handle(comm)))
}

//export thsGoCommDestroy
func thsGoCommDestroy(comm C.ncclComm_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommDestroy")
	l, r := library("ncclCommDestroy")
	if l == nil {
		return r
	}
	return res(l.Destroy(handle(comm)))
}

//export thsGoCommAbort
func thsGoCommAbort(comm C.ncclComm_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommAbort")
	l, r := library("ncclCommAbort")
	if l == nil {
		return r
	}
	return res(l.Abort(handle(comm)))
}

//export thsGoCommRevoke
func thsGoCommRevoke(comm C.ncclComm_t, flags C.int) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommRevoke")
	l, r := library("ncclCommRevoke")
	if l == nil {
		return r
	}
	return res(l.Revoke(handle(comm), int(flags)))
}

//export thsGoCommSplit
func thsGoCommSplit(comm C.ncclComm_t, color, key C.int, newcomm *C.ncclComm_t, config *C.ncclConfig_t, depth *C.int32_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommSplit")
	const api = "ncclCommSplit"
	l, r := library(api)
	if l == nil {
		return r
	}
	if newcomm == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: newcomm is NULL", api))
	}
	*newcomm = nil
	cfg, rr := readConfig(l, config, api)
	if rr != abi.Success {
		return res(rr)
	}
	fixSignals(api)
	h := C.ths_comm_alloc()
	keep, rr := l.Split(thread(depth), handle(comm), int(color), int(key), handle(h), cfg)
	if keep {
		*newcomm = h
	} else {
		C.ths_comm_free(h)
	}
	return res(rr)
}

//export thsGoCommShrink
func thsGoCommShrink(comm C.ncclComm_t, exclude *C.int, n C.int, newcomm *C.ncclComm_t, config *C.ncclConfig_t, flags C.int, depth *C.int32_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommShrink")
	const api = "ncclCommShrink"
	l, r := library(api)
	if l == nil {
		return r
	}
	if newcomm == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: newcomm is NULL", api))
	}
	*newcomm = nil
	if n < 0 || n > 0 && exclude == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: excludeRanksCount %d with list %p", api, int(n), exclude))
	}
	cfg, rr := readConfig(l, config, api)
	if rr != abi.Success {
		return res(rr)
	}
	var ex []int
	if n > 0 {
		for _, x := range unsafe.Slice(exclude, int(n)) {
			ex = append(ex, int(x))
		}
	}
	fixSignals(api)
	h := C.ths_comm_alloc()
	keep, rr := l.Shrink(thread(depth), handle(comm), ex, handle(h), cfg, int(flags))
	if keep {
		*newcomm = h
	} else {
		C.ths_comm_free(h)
	}
	return res(rr)
}

//export thsGoResetDebugInit
func thsGoResetDebugInit() {
	var rc C.ncclResult_t
	defer recoverTo(&rc, "thsGoResetDebugInit")
	env.Reset()
	lvl := log.None
	if v, err := env.Debug.Enum(); err == nil {
		for l := log.None; l <= log.Trace; l++ {
			if l.String() == v {
				lvl = l
			}
		}
	}
	sub, err := log.ParseSubsys(env.DebugSubsys.String())
	if err != nil {
		sub = log.Init
	}
	log.SetLevel(lvl, sub)
	// A call launched from C logs nothing: stop the replay records, so that
	// a newly enabled INFO COLL log sees every call from now on.
	theLib.DisarmReplays()
	if f := env.DebugFile.String(); f != "" {
		host, _ := os.Hostname()
		name := strings.NewReplacer("%h", host, "%p", itoa(os.Getpid())).Replace(f)
		if w, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			log.SetOutput(w)
		}
	}
}

func itoa(n int) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

//export thsGoCommGetAsyncError
func thsGoCommGetAsyncError(comm C.ncclComm_t, asyncError *C.ncclResult_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommGetAsyncError")
	const api = "ncclCommGetAsyncError"
	l, r := library(api)
	if l == nil {
		return r
	}
	if asyncError == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: asyncError is NULL", api))
	}
	st, rr := l.GetAsyncError(handle(comm))
	if rr == abi.Success {
		*asyncError = C.ncclResult_t(st)
	}
	return res(rr)
}

var queryNames = [...]string{"ncclCommCount", "ncclCommCuDevice", "ncclCommUserRank"}

//export thsGoCommQuery
func thsGoCommQuery(comm C.ncclComm_t, out *C.int, which C.int) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommQuery")
	api := queryNames[which]
	l, r := library(api)
	if l == nil {
		return r
	}
	if out == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: output pointer is NULL", api))
	}
	var v int
	var rr abi.Result
	switch which {
	case 0:
		v, rr = l.Count(handle(comm))
	case 1:
		v, rr = l.CuDevice(handle(comm))
	default:
		v, rr = l.UserRank(handle(comm))
	}
	if rr == abi.Success {
		*out = C.int(v)
	}
	return res(rr)
}

//export thsGoCommRegister
func thsGoCommRegister(comm C.ncclComm_t, buff unsafe.Pointer, size C.size_t, hd *unsafe.Pointer) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommRegister")
	const api = "ncclCommRegister"
	l, r := library(api)
	if l == nil {
		return r
	}
	if hd == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: handle is NULL", api))
	}
	h, rr := l.Register(handle(comm), uintptr(buff), uint64(size))
	*(*uintptr)(unsafe.Pointer(hd)) = h
	return res(rr)
}

//export thsGoCommDeregister
func thsGoCommDeregister(comm C.ncclComm_t, hd unsafe.Pointer) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommDeregister")
	l, r := library("ncclCommDeregister")
	if l == nil {
		return r
	}
	return res(l.Deregister(handle(comm), uintptr(hd)))
}

//export thsGoRedOpCreatePreMulSum
func thsGoRedOpCreatePreMulSum(op *C.int, scalar unsafe.Pointer, dtype, residence C.int, comm C.ncclComm_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoRedOpCreatePreMulSum")
	const api = "ncclRedOpCreatePreMulSum"
	l, r := library(api)
	if l == nil {
		return r
	}
	if op == nil {
		return res(l.Fail(abi.InvalidArgument, "%s: op is NULL", api))
	}
	o, rr := l.RedOpCreatePreMulSum(handle(comm), uintptr(scalar), abi.DataType(dtype), int32(residence))
	if rr == abi.Success {
		*op = C.int(o)
	}
	return res(rr)
}

//export thsGoRedOpDestroy
func thsGoRedOpDestroy(op C.int, comm C.ncclComm_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoRedOpDestroy")
	l, r := library("ncclRedOpDestroy")
	if l == nil {
		return r
	}
	return res(l.RedOpDestroy(handle(comm), abi.RedOp(op)))
}

// thsGoColl is every data call. rec receives the address of the replay
// record the call armed (0: none), which abi.c uses for the call's repeats
// (docs/ncclabi.md, "Launches from C").
//
//export thsGoColl
func thsGoColl(kind C.int, send, recv unsafe.Pointer, count C.size_t, dtype, op, root C.int, comm C.ncclComm_t, stream unsafe.Pointer, cntCPU, cntGPU *C.size_t, depth *C.int32_t, rec *C.uintptr_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoColl")
	o := abi.Op{Coll: abi.Coll(kind), Send: uintptr(send), Recv: uintptr(recv), Count: uint64(count),
		DataType: abi.DataType(dtype), RedOp: abi.RedOp(op), Root: int(root), Stream: uintptr(stream)}
	l, r := library(o.Coll.API())
	if l == nil {
		return r
	}
	if o.Coll == abi.CollAlltoAllv {
		if cntCPU == nil {
			return res(l.Fail(abi.InvalidArgument, "ncclAlltoAllv: cntMatrixCpu is NULL"))
		}
		n, rr := l.Count(handle(comm))
		if rr != abi.Success {
			return res(rr)
		}
		src := unsafe.Slice((*uint64)(unsafe.Pointer(cntCPU)), n*n)
		o.Counts = append([]uint64(nil), src...)
		o.CountsGPU = uintptr(unsafe.Pointer(cntGPU))
	}
	rc = res(l.Coll(thread(depth), handle(comm), &o))
	if rec != nil {
		*rec = C.uintptr_t(o.Replay)
	}
	return rc
}

//export thsGoGroupStart
func thsGoGroupStart(depth *C.int32_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoGroupStart")
	setupOnce.Do(setup)
	return res(theLib.GroupStart(thread(depth)))
}

//export thsGoGroupEnd
func thsGoGroupEnd(depth *C.int32_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoGroupEnd")
	setupOnce.Do(setup)
	return res(theLib.GroupEnd(thread(depth)))
}

//export thsGoGroupSimulateEnd
func thsGoGroupSimulateEnd(info *C.ncclSimInfo_t, depth *C.int32_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoGroupSimulateEnd")
	const api = "ncclGroupSimulateEnd"
	setupOnce.Do(setup)
	if info == nil {
		return res(theLib.Fail(abi.InvalidArgument, "%s: simInfo is NULL", api))
	}
	if info.magic != 0x74685283 {
		return res(theLib.Fail(abi.InvalidArgument, "%s: simInfo has magic %#x: initialise it with NCCL_SIM_INFO_INITIALIZER", api, uint32(info.magic)))
	}
	return res(theLib.GroupSimulateEnd(thread(depth)))
}

//export thsGoStreamSync
func thsGoStreamSync(comm C.ncclComm_t, stream unsafe.Pointer) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoStreamSync")
	l, r := library("theseusStreamSynchronize")
	if l == nil {
		return r
	}
	return res(l.StreamSync(handle(comm), uintptr(stream)))
}

//export thsGoCommStats
func thsGoCommStats(comm C.ncclComm_t, native, fallback, rejected *C.uint64_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommStats")
	l, r := library("theseusCommStats")
	if l == nil {
		return r
	}
	s, rr := l.CommStats(handle(comm))
	if rr != abi.Success {
		return res(rr)
	}
	for _, p := range []struct {
		dst *C.uint64_t
		v   uint64
	}{{native, s.Native}, {fallback, s.Fallback}, {rejected, s.Rejected}} {
		if p.dst != nil {
			*p.dst = C.uint64_t(p.v)
		}
	}
	return C.ncclSuccess
}

//export thsGoCommLaunchTime
func thsGoCommLaunchTime(comm C.ncclComm_t, launches, ns *C.uint64_t) (rc C.ncclResult_t) {
	defer recoverTo(&rc, "thsGoCommLaunchTime")
	l, r := library("theseusCommLaunchTime")
	if l == nil {
		return r
	}
	n, d, rr := l.LaunchTime(handle(comm))
	if rr != abi.Success {
		return res(rr)
	}
	if launches != nil {
		*launches = C.uint64_t(n)
	}
	if ns != nil {
		*ns = C.uint64_t(d)
	}
	return C.ncclSuccess
}
