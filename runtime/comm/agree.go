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
// 0, and no rank's own goroutine touches the network for it: StartMin
// hands a copy of the vector to the rank's agreement goroutine and returns.
// On rank 0 that goroutine is the reducer: it takes the element-wise
// minimum as soon as every rank's vector of the round has arrived and
// sends it to every rank. On the others it is a relay: it sends the vector
// to rank 0 and hands rank 0's reply over. FinishMin takes the outcome,
// which at the next epoch has usually long been there (then without a
// timer or a lock). The reducer waits for a round's vectors at most the
// bootstrap timeout from the moment rank 0 starts the round (as the
// bootstrap's own allreduce does); ranks that miss it are named in every
// rank's error.
//
// (A handoff to a goroutine costs the rank a wakeup; a send over the
// bootstrap's TCP connection from the rank itself costs several times
// more: a write deadline and a loopback write.)
type epochAgreement struct {
	boot    *bootstrap.Bootstrap
	rank, n int
	timeout time.Duration

	res     []int64 // FinishMin's result
	started bool    // a round is in flight
	// own carries this rank's vector of each round to its agreement
	// goroutine; out brings rank 0's outcome back (rank 0: the reducer's;
	// the others: the relay's copy of rank 0's reply).
	own chan []int64
	out chan reduced
}

// reduced is the outcome of one round: the minimum, or an error.
type reduced struct {
	min []int64
	err error
}

var _ selector.Pipelined = (*epochAgreement)(nil)

func newEpochAgreement(boot *bootstrap.Bootstrap, rank, n int, timeout time.Duration) *epochAgreement {
	a := &epochAgreement{boot: boot, rank: rank, n: n, timeout: timeout}
	if n > 1 {
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
	if a.n == 1 {
		a.res = append(a.res[:0], v...)
	} else {
		a.own <- slices.Clone(v) // the agreement goroutine reads it while the rank goes on
	}
	a.started = true
	return nil
}

// FinishMin implements selector.Pipelined. Rank 0's reducer gives up on
// missing ranks after the timeout and then says which, so every rank waits
// for its word up to twice as long (as the bootstrap's allgather does).
func (a *epochAgreement) FinishMin(ctx context.Context, timeout time.Duration) ([]int64, error) {
	if !a.started {
		return nil, errors.New("comm: no epoch agreement round to finish")
	}
	a.started = false
	if a.n == 1 {
		return a.res, nil
	}
	select {
	case r := <-a.out: // in already: no timer
		return r.min, r.err
	default:
	}
	t := time.NewTimer(2 * timeout)
	defer t.Stop()
	select {
	case r := <-a.out:
		return r.min, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		err := fmt.Errorf("comm: epoch agreement: no outcome within %v", 2*timeout)
		if a.rank == 0 {
			return nil, err // the reducer bounds its own waits: it is stuck
		}
		return nil, &bootstrap.Error{Rank: a.rank, Op: "epoch agreement", Missing: []int{0}, Err: err}
	}
}

// relay is the agreement goroutine of a rank other than 0: for each round,
// this rank's vector to rank 0, then rank 0's reply back to FinishMin. It
// returns when ctx ends, the bootstrap closes, or a round fails.
func (a *epochAgreement) relay(ctx context.Context) {
	var buf []byte
	for {
		var v []int64
		select {
		case v = <-a.own:
		case <-ctx.Done():
			return
		}
		buf = encodeWords(buf[:0], v)
		var r reduced
		if err := a.boot.Send(0, agreeUpTag, buf); err != nil {
			r.err = err
		} else {
			r = a.reply(ctx, v[:0])
		}
		if ctx.Err() != nil {
			return
		}
		a.out <- r
		if r.err != nil {
			return
		}
	}
}

// reply waits for rank 0's reply to this rank's last vector and decodes it
// into min (reusing its storage). A quiet rank 0 is not an error here
// (FinishMin bounds the rank's wait); a lost one is.
func (a *epochAgreement) reply(ctx context.Context, min []int64) reduced {
	for {
		m, err := a.boot.Recv(ctx, 0, agreeDownTag)
		if err != nil {
			var be *bootstrap.Error
			if errors.As(err, &be) && !be.Lost {
				continue // timed out waiting: rank 0 is not due yet
			}
			return reduced{err: err}
		}
		if len(m) < 8 || len(m)%8 != 0 {
			return reduced{err: fmt.Errorf("comm: malformed epoch agreement reply of %d bytes", len(m))}
		}
		w := decodeWords(min, m)
		switch w[0] {
		case replyMin:
			return reduced{min: w[1:]}
		case replyMissing:
			if len(w) < 3 {
				break
			}
			var missing []int
			for _, p := range w[2:] {
				missing = append(missing, int(p))
			}
			return reduced{err: &bootstrap.Error{Rank: a.rank, Op: "epoch agreement", Missing: missing, Lost: w[1] != 0,
				Err: errors.New("reported by rank 0")}}
		case replyMismatch:
			if len(w) == 3 {
				return reduced{err: fmt.Errorf("comm: epoch agreement: rank %d contributed %d values (the ranks are out of step)", w[1], w[2])}
			}
		}
		return reduced{err: fmt.Errorf("comm: malformed epoch agreement reply (kind %d, %d words)", w[0], len(w))}
	}
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

// start runs the rank's agreement goroutine (rank 0's reducer, another
// rank's relay) until ctx ends.
func (a *epochAgreement) start(ctx context.Context, wg *sync.WaitGroup) {
	if a.n == 1 {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if a.rank == 0 {
			a.reduce(ctx)
		} else {
			a.relay(ctx)
		}
	}()
}
