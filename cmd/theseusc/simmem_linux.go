package main

import "golang.org/x/sys/unix"

// addressSpaceLimit is RLIMIT_AS (ulimit -v) in bytes, or 0 when unlimited
// or unknown.
func addressSpaceLimit() int64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &r); err != nil || r.Cur == unix.RLIM_INFINITY || r.Cur > 1<<62 {
		return 0
	}
	return int64(r.Cur)
}

// physicalMemory is the machine's RAM in bytes, or 0 when unknown.
func physicalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	n := uint64(si.Totalram) * uint64(si.Unit)
	if n > 1<<62 {
		return 0
	}
	return int64(n)
}
