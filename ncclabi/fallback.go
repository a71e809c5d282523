package main

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// cFallback is abi.Fallback over fallback.c.
type cFallback struct {
	path    string
	version int
}

// openFallback opens THESEUS_NCCL_LIB_PATH, if set.
func openFallback() {
	path := env.NCCLLibPath.String()
	if path == "" {
		theLib.FBReason = "THESEUS_NCCL_LIB_PATH is not set"
		return
	}
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var buf [1024]C.char
	if C.ths_fb_open(cp, &buf[0], C.size_t(len(buf))) != 0 {
		theLib.FBReason = C.GoString(&buf[0])
		log.Warnf(log.Init, "fallback NCCL not available: %s; calls that need it will return ncclInvalidUsage", theLib.FBReason)
		return
	}
	f := &cFallback{path: C.GoString(&buf[0]), version: int(C.ths_fb_version())}
	theLib.FB = f
	log.Infof(log.Init, "fallback NCCL %s (version %d) loaded", f.path, f.version)
}

func r(x C.ncclResult_t) abi.Result { return abi.Result(x) }

func (f *cFallback) Path() string { return f.path }

func (f *cFallback) Has(name string) bool {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	return C.ths_fb_has(cs) != 0
}

func (f *cFallback) GetUniqueID() (abi.UniqueID, abi.Result) {
	var id C.ncclUniqueId
	rr := C.ths_fb_get_unique_id(&id)
	return *(*abi.UniqueID)(unsafe.Pointer(&id)), r(rr)
}

func (f *cFallback) CommInitRank(id abi.UniqueID, nranks, rank int, blocking bool) (uintptr, abi.Result) {
	var c C.ncclComm_t
	cid := (*C.ncclUniqueId)(unsafe.Pointer(&id))
	rr := C.ths_fb_comm_init_rank(&c, C.int(nranks), cid, C.int(rank))
	return handle(c), r(rr)
}

func (f *cFallback) CommInitAll(ndev int, devs []int) ([]uintptr, abi.Result) {
	comms := (*C.ncclComm_t)(C.calloc(C.size_t(ndev), C.size_t(unsafe.Sizeof(C.ncclComm_t(nil)))))
	defer C.free(unsafe.Pointer(comms))
	var dl *C.int
	if devs != nil {
		dl = (*C.int)(C.calloc(C.size_t(ndev), C.size_t(unsafe.Sizeof(C.int(0)))))
		defer C.free(unsafe.Pointer(dl))
		ds := unsafe.Slice(dl, ndev)
		for i := range ds {
			ds[i] = C.int(devs[i])
		}
	}
	rr := C.ths_fb_comm_init_all(comms, C.int(ndev), dl)
	out := make([]uintptr, ndev)
	for i, c := range unsafe.Slice(comms, ndev) {
		out[i] = handle(c)
	}
	return out, r(rr)
}

func (f *cFallback) CommSplit(parent uintptr, color, key int) (uintptr, abi.Result) {
	var c C.ncclComm_t
	rr := C.ths_fb_comm_split(C.ncclComm_t(cptr(parent)), C.int(color), C.int(key), &c)
	return handle(c), r(rr)
}

func (f *cFallback) CommShrink(parent uintptr, exclude []int, flags int) (uintptr, abi.Result) {
	var c C.ncclComm_t
	var ex *C.int
	if len(exclude) > 0 {
		ex = (*C.int)(C.calloc(C.size_t(len(exclude)), C.size_t(unsafe.Sizeof(C.int(0)))))
		defer C.free(unsafe.Pointer(ex))
		s := unsafe.Slice(ex, len(exclude))
		for i, x := range exclude {
			s[i] = C.int(x)
		}
	}
	rr := C.ths_fb_comm_shrink(C.ncclComm_t(cptr(parent)), ex, C.int(len(exclude)), &c, C.int(flags))
	return handle(c), r(rr)
}

func (f *cFallback) CommFinalize(c uintptr) abi.Result {
	return r(C.ths_fb_comm_finalize(C.ncclComm_t(cptr(c))))
}

func (f *cFallback) CommDestroy(c uintptr) abi.Result {
	return r(C.ths_fb_comm_destroy(C.ncclComm_t(cptr(c))))
}

func (f *cFallback) CommAbort(c uintptr) abi.Result {
	return r(C.ths_fb_comm_abort(C.ncclComm_t(cptr(c))))
}

func (f *cFallback) CommGetAsyncError(c uintptr) (abi.Result, abi.Result) {
	var st C.ncclResult_t
	rr := C.ths_fb_comm_get_async_error(C.ncclComm_t(cptr(c)), &st)
	return r(st), r(rr)
}

func (f *cFallback) GroupStart() abi.Result { return r(C.ths_fb_group_start()) }
func (f *cFallback) GroupEnd() abi.Result   { return r(C.ths_fb_group_end()) }

// Run forwards one data call; AlltoAllv becomes grouped Send/Recv with the
// blocks packed in peer order (nccl.h).
func (f *cFallback) Run(c uintptr, op *abi.Op) abi.Result {
	comm := C.ncclComm_t(cptr(c))
	if op.Coll != abi.CollAlltoAllv {
		rr := C.ths_fb_coll(C.int(op.Coll), cptr(op.Send), cptr(op.Recv), C.size_t(op.Count), C.int(op.DataType),
			C.int(op.RedOp), C.int(op.Root), comm, cptr(op.Stream))
		op.Served = abi.Served{Text: "the fallback NCCL"}
		return r(rr)
	}
	n := 0
	for n*n < len(op.Counts) {
		n++
	}
	var rank C.int
	if rr := C.ths_fb_comm_user_rank(comm, &rank); rr != C.ncclSuccess {
		return r(rr)
	}
	if int(rank) < 0 || int(rank) >= n {
		return abi.InternalError
	}
	sz := uint64(op.DataType.Size())
	if rr := C.ths_fb_group_start(); rr != C.ncclSuccess {
		return r(rr)
	}
	var first C.ncclResult_t
	var soff, roff uint64
	for j := 0; j < n; j++ {
		sc, rc := op.Counts[int(rank)*n+j], op.Counts[j*n+int(rank)]
		if sc > 0 {
			if rr := C.ths_fb_coll(C.int(abi.CollSend), cptr(op.Send+uintptr(soff*sz)), nil, C.size_t(sc), C.int(op.DataType), 0, C.int(j), comm, cptr(op.Stream)); rr != C.ncclSuccess && first == 0 {
				first = rr
			}
		}
		if rc > 0 {
			if rr := C.ths_fb_coll(C.int(abi.CollRecv), nil, cptr(op.Recv+uintptr(roff*sz)), C.size_t(rc), C.int(op.DataType), 0, C.int(j), comm, cptr(op.Stream)); rr != C.ncclSuccess && first == 0 {
				first = rr
			}
		}
		soff += sc
		roff += rc
	}
	if rr := C.ths_fb_group_end(); first == 0 {
		first = rr
	}
	op.Served = abi.Served{Text: "the fallback NCCL (grouped send/recv)"}
	return r(first)
}

func (f *cFallback) Register(c uintptr, buf uintptr, size uint64) (uintptr, abi.Result) {
	var h unsafe.Pointer
	rr := C.ths_fb_register(C.ncclComm_t(cptr(c)), cptr(buf), C.size_t(size), &h)
	return uintptr(h), r(rr)
}

func (f *cFallback) Deregister(c uintptr, h uintptr) abi.Result {
	return r(C.ths_fb_deregister(C.ncclComm_t(cptr(c)), cptr(h)))
}

func (f *cFallback) RedOpCreatePreMulSum(c uintptr, scalar uintptr, dt abi.DataType, residence int32) (abi.RedOp, abi.Result) {
	var op C.int
	rr := C.ths_fb_premulsum(&op, cptr(scalar), C.int(dt), C.int(residence), C.ncclComm_t(cptr(c)))
	return abi.RedOp(op), r(rr)
}

func (f *cFallback) RedOpDestroy(c uintptr, op abi.RedOp) abi.Result {
	return r(C.ths_fb_redop_destroy(C.int(op), C.ncclComm_t(cptr(c))))
}

func (f *cFallback) LastError() string { return C.GoString(C.ths_fb_last_error()) }
