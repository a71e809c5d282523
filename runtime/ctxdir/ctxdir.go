// Package ctxdir resolves the selection context a communicator reads when
// none is configured — one place for the NCCL library (runtime/comm), the
// Go API (runtime/theseus), theseus-bench and theseusc — and materialises
// the embedded default context (examples/contexts) when it is the one.
package ctxdir

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/env"
	rlog "github.com/theseus-ccl/theseus/runtime/log"
)

// Source says where Default found the selection context.
type Source uint8

const (
	// FromEnv: THESEUS_SELECTION_CONTEXT.
	FromEnv Source = iota
	// FromHome: $HOME/.theseus/contexts/default, which exists.
	FromHome
	// FromInstall: PREFIX/share/theseus/contexts/default beside the library
	// or program (PREFIX/lib/libtheseus_nccl.so, PREFIX/bin/…), which
	// exists (`make -C ncclabi install` puts it there).
	FromInstall
	// FromEmbedded: the default context built into the library or program
	// (examples/contexts), materialised read-only under the user's cache
	// directory.
	FromEmbedded
)

var sourceNames = [...]string{"THESEUS_SELECTION_CONTEXT", "home", "installed", "embedded default"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// Choice is the selection context Default chose.
type Choice struct {
	Dir    string
	Source Source
}

// String is "DIR (SOURCE)", as the INIT log line and theseus-bench's header
// print it.
func (c Choice) String() string { return fmt.Sprintf("%s (%s)", c.Dir, c.Source) }

// Default is the selection context a communicator reads when none is
// configured (docs/selection-context.md, "Which context"), the first of:
//
//  1. THESEUS_SELECTION_CONTEXT, when set and not empty (whether or not it
//     exists: a missing context is then reported, never replaced);
//  2. $HOME/.theseus/contexts/default, when it is a directory;
//  3. PREFIX/share/theseus/contexts/default, when it is a directory, PREFIX
//     being the directory above the one holding the library or program
//     this code runs in (PREFIX/lib/libtheseus_nccl.so, PREFIX/bin/NAME);
//  4. the embedded default context (examples/contexts), materialised
//     read-only under the user's cache directory (os.UserCacheDir, else
//     os.TempDir()/theseus-UID) in a directory named after its contents,
//     shared by every process of the same build; a copy, or a directory
//     above it, that another user owns or may write is not used
//     (contexts.ReadOnlyDir, contexts.ErrUntrusted).
//
// It logs its choice (INIT). The NCCL library (runtime/comm, through
// ncclabi), the Go API (runtime/theseus), theseus-bench and theseusc select
// call it. Errors: the
// embedded default could not be written anywhere (no writable cache or
// temporary directory).
func Default() (Choice, error) {
	c, err := resolve()
	if err == nil && rlog.On(rlog.Info, rlog.Init) {
		rlog.Infof(rlog.Init, "selection context %s", c)
	}
	return c, err
}

func resolve() (Choice, error) {
	if d, ok := env.SelContext.Raw(); ok && d != "" {
		return Choice{d, FromEnv}, nil
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		d := filepath.Join(home, ".theseus", "contexts", "default")
		if isDir(d) {
			return Choice{d, FromHome}, nil
		}
	}
	if d := installedContext(); d != "" && isDir(d) {
		return Choice{d, FromInstall}, nil
	}
	d, err := embeddedContext()
	if err != nil {
		return Choice{}, err
	}
	return Choice{d, FromEmbedded}, nil
}

// Dir is Default's directory, or, when the embedded
// default cannot be written anywhere, $HOME/.theseus/contexts/default
// (./theseus_context without a home directory), which the first request
// then reports missing.
func Dir() string {
	if c, err := resolve(); err == nil {
		return c.Dir
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".theseus", "contexts", "default")
	}
	return "theseus_context"
}

func isDir(d string) bool {
	st, err := os.Stat(d)
	return err == nil && st.IsDir()
}

// embeddedContext materialises the embedded default once per process.
var embeddedContext = sync.OnceValues(func() (string, error) {
	var bases []string
	if c, err := os.UserCacheDir(); err == nil {
		bases = append(bases, filepath.Join(c, "theseus", "contexts"))
	}
	bases = append(bases, filepath.Join(os.TempDir(), fmt.Sprintf("theseus-%d", os.Getuid()), "contexts"))
	var errs []string
	for _, b := range bases {
		d, err := contexts.ReadOnlyDir(b)
		if err == nil {
			return d, nil
		}
		errs = append(errs, err.Error())
	}
	return "", fmt.Errorf("ctxdir: writing the embedded default selection context: %s; set THESEUS_SELECTION_CONTEXT to a context directory (`theseusc context init DIR` writes one)", strings.Join(errs, "; "))
})

// installedContext is PREFIX/share/theseus/contexts/default for the object
// (shared library or executable) this code is linked into, or "".
func installedContext() string { return installedFor(selfObject()) }

// installedFor is PREFIX/share/theseus/contexts/default for the object at
// PREFIX/DIR/NAME, or "" for no object.
func installedFor(obj string) string {
	if obj == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Dir(obj)), "share", "theseus", "contexts", "default")
}

// selfObject is the path of the shared library or executable that holds
// this function: the mapping of /proc/self/maps that contains its address
// (os.Executable names the host program, not a c-shared library loaded
// into it), else os.Executable.
func selfObject() string {
	pc := uint64(reflect.ValueOf(selfObject).Pointer())
	if f, err := os.Open("/proc/self/maps"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// start-end perms offset dev inode path
			fs := strings.Fields(sc.Text())
			if len(fs) < 6 || !strings.HasPrefix(fs[5], "/") {
				continue
			}
			lo, hi, ok := strings.Cut(fs[0], "-")
			if !ok {
				continue
			}
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil && a <= pc && pc < b {
				return fs[5]
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		return exe
	}
	return ""
}
