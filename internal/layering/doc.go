// Package layering holds the test that keeps the module's imports pointing
// one way (docs/design/layering.md): ir and diag at the bottom, then
// codegen, compiler, runtime, the backends and services (cuda, contextd),
// the NCCL library (ncclabi), and the commands (cmd) on top; no product
// package imports a test helper (a package whose name ends in "test") or a
// measurement helper (cuda/cudabench). It has no code of its own.
package layering
