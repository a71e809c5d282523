package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

// Tags of the epoch agreement's messages (user tags of the bootstrap, like
// watchTag; their low bytes differ from the executor's exchange kinds 1-3
// and from watchTag's). Each pair of ranks carries one message per round
// each way, in order, so two fixed tags serve every round: rounds are
// matched by their order, as the selector starts them.
const (
	agreeUpTag   = 1<<62 | 0x4155 // "AU": a rank's vector, to rank 0
	agreeDownTag = 1<<62 | 0x4144 // "AD": the minimum (or why not), from rank 0
)

// Reply kinds (the first word of a reply).
const (
	replyMin      = 0 // then the minimum
	replyMissing  = 1 // then lost (0 or 1) and the ranks that did not contribute
	replyMismatch = 2 // then a rank and the length of its vector
)

// epochAgreement is the communicator's selector.Agreement, and Pipelined:
// the selector's epoch agreement runs through it without the rank waiting
// for its peers when their contributions cannot change its snapshot
// (docs/selection.md, "Pipelined epochs").
//
// AllReduceMin (the selector's load and rank-local steps, which need their
// result at once) is the bootstrap's. A pipelined round goes through rank
// 0: StartMin sends the rank's vector to rank 0 (one message, no wait);
// rank 0's reducer goroutine takes the element-wise minimum as soon as
// every vector of the round has arrived and sends it to every rank; and
// FinishMin receives it, which at the next epoch has usually long
// happened. The reducer waits for a round's vectors at most the bootstrap
// timeout from the moment rank 0 starts the round (as the bootstrap's own
// allreduce does); ranks that miss it are named in every rank's error.
type epochAgreement struct {
	boot    *bootstrap.Bootstrap
	rank, n int
	timeout time.Duration

	buf     []byte  // StartMin's message (rank > 0)
	res     []int64 // FinishMin's result
	started bool    // a round is in flight
	// Rank 0: its own vector of each round goes to the reducer, whose
	// outcome comes back on out.
	own chan []int64
	out chan reduced
}

// reduced is the reducer's outcome of one round on rank 0.
type reduced struct {
	min []int64
	err error
}

var _ selector.Pipelined = (*epochAgreement)(nil)

func newEpochAgreement(boot *bootstrap.Bootstrap, rank, n int, timeout time.Duration) *epochAgreement {
	a := &epochAgreement{boot: boot, rank: rank, n: n, timeout: timeout}
	if rank == 0 {
		a.own = make(chan []int64, 1)
		a.out = make(chan reduced, 1)
	}
	return a
}

// AllReduceMin implements selector.Agreement with the bootstrap's
// allreduce.
func (a *epochAgreement) AllReduceMin(ctx context.Context, v []int64) ([]int64, error) {
	return a.boot.AllReduceMin(ctx, v)
}

// StartMin implements selector.Pipelined.
func (a *epochAgreement) StartMin(v []int64) error {
	if a.started {
		return errors.New("comm: epoch agreement started before the previous round finished")
	}
	switch {
	case a.n == 1:
		a.res = append(a.res[:0], v...)
	case a.rank == 0:
		a.own <- slices.Clone(v) // the reducer reads it while the rank goes on
	default:
		a.buf = encodeWords(a.buf[:0], v)
		if err := a.boot.Send(0, agreeUpTag, a.buf); err != nil {
			return err
		}
	}
	a.started = true
	return nil
}

// FinishMin implements selector.Pipelined.
func (a *epochAgreement) FinishMin(ctx context.Context) ([]int64, error) {
	if !a.started {
		return nil, errors.New("comm: no epoch agreement round to finish")
	}
	a.started = false
	switch {
	case a.n == 1:
		return a.res, nil
	case a.rank == 0:
		select {
		case r := <-a.out:
			return r.min, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// Rank 0 gives up on missing ranks after the timeout and then says
	// which: wait for its word up to twice as long (as the bootstrap's
	// allgather does).
	deadline := time.Now().Add(2 * a.timeout)
	m, err := a.boot.Recv(ctx, 0, agreeDownTag)
	for err != nil {
		var be *bootstrap.Error
		if !errors.As(err, &be) || be.Lost || time.Now().After(deadline) {
			return nil, err
		}
		m, err = a.boot.Recv(ctx, 0, agreeDownTag)
	}
	if len(m) < 8 || len(m)%8 != 0 {
		return nil, fmt.Errorf("comm: malformed epoch agreement reply of %d bytes", len(m))
	}
	a.res = decodeWords(a.res[:0], m)
	switch a.res[0] {
	case replyMin:
		return a.res[1:], nil
	case replyMissing:
		if len(a.res) < 3 {
			break
		}
		var missing []int
		for _, p := range a.res[2:] {
			missing = append(missing, int(p))
		}
		return nil, &bootstrap.Error{Rank: a.rank, Op: "epoch agreement", Missing: missing, Lost: a.res[1] != 0,
			Err: errors.New("reported by rank 0")}
	case replyMismatch:
		if len(a.res) == 3 {
			return nil, fmt.Errorf("comm: epoch agreement: rank %d contributed %d values (the ranks are out of step)", a.res[1], a.res[2])
		}
	}
	return nil, fmt.Errorf("comm: malformed epoch agreement reply (kind %d, %d words)", a.res[0], len(a.res))
}

// reduce is rank 0's reducer: for each round, its own vector (from
// StartMin), then every other rank's, then the minimum to everyone. It
// returns when ctx ends, the bootstrap closes, or a round fails (the ranks
// are then out of step, and the communicator fails).
func (a *epochAgreement) reduce(ctx context.Context) {
	for {
		var v []int64
		select {
		case v = <-a.own:
		case <-ctx.Done():
			return
		}
		r := a.round(ctx, v)
		a.out <- r
		if r.err != nil {
			return
		}
	}
}

// round completes one round on rank 0, whose vector is v.
func (a *epochAgreement) round(ctx context.Context, v []int64) reduced {
	rctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var (
		missing []int
		lost    bool
		cause   error
		bad     = -1 // a rank whose vector has the wrong length
		badLen  int
	)
	for p := 1; p < a.n; p++ {
		m, err := a.boot.Recv(rctx, p, agreeUpTag)
		if err != nil {
			var be *bootstrap.Error
			switch {
			case errors.As(err, &be):
				lost = lost || be.Lost
			case ctx.Err() == nil && rctx.Err() != nil: // the round's time is up
			default: // closed or cancelled
				return reduced{err: err}
			}
			missing, cause = append(missing, p), err
			continue
		}
		if len(m) != 8*len(v) {
			if bad < 0 {
				bad, badLen = p, len(m)/8
			}
			continue
		}
		for i := range v {
			v[i] = min(v[i], int64(binary.LittleEndian.Uint64(m[8*i:])))
		}
	}
	var reply []int64
	var out reduced
	switch {
	case len(missing) > 0:
		reply = []int64{replyMissing, 0}
		if lost {
			reply[1] = 1
		}
		for _, p := range missing {
			reply = append(reply, int64(p))
		}
		out.err = &bootstrap.Error{Rank: 0, Op: "epoch agreement", Missing: missing, Lost: lost, Err: cause}
	case bad >= 0:
		reply = []int64{replyMismatch, int64(bad), int64(badLen)}
		out.err = fmt.Errorf("comm: epoch agreement: rank %d contributed %d values, rank 0 %d (the ranks are out of step)", bad, badLen, len(v))
	default:
		reply = append([]int64{replyMin}, v...)
		out.min = v
	}
	msg := encodeWords(nil, reply)
	for p := 1; p < a.n; p++ {
		if !slices.Contains(missing, p) {
			a.boot.Send(p, agreeDownTag, msg) // best effort: a failure shows up on that rank
		}
	}
	return out
}

func encodeWords(b []byte, v []int64) []byte {
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func decodeWords(v []int64, b []byte) []int64 {
	for i := 0; i+8 <= len(b); i += 8 {
		v = append(v, int64(binary.LittleEndian.Uint64(b[i:])))
	}
	return v
}

// startReducer runs rank 0's reducer until ctx ends (a no-op elsewhere).
func (a *epochAgreement) startReducer(ctx context.Context, wg *sync.WaitGroup) {
	if a.rank != 0 || a.n == 1 {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.reduce(ctx)
	}()
}
