package cuda

import "unsafe"

// ProbeTimes returns the %globaltimer readings (ns) that a measurement
// build of the kernel with THESEUS_PROBE_TIMES=1 (kernel/bench.cu) left in
// s's failure record page at its last launch (slot i: the executor's
// THESEUS_PROBE(..., i)); zero where none was written.
func ProbeTimes(s *Stream) [16]uint64 {
	return *(*[16]uint64)(unsafe.Add(s.errHost, 2048))
}

// P2PContract is p2pContract: 0 when kernel/launch.h's point-to-point
// numbers are runtime/launch's.
func P2PContract() int { return p2pContract() }

// P2PMaxMatrix is the kernel's AlltoAllv rank bound (kernel/launch.h).
const P2PMaxMatrix = p2pMaxMatrix
