// The product's executor kernel: executor.cuh and nothing else. build.sh
// compiles it once per datatype (-DTHESEUS_DTYPE) into ptx/, which package
// cuda embeds. Measurement builds compile bench.cu instead (`build.sh
// bench`), never embedded.

#include "executor.cuh"
