//go:build !linux

package main

// addressSpaceLimit is unknown outside Linux.
func addressSpaceLimit() int64 { return 0 }

// physicalMemory is unknown outside Linux.
func physicalMemory() int64 { return 0 }
