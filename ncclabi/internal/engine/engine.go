// Package engine binds the NCCL layer (ncclabi/internal/abi) to the Theseus
// runtime: abi.Engine over runtime/theseus with the host backend
// (runtime/host) or the CUDA backend (cuda).
package engine

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
)

// Open starts the named backend ("host" or "cuda").
func Open(backend string) (abi.Engine, error) {
	return nil, fmt.Errorf("backend %q: the Theseus runtime (runtime/theseus) is not linked into this build yet", backend)
}
