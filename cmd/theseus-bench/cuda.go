//go:build cgo

package main

// The CUDA backend registers itself as "cuda" (runtime/device); it loads
// libcuda.so.1 only when a communicator opens it, so the binary runs on
// machines without a GPU.
import _ "github.com/theseus-ccl/theseus/cuda"
