package cuda

import _ "unsafe" // go:linkname

// monotonic is the Go runtime's nanotime: CLOCK_MONOTONIC in nanoseconds
// on Linux, the clock the driver package's C side reads (th_now), so that
// the launch accounting (TimeLaunchParts) can place C's readings between
// its own. One vDSO clock read, no allocation.
//
//go:linkname monotonic runtime.nanotime
func monotonic() int64

// Clock reads the clock of Stream.LastLaunchClock: CLOCK_MONOTONIC in
// nanoseconds, comparable with its readings.
func Clock() int64 { return monotonic() }
