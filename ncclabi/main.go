// Command ncclabi is libtheseus_nccl.so, Theseus's NCCL-compatible library
// (NCCL 2.25.1 ABI), built as a C shared library:
//
//	go build -buildmode=c-shared \
//	    -ldflags='-extldflags "-Wl,-soname,libnccl.so.2 -Wl,-z,nodelete"' \
//	    -o build/lib/libtheseus_nccl.so ./ncclabi
//
// (ncclabi/Makefile does this, builds the LD_AUDIT shim and the static
// archive, and installs lib/ and include/ under a prefix.) The public header
// is ncclabi/include/nccl.h. What each NCCL call does — natively, on the
// fallback NCCL named by THESEUS_NCCL_LIB_PATH, or rejected with
// ncclInvalidUsage — is docs/support-matrix.md; how the Go runtime lives in
// a C, C++ or Python host process is docs/ncclabi.md.
//
// Layout: abi.c defines every public symbol (pnccl* strong, ncclX weak
// aliases, as NCCL does) and refuses calls after fork; exports.go holds the
// Go side of each (thsGo*), which converts arguments and calls
// internal/abi, the NCCL semantics; fallback.c opens the real NCCL;
// internal/engine binds the Theseus runtime.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/ncclabi/internal/engine"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
)

/*
#cgo CFLAGS: -I${SRCDIR}/include -I${SRCDIR} -I${SRCDIR}/../runtime/replay
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

func main() {}

// MaxProcsDefault caps GOMAXPROCS inside a host process (a training job on
// a 200-core node must not get 200 Go worker threads from a communication
// library). GOMAXPROCS in the environment overrides it.
const MaxProcsDefault = 4

func init() {
	if os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > MaxProcsDefault {
		runtime.GOMAXPROCS(MaxProcsDefault)
	}
}

var (
	setupOnce sync.Once
	theLib    = &abi.Library{}
	setupErr  error
	setupRes  abi.Result
)

// setup opens the backend and the fallback NCCL once, at the first call
// that needs them.
func setup() {
	theLib.SetLastError = setLastError
	theLib.Timeout = 2 * env.TimeoutOrDefault()
	backend, err := env.Backend.Enum()
	if err != nil {
		setupErr, setupRes = err, abi.InvalidUsage
		return
	}
	eng, err := engine.Open(backend)
	if err != nil {
		setupErr, setupRes = fmt.Errorf("cannot start the %s backend: %w", backend, err), abi.SystemError
		if backend == "cuda" {
			setupRes = abi.UnhandledCudaError
		}
		return
	}
	theLib.Eng = eng
	replay := true // the default; an empty value keeps it
	if raw, set := env.Replay.Raw(); set && strings.TrimSpace(raw) != "" {
		var err error
		if replay, err = env.Replay.Bool(); err != nil {
			log.Warnf(log.Init, "THESEUS_REPLAY: %v (1, true, yes or on; 0, false, no or off); repeated calls are launched from C (the default)", err)
			replay = true
		}
	}
	theLib.Replay = replay
	openFallback()
	log.Logf(log.Version, log.Init, "Theseus NCCL %d.%d.%d ABI (libtheseus_nccl.so), backend %s, fallback %s, GOMAXPROCS %d",
		C.NCCL_MAJOR, C.NCCL_MINOR, C.NCCL_PATCH, backend, fallbackDesc(), runtime.GOMAXPROCS(0))
	if !strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff") && log.On(log.Info, log.Init) {
		log.Infof(log.Init, "hint: GODEBUG=asyncpreemptoff=1 stops the Go runtime's SIGURG preemption signals in this process (docs/ncclabi.md)")
	}
}

func fallbackDesc() string {
	if theLib.FB == nil {
		return "none (" + theLib.FBReason + ")"
	}
	f := theLib.FB.(*cFallback)
	return fmt.Sprintf("%s (NCCL %d)", f.path, f.version)
}

// library returns the set-up library, or (nil, the setup failure's result,
// logged) when the backend could not start.
func library(api string) (*abi.Library, C.ncclResult_t) {
	setupOnce.Do(setup)
	if setupErr != nil {
		return nil, C.ncclResult_t(theLib.Fail(setupRes, "%s: %v", api, setupErr))
	}
	return theLib, C.ncclSuccess
}

func setLastError(s string) {
	if len(s) == 0 {
		C.ths_set_last_error(nil, 0)
		return
	}
	C.ths_set_last_error((*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s)))
}

// fixSignals adds SA_ONSTACK to signal handlers the host process installed
// without it (a Go runtime in the process crashes when such a handler runs
// on a Go thread's small stack). Called at every communicator creation.
func fixSignals(api string) {
	var buf [256]C.char
	if n := C.ths_fix_signal_handlers(&buf[0], C.size_t(len(buf))); n > 0 {
		log.Infof(log.Init, "%s: added SA_ONSTACK to %d signal handler(s) installed without it (signals %s)", api, int(n), C.GoString(&buf[0]))
	}
}

// cptr turns an address held as an integer (a C or device pointer) back
// into a pointer for a C call.
func cptr(u uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&u)) }
