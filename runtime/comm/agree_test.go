package comm

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
)

// agreementGroup joins n bootstrap endpoints on loopback and gives each an
// epochAgreement with its goroutine running.
func agreementGroup(t *testing.T, n int, timeout time.Duration) ([]*epochAgreement, []*bootstrap.Bootstrap) {
	t.Helper()
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	type joined struct {
		b   *bootstrap.Bootstrap
		err error
	}
	js := ranks.Each(n, func(r int) joined {
		b, err := bootstrap.Init(context.Background(), id, r, n, bootstrap.Options{Timeout: timeout})
		return joined{b, err}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	as := make([]*epochAgreement, n)
	boots := make([]*bootstrap.Bootstrap, n)
	for r, j := range js {
		if j.err != nil {
			t.Fatal(j.err)
		}
		boots[r] = j.b
		as[r] = newEpochAgreement(j.b, r, n, timeout)
		as[r].start(ctx, &wg)
	}
	t.Cleanup(func() {
		cancel()
		for _, b := range boots {
			b.Close()
		}
		wg.Wait()
	})
	return as, boots
}

// Pipelined rounds give every rank the element-wise minimum, round after
// round, while the ranks run the bootstrap's own allreduce in between and
// start each round at their own pace (no rank waits at StartMin).
func TestEpochAgreementRounds(t *testing.T) {
	const n, rounds, width = 4, 50, 7
	as, _ := agreementGroup(t, n, 10*time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	in := make([][][]int64, rounds) // [round][rank]
	want := make([][]int64, rounds)
	for k := range rounds {
		want[k] = make([]int64, width)
		for r := range n {
			v := make([]int64, width)
			for i := range v {
				v[i] = rng.Int64N(1000) - 500
				if r == 0 || v[i] < want[k][i] {
					want[k][i] = v[i]
				}
			}
			in[k] = append(in[k], v)
		}
	}
	errs := ranks.Each(n, func(r int) error {
		a := as[r]
		ctx := context.Background()
		for k := range rounds {
			if err := a.StartMin(in[k][r]); err != nil {
				return err
			}
			in[k][r][0] = 1 << 40 // StartMin has taken the vector: it may be reused
			if k%5 == 0 {
				got, err := a.AllReduceMin(ctx, []int64{int64(r), int64(k)})
				if err != nil {
					return err
				}
				if d := cmp.Diff([]int64{0, int64(k)}, got); d != "" {
					return errors.New("AllReduceMin (-want +got):\n" + d)
				}
			}
			got, err := a.FinishMin(ctx, 10*time.Second)
			if err != nil {
				return err
			}
			if d := cmp.Diff(want[k], got); d != "" {
				return errors.New("round result (-want +got):\n" + d)
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// A rank that never contributes is named, as a bootstrap error, on every
// rank that waits for the round, within the timeout.
func TestEpochAgreementMissingRank(t *testing.T) {
	const n = 3
	as, _ := agreementGroup(t, n, 300*time.Millisecond)
	errs := ranks.Each(n, func(r int) error {
		if r == 2 {
			return nil // never starts the round
		}
		if err := as[r].StartMin([]int64{1, 2}); err != nil {
			return err
		}
		_, err := as[r].FinishMin(context.Background(), 300*time.Millisecond)
		return err
	})
	for r := range 2 {
		var be *bootstrap.Error
		if !errors.As(errs[r], &be) || !cmp.Equal(be.Missing, []int{2}) {
			t.Errorf("rank %d: %v, want a bootstrap error naming rank 2", r, errs[r])
		}
	}
}

// Vectors of different lengths (ranks out of step) fail the round on
// every rank.
func TestEpochAgreementLengthMismatch(t *testing.T) {
	const n = 2
	as, _ := agreementGroup(t, n, 5*time.Second)
	errs := ranks.Each(n, func(r int) error {
		if err := as[r].StartMin(make([]int64, 3+r)); err != nil {
			return err
		}
		_, err := as[r].FinishMin(context.Background(), 300*time.Millisecond)
		return err
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "out of step") {
			t.Errorf("rank %d: %v, want an out-of-step error", r, err)
		}
	}
}

// FinishMin without StartMin, and StartMin twice, are errors, not hangs.
func TestEpochAgreementMisuse(t *testing.T) {
	a := newEpochAgreement(nil, 0, 1, time.Second)
	if _, err := a.FinishMin(context.Background(), time.Second); err == nil {
		t.Fatal("FinishMin without a round: no error")
	}
	if err := a.StartMin([]int64{4, 5}); err != nil {
		t.Fatal(err)
	}
	if err := a.StartMin([]int64{4, 5}); err == nil {
		t.Fatal("a second StartMin before FinishMin: no error")
	}
	got, err := a.FinishMin(context.Background(), time.Second)
	if err != nil || !cmp.Equal(got, []int64{4, 5}) {
		t.Fatalf("one rank: %v %v", got, err)
	}
}
