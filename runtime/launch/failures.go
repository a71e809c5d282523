package launch

import (
	"errors"
	"fmt"
	"sync"
)

// MaxFailures caps the errors Failures.Join lists.
const MaxFailures = 16

// Failures collects the errors of a launch's concurrently running
// threadblocks or lanes, safe for concurrent use: the causes (primary)
// apart from the errors of those stopped by another's failure (wrapping
// ErrAborted), so that reports list the causes first.
type Failures struct {
	mu               sync.Mutex
	primary, aborted []error
}

// Add records err (not nil).
func (f *Failures) Add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(err, ErrAborted) {
		f.aborted = append(f.aborted, err)
	} else {
		f.primary = append(f.primary, err)
	}
}

// Len is the number of errors recorded.
func (f *Failures) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.primary) + len(f.aborted)
}

func (f *Failures) all() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(append([]error(nil), f.primary...), f.aborted...)
}

// Join is every error, causes first, at most MaxFailures of them and a
// count of the rest (errors.Join; nil if none).
func (f *Failures) Join() error {
	all := f.all()
	if len(all) > MaxFailures {
		all = append(all[:MaxFailures], fmt.Errorf("interp: ... and %d more errors", len(all)-MaxFailures))
	}
	return errors.Join(all...)
}

// Summary is one error whose message is a single cause — the first
// wrapping prefer, else the first cause, else the first abort — and how
// many more there are; errors.Is and errors.As see every error. nil if
// none.
func (f *Failures) Summary(prefer error) error {
	all := f.all()
	if len(all) == 0 {
		return nil
	}
	head := all[0]
	for _, e := range all {
		if errors.Is(e, prefer) && !errors.Is(e, ErrAborted) {
			head = e
			break
		}
	}
	if len(all) == 1 {
		return head
	}
	return &summary{all: all, head: head}
}

type summary struct {
	all  []error
	head error
}

func (e *summary) Error() string {
	return fmt.Sprintf("%v (and %d more lane(s) of the launch: the same cause, or stopped by it)", e.head, len(e.all)-1)
}

func (e *summary) Unwrap() []error { return e.all }
