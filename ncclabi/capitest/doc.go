// Package capitest holds the C-level acceptance tests of libtheseus_nccl.so
// (capi_test.go): it builds the library with go build -buildmode=c-shared
// into a temporary directory, compiles C programs against
// ncclabi/include/nccl.h with the system C compiler, and runs them as
// separate processes on the host backend. It has no non-test code.
package capitest
