package selector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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

// Pipelined is an Agreement that can also run a MIN-allreduce in two
// halves, so that a rank need not wait for its peers when it does not need
// the result yet. The selector uses it for the epoch agreement
// (docs/selection.md, "Pipelined epochs"): a rank that can prove, from its
// own vector and the previous result, that the result cannot change its
// snapshot goes on at once and collects the result at the next epoch.
//
// Pipelined rounds are matched across ranks by the order of StartMin
// calls, independently of AllReduceMin's rounds, which may run while a
// pipelined round is in flight. A rank finishes every round it starts
// (FinishMin) before it starts the next.
type Pipelined interface {
	Agreement
	// StartMin contributes v to the next pipelined round and returns without
	// waiting for the other ranks; v may be reused once it returns. It
	// fails only when the contribution cannot be sent (a lost peer, a
	// closed communicator).
	StartMin(v []int64) error
	// FinishMin returns the element-wise minimum over all ranks of the
	// vectors of the round this rank started last, waiting for the other
	// ranks' contributions at most about timeout (a result already in
	// should cost no timer). It must return an error, never block
	// forever, when ctx ends, the time is up or a peer is gone, and an
	// error when the ranks' vectors differ in length. The result may alias
	// a buffer of the Agreement that the next StartMin reuses.
	FinishMin(ctx context.Context, timeout time.Duration) ([]int64, error)
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
// Each also implements Pipelined, whose rounds form a sequence of their
// own.
func NewInProcessGroup(n int) []Agreement {
	g, pg := &group{n: n}, &group{n: n}
	out := make([]Agreement, n)
	for i := range out {
		out[i] = &member{g: g, pg: pg}
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

type member struct {
	g  *group // AllReduceMin's rounds
	pg *group // the pipelined rounds
	// pend is the pipelined round this member started last.
	pend *round
}

func (m *member) AllReduceMin(ctx context.Context, v []int64) ([]int64, error) {
	r, err := m.g.arrive(v)
	if err != nil {
		return nil, err
	}
	return m.g.wait(ctx, r)
}

// StartMin implements Pipelined.
func (m *member) StartMin(v []int64) error {
	if m.pend != nil {
		return errors.New("selector: pipelined round started before the previous one finished")
	}
	r, err := m.pg.arrive(v)
	if err != nil {
		return err
	}
	m.pend = r
	return nil
}

// FinishMin implements Pipelined.
func (m *member) FinishMin(ctx context.Context, timeout time.Duration) ([]int64, error) {
	r := m.pend
	if r == nil {
		return nil, errors.New("selector: no pipelined round to finish")
	}
	m.pend = nil
	select {
	case <-r.done: // in already: no timer
		return m.pg.wait(ctx, r)
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return m.pg.wait(ctx, r)
}

// arrive adds v to the group's open round (opening one if needed) and
// returns it.
func (g *group) arrive(v []int64) (*round, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken {
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
	return r, nil
}

// wait waits for every rank to arrive at round r and returns its result.
func (g *group) wait(ctx context.Context, r *round) ([]int64, error) {
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
