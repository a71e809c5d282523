package legalize

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus")

func fuzzSeeds() map[string]string {
	seeds := map[string]string{}
	for _, p := range []*ir.Program{
		irtest.RingAllReduce(2, ir.Simple), irtest.RingAllReduce(3, ir.LL),
		splitRing(2, ir.Simple), splitRing(3, ir.LL), multiChannelRing(2, 2, ir.Simple),
		irtest.AllGatherRing(3), irtest.PairsAllReducePrimitive(2),
	} {
		seeds[fmt.Sprintf("%s_%v", p.Name, p.Protocol)] = p.String()
	}
	return seeds
}

func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz/FuzzLegalize")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzLegalize")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range fuzzSeeds() {
		body := fmt.Sprintf("go test fuzz v1\nstring(%s)\n", strconv.Quote(src))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzLegalize feeds Legalize every program the textual IR parser accepts:
// it must never panic, must return either a program or error
// diagnostics, and when the input verifies the output must verify at the
// primitive level (deadlock, races, postcondition).
func FuzzLegalize(f *testing.F) {
	for _, src := range fuzzSeeds() {
		f.Add(src)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, ds := irtext.Parse("fuzz", []byte(src))
		if len(ds) > 0 || p == nil || p.NumOps() > 4096 {
			return
		}
		q, ds := Legalize(p)
		if (q == nil) == (len(ds) == 0) {
			t.Fatalf("Legalize returned program %v with diagnostics %v", q != nil, ds)
		}
		if q == nil {
			return
		}
		if q.Level() != ir.LevelPrimitive {
			t.Fatal("transfer ops left")
		}
		if len(errorsOf(verify.Verify(p, verify.Options{}))) > 0 {
			return
		}
		if errs := errorsOf(verify.Verify(q, verify.Options{Level: ir.LevelPrimitive})); len(errs) > 0 {
			t.Fatalf("input verifies, output does not: %v\ninput:\n%s", errs[0], src)
		}
	})
}
