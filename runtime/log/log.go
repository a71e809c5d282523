// Package log writes NCCL-style debug lines:
//
//	host:pid:tid [rank] THESEUS INFO SUBSYS message
//
// The level comes from THESEUS_DEBUG (VERSION, WARN, INFO, ABORT, TRACE),
// the enabled subsystems from THESEUS_DEBUG_SUBSYS (default INIT; "ALL";
// a leading ^ negates) and the destination from THESEUS_DEBUG_FILE (%h is
// the host name, %p the pid; default stdout). WARN lines are written for
// every subsystem. A disabled line costs one atomic load and a branch; on hot
// paths guard formatting with On so that no argument is boxed:
//
//	if log.On(log.Info, log.Coll) { log.Infof(log.Coll, "...", x) }
package log

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/theseus-ccl/theseus/runtime/env"
)

// Level is a debug level, ordered as NCCL's.
type Level int32

const (
	None Level = iota
	Version
	Warn
	Info
	Abort
	Trace
)

var levelNames = [...]string{"NONE", "VERSION", "WARN", "INFO", "ABORT", "TRACE"}

func (l Level) String() string {
	if l >= 0 && int(l) < len(levelNames) {
		return levelNames[l]
	}
	return "?"
}

// Subsys is a bit set of subsystems.
type Subsys uint32

const (
	Init Subsys = 1 << iota
	Coll
	P2P
	Shm
	Net
	Graph
	Tuning
	Env
	Alloc
	Call
	Executor
	NCCL
	Selector
	All Subsys = 1<<13 - 1
)

var subsysNames = []struct {
	name string
	bit  Subsys
}{{"INIT", Init}, {"COLL", Coll}, {"P2P", P2P}, {"SHM", Shm}, {"NET", Net}, {"GRAPH", Graph},
	{"TUNING", Tuning}, {"ENV", Env}, {"ALLOC", Alloc}, {"CALL", Call}, {"EXECUTOR", Executor},
	{"NCCL", NCCL}, {"SELECTOR", Selector}}

func (s Subsys) String() string {
	for _, n := range subsysNames {
		if n.bit == s {
			return n.name
		}
	}
	return "MULTI"
}

var (
	level   atomic.Int32
	mask    atomic.Uint32
	rankTag atomic.Int32
	once    sync.Once
	outMu   sync.Mutex
	out     io.Writer = os.Stdout
	host    string
	last    atomic.Pointer[string] // last WARN text, for ncclGetLastError
)

// ParseSubsys parses a THESEUS_DEBUG_SUBSYS value.
func ParseSubsys(s string) (Subsys, error) {
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "^")
	s = strings.TrimPrefix(s, "^")
	var m Subsys
	for _, f := range strings.Split(s, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		if f == "" {
			continue
		}
		if f == "ALL" {
			m |= All
			continue
		}
		ok := false
		for _, n := range subsysNames {
			if n.name == f {
				m |= n.bit
				ok = true
			}
		}
		if !ok {
			return 0, fmt.Errorf("unknown debug subsystem %q", f)
		}
	}
	if neg {
		m = All &^ m
	}
	return m, nil
}

// setupErr receives the one warning about an invalid THESEUS_DEBUG or
// THESEUS_DEBUG_SUBSYS: standard error, not the log's destination, since
// the level that would let a WARN line through is what is wrong (tests
// replace it).
var setupErr io.Writer = os.Stderr

func setup() {
	host, _ = os.Hostname()
	lv, m := configure(setupErr)
	level.Store(int32(lv))
	mask.Store(uint32(m))
	rankTag.Store(-1)
	if f, ok := env.DebugFile.Raw(); ok && f != "" {
		f = strings.ReplaceAll(f, "%h", host)
		f = strings.ReplaceAll(f, "%p", fmt.Sprint(os.Getpid()))
		if w, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			out = w
		}
	}
}

// configure reads THESEUS_DEBUG and THESEUS_DEBUG_SUBSYS. An invalid value
// is not ignored silently: it is reported once on errw, and the level falls
// back to none (errors only) or the subsystems to INIT.
func configure(errw io.Writer) (Level, Subsys) {
	lv := None
	s, err := env.Debug.Enum()
	if err != nil {
		fmt.Fprintf(errw, "theseus: warning: %v; debug output stays off\n", err)
	}
	for i, n := range levelNames {
		if s != "" && n == s {
			lv = Level(i)
		}
	}
	m, err := ParseSubsys(env.DebugSubsys.String())
	if err != nil {
		fmt.Fprintf(errw, "theseus: warning: THESEUS_DEBUG_SUBSYS=%q: %v (want INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, CALL, EXECUTOR, NCCL, SELECTOR or ALL); using INIT\n",
			env.DebugSubsys.String(), err)
		m = Init
	}
	return lv, m
}

// On reports whether a line of this level and subsystem would be written.
// WARN and below are on for every subsystem once the level allows them.
func On(l Level, s Subsys) bool {
	once.Do(setup)
	cur := Level(level.Load())
	if l > cur || cur == None {
		return false
	}
	return l <= Warn || Subsys(mask.Load())&s != 0
}

// SetRank sets the rank printed in brackets (-1 prints the pid's device
// slot as "-").
func SetRank(r int) { once.Do(setup); rankTag.Store(int32(r)) }

// SetOutput redirects lines (tests).
func SetOutput(w io.Writer) { once.Do(setup); outMu.Lock(); out = w; outMu.Unlock() }

// SetLevel sets the level and subsystem mask (tests, and API callers).
func SetLevel(l Level, s Subsys) { once.Do(setup); level.Store(int32(l)); mask.Store(uint32(s)) }

func write(l Level, s Subsys, msg string) {
	r := rankTag.Load()
	rs := "-"
	if r >= 0 {
		rs = fmt.Sprint(r)
	}
	line := fmt.Sprintf("%s:%d:%d [%s] THESEUS %s %s %s\n", host, os.Getpid(), syscall.Gettid(), rs, l, s, msg)
	outMu.Lock()
	io.WriteString(out, line)
	outMu.Unlock()
}

// Logf writes a line if On(l, s).
func Logf(l Level, s Subsys, format string, args ...any) {
	if !On(l, s) {
		return
	}
	write(l, s, fmt.Sprintf(format, args...))
}

// Infof writes an INFO line.
func Infof(s Subsys, format string, args ...any) { Logf(Info, s, format, args...) }

// Tracef writes a TRACE line.
func Tracef(s Subsys, format string, args ...any) { Logf(Trace, s, format, args...) }

// Warnf records the message as the last error (see LastWarning) and writes
// a WARN line if the level allows.
func Warnf(s Subsys, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	last.Store(&msg)
	if On(Warn, s) {
		write(Warn, s, msg)
	}
}

// LastWarning returns the text of the most recent Warnf, or "".
func LastWarning() string {
	if p := last.Load(); p != nil {
		return *p
	}
	return ""
}
