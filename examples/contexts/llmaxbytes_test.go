package contexts

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

// reviewLog keeps the selector's warnings.
type reviewLog struct {
	mu    sync.Mutex
	warns []string
}

func (l *reviewLog) Warnf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.warns = append(l.warns, fmt.Sprintf(format, args...))
}
func (l *reviewLog) Infof(string, ...any) {}

// TestLLMaxBytesValues: what an operator may append to
// ll_max_bytes.jsonl (docs/selection-context.md §5.4, §6): extreme integers
// are used as given; a line that is not a well-formed integer value is
// warned about at its file:line:col and ignored, the attribute keeping the
// value of the last well-formed line; a torn last line (no newline yet) is
// not read. Nothing panics.
func TestLLMaxBytesValues(t *testing.T) {
	const small, mid = 1024, 512 << 10 // bytes
	for _, c := range []struct {
		name, log string
		smallWant string // 1 KiB allreduce, 2 ranks
		midWant   string // 512 KiB
		warnsWant []string
	}{
		{"negative: LL never", "{\"value\":-1}\n", "allreduce_ring", "allreduce_ring", nil},
		{"most negative", fmt.Sprintf("{\"value\":%d}\n", math.MinInt64), "allreduce_ring", "allreduce_ring", nil},
		{"largest int64: LL up to its static cap", fmt.Sprintf("{\"value\":%d}\n", math.MaxInt64), "allreduce_oneshot_ll", "allreduce_oneshot_ll_wide", nil},
		{"bad lines keep the last good value",
			"{\"value\":1048576}\n{\"value\":\"0\"}\n{\"value\":0.5}\n{\"value\":1e3}\n{\"value\":9223372036854775808}\nnot json\n{\"value\":0,\"x\":1}\n",
			"allreduce_oneshot_ll", "allreduce_oneshot_ll_wide",
			[]string{"ll_max_bytes.jsonl:2:10:", "ll_max_bytes.jsonl:3:10:", "ll_max_bytes.jsonl:4:10:", "ll_max_bytes.jsonl:5:10:",
				"ll_max_bytes.jsonl:6:", "ll_max_bytes.jsonl:7:12:"}},
		{"torn last line is not read yet", "{\"value\":1048576}\n{\"value\":0", "allreduce_oneshot_ll", "allreduce_oneshot_ll_wide", nil},
		{"0 then a bad line: still 0", "{\"value\":0}\n{\"value\":null}\n", "allreduce_ring", "allreduce_ring",
			[]string{"ll_max_bytes.jsonl:2:10:"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := Materialize(dir); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, LLMaxBytesLog), []byte(c.log), 0o644); err != nil {
				t.Fatal(err)
			}
			log := &reviewLog{}
			s, err := selector.New(selector.Options{Dir: dir, Loader: schedfile.Loader{}, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := chosenName(t, s, request(ir.AllReduce, 2, 2, small, 0)); got != c.smallWant {
				t.Errorf("%d B: chose %s, want %s", small, got, c.smallWant)
			}
			if got := chosenName(t, s, request(ir.AllReduce, 2, 2, mid, 0)); got != c.midWant {
				t.Errorf("%d B: chose %s, want %s", mid, got, c.midWant)
			}
			log.mu.Lock()
			defer log.mu.Unlock()
			all := strings.Join(log.warns, "\n")
			for _, w := range c.warnsWant {
				if !strings.Contains(all, w) {
					t.Errorf("no warning at %s; warnings:\n%s", w, all)
				}
			}
			if len(c.warnsWant) == 0 && len(log.warns) > 0 {
				t.Errorf("unexpected warnings:\n%s", all)
			}
		})
	}
}
