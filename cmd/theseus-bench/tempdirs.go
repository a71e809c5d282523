package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// tempDirs are the directories the benchmark created for itself (the
// materialised default context, the hot swap's copy of it). Deferred
// removals do not run when SIGINT or SIGTERM ends the process, so the first
// registration installs a handler that removes every registered directory
// and exits with 128 plus the signal's number, as a shell reports it.
var tempDirs struct {
	sync.Mutex
	dirs    map[string]bool
	handler sync.Once
}

// removeOnSignal registers dir for removal if SIGINT or SIGTERM ends the
// process. The returned function unregisters it; call it once the
// directory has been removed in the ordinary way.
func removeOnSignal(dir string) (unregister func()) {
	tempDirs.Lock()
	if tempDirs.dirs == nil {
		tempDirs.dirs = map[string]bool{}
	}
	tempDirs.dirs[dir] = true
	tempDirs.Unlock()
	tempDirs.handler.Do(func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM)
		go func() {
			s := <-c
			tempDirs.Lock()
			for d := range tempDirs.dirs {
				os.RemoveAll(d)
			}
			tempDirs.Unlock()
			code := 128 + int(syscall.SIGINT)
			if s == syscall.SIGTERM {
				code = 128 + int(syscall.SIGTERM)
			}
			os.Exit(code)
		}()
	})
	return func() {
		tempDirs.Lock()
		delete(tempDirs.dirs, dir)
		tempDirs.Unlock()
	}
}
