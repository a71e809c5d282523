package cli

import "golang.org/x/sys/unix"

// AddressSpaceLimit is RLIMIT_AS (ulimit -v) in bytes, or 0 when unlimited
// or unknown.
func AddressSpaceLimit() int64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &r); err != nil || r.Cur == unix.RLIM_INFINITY || r.Cur > 1<<62 {
		return 0
	}
	return int64(r.Cur)
}

// PhysicalMemory is the machine's RAM in bytes, or 0 when unknown.
func PhysicalMemory() int64 {
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

// FileLimit is RLIMIT_NOFILE's soft limit (ulimit -n), or 0 when unlimited
// or unknown. (Go raises the soft limit to the hard one at start.)
func FileLimit() int64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur == unix.RLIM_INFINITY || r.Cur > 1<<62 {
		return 0
	}
	return int64(r.Cur)
}
