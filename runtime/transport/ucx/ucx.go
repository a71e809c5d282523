// Package ucx binds the part of UCX's UCP API that the port-channel proxy
// needs: a context with remote memory access and 64-bit atomics, one worker
// (progress, address), endpoints made from remote worker addresses,
// memory registration with packed remote keys, puts, atomic increments,
// fences and flushes. UCX chooses the wire itself (TCP, InfiniBand/RoCE
// verbs, shared memory, GPUDirect RDMA when its build has CUDA); Theseus
// writes no wire protocol.
//
// Nothing of UCX is needed at build time: cgo declares the types and entry
// points (ucp_abi.h) and Load opens libucp.so.0 with dlopen, or the file
// THESEUS_UCX_LIB names. Without it, Load returns a *LoadError that names the
// Debian package (libucx0) and the variable.
//
// UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES, ...). NewContext
// also maps the seed's MSCCLPP_HCA_DEVICES, MSCCLPP_SOCKET_IFNAME,
// MSCCLPP_SOCKET_FAMILY and MSCCLPP_GID_INDEX onto UCX's configuration
// (Settings, docs/transport.md); an explicit UCX_ variable wins.
//
// Concurrency: every call on a Context, its Worker and their endpoints,
// memory and keys takes the Context's mutex (the worker runs in UCX's
// serialized thread mode), so they may be called from any goroutine.
// Every wait is bounded by a deadline; errors carry UCX's own status text
// (ucs_status_string).
package ucx

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "ucp_abi.h"

enum {
  F_config_read, F_config_modify, F_config_release, F_get_version, F_init_version, F_cleanup,
  F_context_query, F_worker_create, F_worker_destroy, F_worker_get_address,
  F_worker_release_address, F_worker_progress, F_worker_fence, F_worker_flush_nbx, F_ep_create,
  F_ep_close_nbx, F_ep_flush_nbx, F_ep_print_info, F_mem_map, F_mem_unmap, F_rkey_pack,
  F_rkey_buffer_release, F_ep_rkey_unpack, F_rkey_destroy, F_put_nbx, F_atomic_op_nbx,
  F_request_check_status, F_request_free, F_status_string,
  F_COUNT
};

static const char* th_ucp_names[] = {
  "ucp_config_read", "ucp_config_modify", "ucp_config_release", "ucp_get_version",
  "ucp_init_version", "ucp_cleanup", "ucp_context_query", "ucp_worker_create",
  "ucp_worker_destroy", "ucp_worker_get_address", "ucp_worker_release_address",
  "ucp_worker_progress", "ucp_worker_fence", "ucp_worker_flush_nbx", "ucp_ep_create",
  "ucp_ep_close_nbx", "ucp_ep_flush_nbx", "ucp_ep_print_info", "ucp_mem_map", "ucp_mem_unmap",
  "ucp_rkey_pack", "ucp_rkey_buffer_release", "ucp_ep_rkey_unpack", "ucp_rkey_destroy",
  "ucp_put_nbx", "ucp_atomic_op_nbx", "ucp_request_check_status", "ucp_request_free",
  "ucs_status_string",
};
_Static_assert(sizeof(th_ucp_names) / sizeof(th_ucp_names[0]) == F_COUNT, "th_ucp_names");

static void* th_lib;
static void* th_fn[F_COUNT];
static char th_dlerr[512];

// th_load opens lib and resolves every entry point (ucs_status_string comes
// from libucs, a dependency of libucp, which dlsym searches too). 0: loaded;
// 1: dlopen failed (th_dlerr says why); 2: a symbol is missing (*missing).
static int th_load(const char* lib, int* missing) {
  if (th_lib) return 0;
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    snprintf(th_dlerr, sizeof th_dlerr, "%s", e ? e : "unknown error");
    return 1;
  }
  for (int i = 0; i < F_COUNT; i++) {
    void* p = dlsym(h, th_ucp_names[i]);
    if (!p) { *missing = i; dlclose(h); return 2; }
    th_fn[i] = p;
  }
  th_lib = h;
  return 0;
}
static const char* th_dlerror(void) { return th_dlerr; }
static const char* th_fn_name(int i) { return th_ucp_names[i]; }

#define FN(name) ((th_fn_##name)th_fn[F_##name])
#define th_fn_config_read th_fn_ucp_config_read
#define th_fn_config_modify th_fn_ucp_config_modify
#define th_fn_config_release th_fn_ucp_config_release
#define th_fn_get_version th_fn_ucp_get_version
#define th_fn_init_version th_fn_ucp_init_version
#define th_fn_cleanup th_fn_ucp_cleanup
#define th_fn_context_query th_fn_ucp_context_query
#define th_fn_worker_create th_fn_ucp_worker_create
#define th_fn_worker_destroy th_fn_ucp_worker_destroy
#define th_fn_worker_get_address th_fn_ucp_worker_get_address
#define th_fn_worker_release_address th_fn_ucp_worker_release_address
#define th_fn_worker_progress th_fn_ucp_worker_progress
#define th_fn_worker_fence th_fn_ucp_worker_fence
#define th_fn_worker_flush_nbx th_fn_ucp_worker_flush_nbx
#define th_fn_ep_create th_fn_ucp_ep_create
#define th_fn_ep_close_nbx th_fn_ucp_ep_close_nbx
#define th_fn_ep_flush_nbx th_fn_ucp_ep_flush_nbx
#define th_fn_ep_print_info th_fn_ucp_ep_print_info
#define th_fn_mem_map th_fn_ucp_mem_map
#define th_fn_mem_unmap th_fn_ucp_mem_unmap
#define th_fn_rkey_pack th_fn_ucp_rkey_pack
#define th_fn_rkey_buffer_release th_fn_ucp_rkey_buffer_release
#define th_fn_ep_rkey_unpack th_fn_ucp_ep_rkey_unpack
#define th_fn_rkey_destroy th_fn_ucp_rkey_destroy
#define th_fn_put_nbx th_fn_ucp_put_nbx
#define th_fn_atomic_op_nbx th_fn_ucp_atomic_op_nbx
#define th_fn_request_check_status th_fn_ucp_request_check_status
#define th_fn_request_free th_fn_ucp_request_free
#define th_fn_status_string th_fn_ucs_status_string

static void th_version(unsigned* a, unsigned* b, unsigned* c) { FN(get_version)(a, b, c); }
static const char* th_status_string(int s) { return FN(status_string)((th_ucs_status_t)s); }

static int th_config_read(th_ucp_config_t** c) { return FN(config_read)(NULL, NULL, c); }
static int th_config_modify(th_ucp_config_t* c, const char* k, const char* v) { return FN(config_modify)(c, k, v); }
static void th_config_release(th_ucp_config_t* c) { FN(config_release)(c); }

// th_init: features RMA and AMO64; API version 1.13, the oldest release these
// declarations were checked against (UCX accepts any minor up to its own).
static int th_init(th_ucp_config_t* cfg, int am, th_ucp_context_h* ctx) {
  th_ucp_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = TH_UCP_PARAM_FIELD_FEATURES | TH_UCP_PARAM_FIELD_NAME;
  p.features = TH_UCP_FEATURE_RMA | TH_UCP_FEATURE_AMO64 | (am ? TH_UCP_FEATURE_AM : 0);
  p.name = "theseus";
  return FN(init_version)(1, 13, &p, cfg, ctx);
}
static void th_cleanup(th_ucp_context_h c) { FN(cleanup)(c); }
static int th_context_memory_types(th_ucp_context_h c, uint64_t* types) {
  th_ucp_context_attr_t a;
  memset(&a, 0, sizeof a);
  a.field_mask = TH_UCP_ATTR_FIELD_MEMORY_TYPES;
  int s = FN(context_query)(c, &a);
  *types = a.memory_types;
  return s;
}

static int th_worker_create(th_ucp_context_h c, th_ucp_worker_h* w) {
  th_ucp_worker_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = TH_UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  p.thread_mode = TH_UCS_THREAD_MODE_SERIALIZED;
  return FN(worker_create)(c, &p, w);
}
static void th_worker_destroy(th_ucp_worker_h w) { FN(worker_destroy)(w); }
static int th_worker_address(th_ucp_worker_h w, void** buf, size_t* n) {
  th_ucp_address_t* a = 0;
  int s = FN(worker_get_address)(w, &a, n);
  if (s != TH_UCS_OK) return s;
  *buf = malloc(*n);
  memcpy(*buf, a, *n);
  FN(worker_release_address)(w, a);
  return s;
}
static unsigned th_progress(th_ucp_worker_h w) { return FN(worker_progress)(w); }
static int th_fence(th_ucp_worker_h w) { return FN(worker_fence)(w); }

// An endpoint's record: the first failure UCX reported for it, through its
// error handler (a lost peer) or through the completion of an operation
// posted without a tracked request. Written inside ucp_worker_progress.
typedef struct {
  int err;       // from the endpoint error handler
  int op_err;    // from a completed operation
  int inflight;  // untracked operations not complete yet
  int closed;    // the error handler closed the endpoint (its handle is gone)
} th_ep_rec;

// th_err_cb records the failure and closes the endpoint at once (FORCE,
// which UCX allows from its error handler). UCX's software RMA (TCP)
// answers every put and atomic it receives, and a failed answer aborts the
// process ("Fatal: unexpected error: Endpoint timeout", ucp_request_try_send,
// UCX 1.13 to at least 1.19); it looks the endpoint up by id, closed ones
// included, so a lost peer's messages still in a socket's buffer are
// answered until the endpoint is destroyed, which the close brings
// forward (to when its lanes are discarded) from our own Close. It
// narrows the window; it cannot close it (docs/known-issues.md 25). The
// endpoint's handle is not used again (th_ep_closed).
static void th_err_cb(void* arg, th_ucp_ep_h ep, th_ucs_status_t st) {
  th_ep_rec* r = (th_ep_rec*)arg;
  if (r->err == 0) __atomic_store_n(&r->err, (int)st, __ATOMIC_RELEASE);
  if (!r->closed) {
    r->closed = 1;
    th_ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    p.op_attr_mask = TH_UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = TH_UCP_EP_CLOSE_FLAG_FORCE;
    th_ucs_status_ptr_t req = FN(ep_close_nbx)(ep, &p);
    if (req != NULL && !TH_UCS_PTR_IS_ERR(req)) FN(request_free)(req);
  }
}
static int th_ep_closed(th_ep_rec* r) { return r->closed; }
static void th_send_cb(void* req, th_ucs_status_t st, void* user) {
  th_ep_rec* r = (th_ep_rec*)user;
  if (st != TH_UCS_OK && r->op_err == 0) __atomic_store_n(&r->op_err, (int)st, __ATOMIC_RELEASE);
  __atomic_sub_fetch(&r->inflight, 1, __ATOMIC_RELEASE);
  FN(request_free)(req);
}
static int th_ep_err(th_ep_rec* r) { return __atomic_load_n(&r->err, __ATOMIC_ACQUIRE); }
static int th_ep_op_err(th_ep_rec* r) { return __atomic_load_n(&r->op_err, __ATOMIC_ACQUIRE); }
static int th_ep_inflight(th_ep_rec* r) { return __atomic_load_n(&r->inflight, __ATOMIC_ACQUIRE); }

static int th_ep_create(th_ucp_worker_h w, const void* addr, th_ep_rec* rec, const char* name, th_ucp_ep_h* ep) {
  th_ucp_ep_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = TH_UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | TH_UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                 TH_UCP_EP_PARAM_FIELD_ERR_HANDLER | TH_UCP_EP_PARAM_FIELD_NAME;
  p.address = (const th_ucp_address_t*)addr;
  p.err_mode = TH_UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = th_err_cb;
  p.err_handler.arg = rec;
  p.name = name;
  return FN(ep_create)(w, &p, ep);
}

// Requests: th_req returns the request pointer (or NULL when the operation
// completed at once) and the status through *st.
static void* th_req(th_ucs_status_ptr_t p, int* st) {
  if (p == NULL) { *st = TH_UCS_OK; return NULL; }
  if (TH_UCS_PTR_IS_ERR(p)) { *st = TH_UCS_PTR_RAW_STATUS(p); return NULL; }
  *st = TH_UCS_INPROGRESS;
  return p;
}
static int th_req_status(void* r) { return FN(request_check_status)(r); }
static void th_req_free(void* r) { FN(request_free)(r); }

static void* th_ep_close(th_ucp_ep_h ep, int force, int* st) {
  th_ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = TH_UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = force ? TH_UCP_EP_CLOSE_FLAG_FORCE : 0;
  return th_req(FN(ep_close_nbx)(ep, &p), st);
}
static void* th_ep_flush(th_ucp_ep_h ep, int* st) {
  th_ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  return th_req(FN(ep_flush_nbx)(ep, &p), st);
}
static void* th_worker_flush(th_ucp_worker_h w, int* st) {
  th_ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  return th_req(FN(worker_flush_nbx)(w, &p), st);
}

// th_ep_info is ucp_ep_print_info's text (malloc'd; the caller frees it).
static char* th_ep_info(th_ucp_ep_h ep) {
  char* buf = 0;
  size_t n = 0;
  FILE* f = open_memstream(&buf, &n);
  if (!f) return 0;
  FN(ep_print_info)(ep, f);
  fclose(f);
  return buf;
}

static int th_mem_map(th_ucp_context_h c, uintptr_t addr, size_t n, int mtype, th_ucp_mem_h* m) {
  th_ucp_mem_map_params_t p;
  memset(&p, 0, sizeof p);
  p.field_mask = TH_UCP_MEM_MAP_PARAM_FIELD_ADDRESS | TH_UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                 TH_UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  p.address = (void*)addr;
  p.length = n;
  p.memory_type = mtype;
  return FN(mem_map)(c, &p, m);
}
static int th_mem_unmap(th_ucp_context_h c, th_ucp_mem_h m) { return FN(mem_unmap)(c, m); }
static int th_rkey_pack(th_ucp_context_h c, th_ucp_mem_h m, void** out, size_t* n) {
  void* b = 0;
  int s = FN(rkey_pack)(c, m, &b, n);
  if (s != TH_UCS_OK) return s;
  *out = malloc(*n);
  memcpy(*out, b, *n);
  FN(rkey_buffer_release)(b);
  return s;
}
static int th_rkey_unpack(th_ucp_ep_h ep, const void* b, th_ucp_rkey_h* rk) { return FN(ep_rkey_unpack)(ep, b, rk); }
static void th_rkey_destroy(th_ucp_rkey_h rk) { FN(rkey_destroy)(rk); }

// th_put: tracked (returns the request; the caller waits for it and frees
// it) or not (completion errors go to the endpoint record, the request is
// freed by th_send_cb). memh (may be NULL) is the source's registration.
static void* th_put(th_ucp_ep_h ep, uintptr_t src, size_t n, uint64_t raddr, th_ucp_rkey_h rk,
                    th_ucp_mem_h memh, th_ep_rec* rec, int tracked, int* st) {
  th_ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  if (!tracked) {
    p.op_attr_mask = TH_UCP_OP_ATTR_FIELD_CALLBACK | TH_UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = th_send_cb;
    p.user_data = rec;
  }
  if (memh) {
    p.op_attr_mask |= TH_UCP_OP_ATTR_FIELD_MEMH;
    p.memh = memh;
  }
  void* r = th_req(FN(put_nbx)(ep, (const void*)src, n, raddr, rk, &p), st);
  if (!tracked && r) {  // th_send_cb frees it
    __atomic_add_fetch(&rec->inflight, 1, __ATOMIC_RELAXED);
    *st = TH_UCS_OK;
    return NULL;
  }
  return r;
}

// th_inc adds 1 to the 64-bit word at raddr, untracked (the operand is a
// constant, valid until the operation completes).
static const uint64_t th_one = 1;
static int th_inc(th_ucp_ep_h ep, uint64_t raddr, th_ucp_rkey_h rk, th_ep_rec* rec) {
  th_ucp_request_param_t p;
  memset(&p, 0, sizeof p);
  p.op_attr_mask = TH_UCP_OP_ATTR_FIELD_CALLBACK | TH_UCP_OP_ATTR_FIELD_USER_DATA | TH_UCP_OP_ATTR_FIELD_DATATYPE;
  p.cb.send = th_send_cb;
  p.user_data = rec;
  p.datatype = TH_UCP_DT_CONTIG(8);
  int st;
  th_req(FN(atomic_op_nbx)(ep, TH_UCP_ATOMIC_OP_ADD, &th_one, 1, raddr, rk, &p), &st);
  if (st == TH_UCS_INPROGRESS) {
    __atomic_add_fetch(&rec->inflight, 1, __ATOMIC_RELAXED);
    return TH_UCS_OK;
  }
  return st;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// DefaultLib is the library Load opens when THESEUS_UCX_LIB is unset: the
// soname of UCX's libucp, found through the system's library path.
const DefaultLib = "libucp.so.0"

// LoadError reports that libucp could not be loaded.
type LoadError struct {
	Lib    string // the file dlopen was given
	Reason string // dlerror's text, or the missing symbol
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("ucx: cannot load %s (%s): the cross-node transport needs UCX's libucp; install the Debian package libucx0 (apt-get install libucx0), or set THESEUS_UCX_LIB to the libucp.so of another UCX build", e.Lib, e.Reason)
}

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libucp once per process (THESEUS_UCX_LIB, else DefaultLib) and
// resolves the entry points. It returns the same result on every call: a
// *LoadError when the library or a symbol is missing.
//
// Before the library's constructors run, Load sets UCX_ERROR_SIGNALS to
// empty, and UCX_DEBUG_SIGNO to 0 unless it is set: UCX would otherwise
// install its own SIGSEGV, SIGBUS, SIGILL and SIGFPE (and SIGHUP) handlers
// over the Go runtime's, and a nil dereference, which the Go runtime turns
// into a panic through SIGSEGV, would crash the process
// (TestGoSignalsSurviveUCX).
func Load() error {
	loadOnce.Do(func() {
		lib := env.UCXLib.String()
		if lib == "" {
			lib = DefaultLib
		}
		os.Setenv("UCX_ERROR_SIGNALS", "")
		if _, ok := os.LookupEnv("UCX_DEBUG_SIGNO"); !ok {
			os.Setenv("UCX_DEBUG_SIGNO", "0")
		}
		cs := C.CString(lib)
		defer C.free(unsafe.Pointer(cs))
		var missing C.int
		switch C.th_load(cs, &missing) {
		case 1:
			loadErr = &LoadError{Lib: lib, Reason: C.GoString(C.th_dlerror())}
		case 2:
			loadErr = &LoadError{Lib: lib, Reason: "symbol " + C.GoString(C.th_fn_name(missing)) + " missing"}
		}
	})
	return loadErr
}

// Version is the loaded library's release (ucp_get_version); 0s before Load
// succeeds.
func Version() (major, minor, release uint) {
	if Load() != nil {
		return 0, 0, 0
	}
	var a, b, c C.uint
	C.th_version(&a, &b, &c)
	return uint(a), uint(b), uint(c)
}

// Status is a ucs_status_t.
type Status int8

// Status values the callers test for.
const (
	OK         Status = 0
	InProgress Status = 1
	ErrTimeout Status = -20 // UCS_ERR_TIMED_OUT
	ErrCancel  Status = -16 // UCS_ERR_CANCELED
)

// String is UCX's own text for the status (ucs_status_string).
func (s Status) String() string {
	if Load() != nil {
		return fmt.Sprintf("UCX status %d", int(s))
	}
	return C.GoString(C.th_status_string(C.int(s)))
}

// Error is a failed UCX call: the call, UCX's status and its text.
type Error struct {
	Op     string // the UCP function or the operation ("put", "flush")
	Status Status
}

func (e *Error) Error() string {
	return fmt.Sprintf("ucx: %s: %s (UCX status %d)", e.Op, e.Status, int(e.Status))
}

func check(op string, s C.int) error {
	if s == 0 {
		return nil
	}
	return &Error{Op: op, Status: Status(s)}
}

// Context is a UCP context (ucp_init) with the features RMA and AMO64.
type Context struct {
	mu       sync.Mutex
	h        C.th_ucp_context_h
	memTypes uint64
	settings []Setting
	closed   bool
}

// NewContext loads UCX and creates a context: ucp_config_read (UCX's own
// UCX_* variables), then the Settings that the seed's variables map to
// (MSCCLPP_HCA_DEVICES for local rank o.LocalRank of o.LocalRanks, ...),
// then ucp_init. Errors: *LoadError, the HCA list check (Settings), *Error.
func NewContext(o Options) (*Context, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	sets, err := Settings(o)
	if err != nil {
		return nil, err
	}
	// Memory-domain options (TCP_AF_PRIO, IB_GID_INDEX) reach UCX only
	// through the environment: ucp_config_modify's extra keys are applied
	// to interfaces, not memory domains (UCX 1.13-1.16). Set them before
	// ucp_init, which reads them.
	for _, s := range sets {
		if s.Env && !s.Kept {
			os.Setenv("UCX_"+s.Key, s.Value)
		}
	}
	var cfg *C.th_ucp_config_t
	if err := check("ucp_config_read", C.th_config_read(&cfg)); err != nil {
		return nil, err
	}
	defer C.th_config_release(cfg)
	for _, s := range sets {
		if s.Env || s.Kept {
			continue
		}
		k, v := C.CString(s.Key), C.CString(s.Value)
		st := C.th_config_modify(cfg, k, v)
		C.free(unsafe.Pointer(k))
		C.free(unsafe.Pointer(v))
		if err := check("ucp_config_modify("+s.Key+"="+s.Value+")", st); err != nil {
			return nil, err
		}
	}
	c := &Context{settings: sets}
	if err := check("ucp_init", C.th_init(cfg, 0, &c.h)); err != nil {
		return nil, err
	}
	var mt C.uint64_t
	if err := check("ucp_context_query", C.th_context_memory_types(c.h, &mt)); err != nil {
		C.th_cleanup(c.h)
		return nil, err
	}
	c.memTypes = uint64(mt)
	return c, nil
}

// Settings are the configuration changes NewContext applied (for the INIT
// log).
func (c *Context) Settings() []Setting { return append([]Setting(nil), c.settings...) }

// CUDA reports whether this UCX build registers CUDA device memory (its
// context lists the CUDA memory type): then puts may read and write GPU
// memory directly (GPUDirect RDMA on RDMA transports); otherwise GPU memory
// must be staged through pinned host memory.
func (c *Context) CUDA() bool { return c.memTypes&(1<<C.TH_UCS_MEMORY_TYPE_CUDA) != 0 }

// Close destroys the context (ucp_cleanup). Its workers must be closed first.
func (c *Context) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		C.th_cleanup(c.h)
	}
}

// Worker is a UCP worker: the progress engine of a set of endpoints.
type Worker struct {
	c    *Context
	h    C.th_ucp_worker_h
	addr []byte
	eps  []*Endpoint
	// abandoned are requests whose wait timed out; freed at Close.
	abandoned []unsafe.Pointer
	closed    bool
}

// NewWorker creates a worker in serialized thread mode (the Context's mutex
// orders the calls) and packs its address.
func (c *Context) NewWorker() (*Worker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &Worker{c: c}
	if err := check("ucp_worker_create", C.th_worker_create(c.h, &w.h)); err != nil {
		return nil, err
	}
	var buf unsafe.Pointer
	var n C.size_t
	if err := check("ucp_worker_get_address", C.th_worker_address(w.h, &buf, &n)); err != nil {
		C.th_worker_destroy(w.h)
		return nil, err
	}
	w.addr = C.GoBytes(buf, C.int(n))
	C.free(buf)
	return w, nil
}

// Address is the worker's packed address (ucp_worker_get_address), the
// bytes a peer passes to Connect.
func (w *Worker) Address() []byte { return append([]byte(nil), w.addr...) }

// Progress runs one round of ucp_worker_progress and returns the number of
// events it handled. Transports without remote memory access in hardware
// (TCP) carry puts and atomics as messages that the target applies inside
// its Progress: a process that is the target of puts must keep progressing.
func (w *Worker) Progress() int {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.closed {
		return 0
	}
	return int(C.th_progress(w.h))
}

// Fence orders the operations on each endpoint: those issued before it
// complete at the target before those issued after (ucp_worker_fence, the
// ordering of OpenSHMEM's shmem_fence).
func (w *Worker) Fence() error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return check("ucp_worker_fence", C.th_fence(w.h))
}

// Flush starts a flush of every endpoint of the worker (ucp_worker_flush_nbx):
// the request completes once every operation issued before it has completed
// at its target.
func (w *Worker) Flush() (*Request, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	var st C.int
	r := C.th_worker_flush(w.h, &st)
	return newRequest(w, "worker flush", r, st)
}

// Close closes the worker's endpoints (forcibly: peers see them as lost),
// frees abandoned requests and destroys the worker.
func (w *Worker) Close() {
	for _, e := range w.eps {
		e.Close(time.Now().Add(time.Second))
	}
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.closed {
		return
	}
	for _, r := range w.abandoned {
		C.th_req_free(r)
	}
	w.abandoned = nil
	C.th_worker_destroy(w.h)
	w.closed = true
	for _, e := range w.eps {
		C.free(unsafe.Pointer(e.rec))
	}
	w.eps = nil
}

// Request is an operation in flight: a flush, a close, a tracked put.
type Request struct {
	w  *Worker
	op string
	h  unsafe.Pointer
	st Status // final status once h is nil
}

func newRequest(w *Worker, op string, h unsafe.Pointer, st C.int) (*Request, error) {
	if h == nil && st != 0 {
		return nil, &Error{Op: op, Status: Status(st)}
	}
	return &Request{w: w, op: op, h: h, st: Status(st)}, nil
}

// Test reports the request's status without progressing: InProgress, OK or
// the failure (an *Error once done). A completed request is freed.
func (r *Request) Test() (done bool, err error) {
	r.w.c.mu.Lock()
	defer r.w.c.mu.Unlock()
	return r.test()
}

func (r *Request) test() (bool, error) {
	if r.h != nil && r.w.closed { // freed with the worker
		r.h, r.st = nil, ErrCancel
	}
	if r.h != nil {
		s := Status(C.th_req_status(r.h))
		if s == InProgress {
			return false, nil
		}
		C.th_req_free(r.h)
		r.h = nil
		r.st = s
	}
	if r.st != OK {
		return true, &Error{Op: r.op, Status: r.st}
	}
	return true, nil
}

// Wait progresses the worker until the request completes or the deadline
// passes: then it returns an *Error with status ErrTimeout and leaves the
// request to the worker (freed at Close).
func (r *Request) Wait(deadline time.Time) error {
	for i := 0; ; i++ {
		r.w.c.mu.Lock()
		if r.h != nil && !r.w.closed {
			C.th_progress(r.w.h)
		}
		done, err := r.test()
		if !done && (i&63 == 63) && time.Now().After(deadline) {
			r.w.abandoned = append(r.w.abandoned, r.h)
			r.h = nil
			r.w.c.mu.Unlock()
			return &Error{Op: r.op, Status: ErrTimeout}
		}
		r.w.c.mu.Unlock()
		if done {
			return err
		}
		if i&63 == 63 {
			runtime.Gosched()
		}
	}
}

// Endpoint is a connection to a remote worker, created in UCX's peer error
// handling mode: a lost peer fails the endpoint's operations and is
// reported by Err, instead of hanging them.
type Endpoint struct {
	w      *Worker
	h      C.th_ucp_ep_h
	rec    *C.th_ep_rec // C memory: UCX's callbacks write it
	name   string
	rkeys  []*RKey // destroyed before the endpoint closes
	closed bool
}

// Connect creates an endpoint to the worker whose Address is addr. name
// labels it in UCX's logs. UCX connects in the background: an unreachable
// peer shows as an error of the first operations and their flush.
func (w *Worker) Connect(addr []byte, name string) (*Endpoint, error) {
	if len(addr) == 0 {
		return nil, errors.New("ucx: connect: empty worker address")
	}
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	e := &Endpoint{w: w, name: name, rec: (*C.th_ep_rec)(C.calloc(1, C.size_t(unsafe.Sizeof(C.th_ep_rec{}))))}
	ca := C.CBytes(addr)
	defer C.free(ca)
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	if err := check("ucp_ep_create", C.th_ep_create(w.h, ca, e.rec, cn, &e.h)); err != nil {
		C.free(unsafe.Pointer(e.rec))
		return nil, err
	}
	w.eps = append(w.eps, e)
	return e, nil
}

// gone is the endpoint's failure once its error handler has closed it
// (its handle is no longer valid); the caller holds the context's lock.
func (e *Endpoint) gone(op string) error {
	if C.th_ep_closed(e.rec) == 0 {
		return nil
	}
	return &Error{Op: op, Status: Status(C.th_ep_err(e.rec))}
}

// Err is the endpoint's first failure: the peer lost (UCX's error handler)
// or an untracked operation that completed with an error; nil while none.
func (e *Endpoint) Err() error {
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	if e.w.closed { // the record went with the worker
		return &Error{Op: "endpoint", Status: ErrCancel}
	}
	if s := C.th_ep_err(e.rec); s != 0 {
		return &Error{Op: "endpoint", Status: Status(s)}
	}
	if s := C.th_ep_op_err(e.rec); s != 0 {
		return &Error{Op: "operation", Status: Status(s)}
	}
	return nil
}

// InFlight is the number of the endpoint's untracked operations (Put, Inc)
// that have not completed locally yet: UCX queues without bound, so a
// caller that posts faster than the wire drains holds back at a limit.
func (e *Endpoint) InFlight() int {
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	if e.w.closed {
		return 0
	}
	return int(C.th_ep_inflight(e.rec))
}

// Put writes n bytes from local address src (inside registered memory mem,
// or nil) to raddr in the peer's memory registered under rk. The source may
// be reused only after a later flush completes; errors of the transfer show
// in Err and fail that flush.
func (e *Endpoint) Put(src uintptr, n int, raddr uint64, rk *RKey, mem *Mem) error {
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	if err := e.gone("ucp_put_nbx"); err != nil {
		return err
	}
	var st C.int
	C.th_put(e.h, C.uintptr_t(src), C.size_t(n), C.uint64_t(raddr), rk.h, mem.handle(), e.rec, 0, &st)
	return check("ucp_put_nbx", st)
}

// PutTracked is Put with a request that completes once the source may be
// reused (local completion).
func (e *Endpoint) PutTracked(src uintptr, n int, raddr uint64, rk *RKey, mem *Mem) (*Request, error) {
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	if err := e.gone("ucp_put_nbx"); err != nil {
		return nil, err
	}
	var st C.int
	r := C.th_put(e.h, C.uintptr_t(src), C.size_t(n), C.uint64_t(raddr), rk.h, mem.handle(), e.rec, 1, &st)
	return newRequest(e.w, "put", r, st)
}

// Inc adds 1 to the 64-bit word at raddr in the peer's memory (an atomic
// add, UCP_ATOMIC_OP_ADD; raddr must be 8-byte aligned). Ordered after
// earlier puts only through Fence.
func (e *Endpoint) Inc(raddr uint64, rk *RKey) error {
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	if err := e.gone("ucp_atomic_op_nbx(add)"); err != nil {
		return err
	}
	return check("ucp_atomic_op_nbx(add)", C.th_inc(e.h, C.uint64_t(raddr), rk.h, e.rec))
}

// Flush starts a flush of the endpoint (ucp_ep_flush_nbx): the request
// completes once every operation issued on it before has completed at the
// peer, or fails with the reason it could not.
func (e *Endpoint) Flush() (*Request, error) {
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	if err := e.gone("ucp_ep_flush_nbx"); err != nil {
		return nil, err
	}
	var st C.int
	r := C.th_ep_flush(e.h, &st)
	return newRequest(e.w, "flush", r, st)
}

// Lanes are the transports UCX selected for the endpoint. UCX connects in
// the background: call it after a flush completed. Without an "rma" or
// "amo" lane, UCX carries puts and atomics as active messages on the "am"
// lane (as it does over TCP).
func (e *Endpoint) Lanes() []Lane {
	e.w.c.mu.Lock()
	if e.gone("") != nil {
		e.w.c.mu.Unlock()
		return nil
	}
	s := C.th_ep_info(e.h)
	e.w.c.mu.Unlock()
	if s == nil {
		return nil
	}
	defer C.free(unsafe.Pointer(s))
	return parseLanes(C.GoString(s))
}

// Close closes the endpoint forcibly (ucp_ep_close_nbx with FORCE: pending
// operations are cancelled, the peer sees it as lost) and waits for the
// close until the deadline.
func (e *Endpoint) Close(deadline time.Time) {
	e.w.c.mu.Lock()
	if e.closed || e.w.closed {
		e.w.c.mu.Unlock()
		return
	}
	e.closed = true
	for _, k := range e.rkeys {
		if k.h != nil {
			C.th_rkey_destroy(k.h)
			k.h = nil
		}
	}
	e.rkeys = nil
	if C.th_ep_closed(e.rec) != 0 { // (by the error handler)
		e.w.c.mu.Unlock()
		return
	}
	var st C.int
	h := C.th_ep_close(e.h, 1, &st)
	e.w.c.mu.Unlock()
	if r, err := newRequest(e.w, "close", h, st); err == nil {
		r.Wait(deadline)
	}
}

// MemType is where a registered region lives.
type MemType int

const (
	Host MemType = iota // host memory
	CUDA                // CUDA device memory (registrable only when Context.CUDA)
)

// Mem is memory registered with the context (ucp_mem_map).
type Mem struct {
	c    *Context
	h    C.th_ucp_mem_h
	Addr uintptr
	Size int
}

// Map registers [addr, addr+size) of type t. The memory must stay mapped
// until Unmap. Errors: *Error (for example CUDA memory on a UCX build
// without CUDA support).
func (c *Context) Map(addr uintptr, size int, t MemType) (*Mem, error) {
	if size <= 0 {
		return nil, fmt.Errorf("ucx: map: size %d", size)
	}
	mt := C.int(C.TH_UCS_MEMORY_TYPE_HOST)
	if t == CUDA {
		mt = C.TH_UCS_MEMORY_TYPE_CUDA
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &Mem{c: c, Addr: addr, Size: size}
	if err := check("ucp_mem_map", C.th_mem_map(c.h, C.uintptr_t(addr), C.size_t(size), mt, &m.h)); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Mem) handle() C.th_ucp_mem_h {
	if m == nil {
		return nil
	}
	return m.h
}

// PackRKey returns the region's packed remote key (ucp_rkey_pack), the
// bytes a peer unpacks with Endpoint.UnpackRKey.
func (m *Mem) PackRKey() ([]byte, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	var buf unsafe.Pointer
	var n C.size_t
	if err := check("ucp_rkey_pack", C.th_rkey_pack(m.c.h, m.h, &buf, &n)); err != nil {
		return nil, err
	}
	defer C.free(buf)
	return C.GoBytes(buf, C.int(n)), nil
}

// Unmap releases the registration.
func (m *Mem) Unmap() error {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if m.h == nil {
		return nil
	}
	err := check("ucp_mem_unmap", C.th_mem_unmap(m.c.h, m.h))
	m.h = nil
	return err
}

// RKey is a peer's unpacked remote key, valid on the endpoint it was
// unpacked for.
type RKey struct {
	e *Endpoint
	h C.th_ucp_rkey_h
}

// UnpackRKey unpacks a peer's packed key for use on this endpoint.
func (e *Endpoint) UnpackRKey(b []byte) (*RKey, error) {
	if len(b) == 0 {
		return nil, errors.New("ucx: unpack rkey: empty key")
	}
	e.w.c.mu.Lock()
	defer e.w.c.mu.Unlock()
	cb := C.CBytes(b)
	defer C.free(cb)
	k := &RKey{e: e}
	if err := e.gone("ucp_ep_rkey_unpack"); err != nil {
		return nil, err
	}
	if err := check("ucp_ep_rkey_unpack", C.th_rkey_unpack(e.h, cb, &k.h)); err != nil {
		return nil, err
	}
	e.rkeys = append(e.rkeys, k)
	return k, nil
}

// Destroy releases the key (Endpoint.Close releases those left).
func (k *RKey) Destroy() {
	k.e.w.c.mu.Lock()
	defer k.e.w.c.mu.Unlock()
	if k.h != nil && !k.e.closed {
		C.th_rkey_destroy(k.h)
	}
	k.h = nil
}
