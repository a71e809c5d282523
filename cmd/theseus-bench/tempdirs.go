package main

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// onSignal holds what SIGINT or SIGTERM must do before the process ends:
// remove the directories the benchmark created for itself (the hot swap's
// copy of the context) and print what was measured. Deferred functions do
// not run when a signal ends the process, so a handler, installed once,
// runs the registered actions, removes the directories and exits with 128
// plus the signal's number, as a shell reports it.
var onSignal struct {
	sync.Mutex
	dirs    map[string]bool
	last    func(sig os.Signal) // the run's partial output
	handler sync.Once
}

// installSignalHandler installs the handler (once per process).
func installSignalHandler() {
	onSignal.handler.Do(func() {
		c := make(chan os.Signal, 1)
		signal.Notify(c, os.Interrupt, syscall.SIGTERM)
		go func() {
			s := <-c
			onSignal.Lock()
			if onSignal.last != nil {
				onSignal.last(s)
			}
			for d := range onSignal.dirs {
				os.RemoveAll(d)
			}
			onSignal.Unlock()
			code := 128 + int(syscall.SIGINT)
			if s == syscall.SIGTERM {
				code = 128 + int(syscall.SIGTERM)
			}
			os.Exit(code)
		}()
	})
}

// removeOnSignal registers dir for removal if SIGINT or SIGTERM ends the
// process. The returned function unregisters it; call it once the
// directory has been removed in the ordinary way.
func removeOnSignal(dir string) (unregister func()) {
	onSignal.Lock()
	if onSignal.dirs == nil {
		onSignal.dirs = map[string]bool{}
	}
	onSignal.dirs[dir] = true
	onSignal.Unlock()
	installSignalHandler()
	return func() {
		onSignal.Lock()
		delete(onSignal.dirs, dir)
		onSignal.Unlock()
	}
}

// printOnSignal registers f to print the run's partial output if SIGINT or
// SIGTERM ends the process (f runs under the handler's lock, before the
// directories are removed). The returned function unregisters it.
// signalName is sig's name, "SIGINT" (its String is "interrupt").
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if n := unix.SignalName(s); n != "" {
			return n
		}
	}
	return sig.String()
}

func printOnSignal(f func(sig os.Signal)) (unregister func()) {
	onSignal.Lock()
	onSignal.last = f
	onSignal.Unlock()
	installSignalHandler()
	return func() {
		onSignal.Lock()
		onSignal.last = nil
		onSignal.Unlock()
	}
}
