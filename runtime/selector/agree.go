package selector

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Agreement is the one collective primitive the consistency protocol needs
// (ARCHITECTURE.md §5). The runtime plugs its bootstrap network in
// (runtime/bootstrap.Bootstrap has exactly this method); tests use
// NewInProcessGroup.
type Agreement interface {
	// AllReduceMin returns the element-wise minimum of v over all ranks of
	// the communicator. Every rank calls it the same number of times, in the
	// same order, with vectors of the same length. It must return an error,
	// never block forever, when ctx ends or a peer is gone. The result may
	// alias v.
	AllReduceMin(ctx context.Context, v []int64) ([]int64, error)
}

// Solo is the Agreement of a single rank (tools such as `theseusc select`):
// it returns v unchanged.
type Solo struct{}

// AllReduceMin implements Agreement.
func (Solo) AllReduceMin(_ context.Context, v []int64) ([]int64, error) { return v, nil }

// ErrGroupBroken is returned by an in-process group after one of its
// members failed a round (timeout or mismatched lengths): the ranks may be
// out of step, so every later round fails too.
var ErrGroupBroken = errors.New("selector: in-process agreement group is broken")

// NewInProcessGroup returns n Agreements whose ranks are goroutines of one
// process (tests, the host simulator). Rounds are matched by call order.
func NewInProcessGroup(n int) []Agreement {
	g := &group{n: n}
	out := make([]Agreement, n)
	for i := range out {
		out[i] = member{g}
	}
	return out
}

type group struct {
	mu     sync.Mutex
	n      int
	round  *round
	broken bool
}

type round struct {
	arrived int
	acc     []int64
	err     error
	done    chan struct{}
}

type member struct{ g *group }

func (m member) AllReduceMin(ctx context.Context, v []int64) ([]int64, error) {
	g := m.g
	g.mu.Lock()
	if g.broken {
		g.mu.Unlock()
		return nil, ErrGroupBroken
	}
	r := g.round
	if r == nil {
		r = &round{acc: append([]int64(nil), v...), done: make(chan struct{})}
		g.round = r
	} else if len(v) != len(r.acc) {
		if r.err == nil {
			r.err = fmt.Errorf("selector: agreement vectors of %d and %d elements", len(r.acc), len(v))
		}
	} else {
		for i, x := range v {
			r.acc[i] = min(r.acc[i], x)
		}
	}
	r.arrived++
	if r.arrived == g.n {
		g.round = nil
		g.broken = r.err != nil
		close(r.done)
	}
	g.mu.Unlock()
	select {
	case <-r.done:
		if r.err != nil {
			return nil, r.err
		}
		return append([]int64(nil), r.acc...), nil
	case <-ctx.Done():
		g.mu.Lock()
		g.broken = true
		g.mu.Unlock()
		return nil, fmt.Errorf("selector: agreement with %d ranks: %w", g.n, ctx.Err())
	}
}
