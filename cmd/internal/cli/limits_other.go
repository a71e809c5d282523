//go:build !linux

package cli

// AddressSpaceLimit is unknown outside Linux.
func AddressSpaceLimit() int64 { return 0 }

// PhysicalMemory is unknown outside Linux.
func PhysicalMemory() int64 { return 0 }

// FileLimit is unknown outside Linux.
func FileLimit() int64 { return 0 }
