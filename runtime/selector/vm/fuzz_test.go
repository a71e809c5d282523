package vm_test

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/runtime/selector/vm"
)

// FuzzFoldMatchesVM compiles each expression twice, with and without
// constant folding, and runs both on the VM: the results must be identical
// bit for bit (or both fault the same way). This pins the folder and the VM
// to the same semantics, and checks that the VM never panics.
func FuzzFoldMatchesVM(f *testing.F) {
	for _, s := range []string{
		typical,
		"1 + 2 * 3 - -4 % 3",
		"(-9223372036854775807 - 1) / -1",
		"min(1, 2.5, 3) + max(-0.0, 0) + clamp(7, 9, 8)",
		"pow(2, 0.5) * log2(3) + floor(-2.5) + ceil(2.5)",
		"contains([1, 2, 3], 2) && len([]) == 0 ? sum([0.1, 0.2]) : minof([3, -1])",
		"1.0 / 0 > 1e308 || 0.0 / 0 == 0.0 / 0",
		"bw[slow_rank] % 7 + abs(-9223372036854775807 - 1)",
		"floor(load * 1e300)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		folded, _ := policy.Compile(src, attrs, policy.Options{})
		plain, _ := policy.Compile(src, attrs, policy.Options{NoFold: true})
		if folded == nil || plain == nil {
			return
		}
		a, err := vm.Load(folded, link)
		if err != nil {
			t.Fatal(err)
		}
		b, err := vm.Load(plain, link)
		if err != nil {
			t.Fatal(err)
		}
		var m vm.VM
		e := env()
		va, fa := m.Eval(a, e)
		vb, fb := m.Eval(b, e)
		if fa.Code != fb.Code || va != vb {
			t.Fatalf("%q: folded gives %v (fault %v), unfolded %v (fault %v)", src, va, fa.Code, vb, fb.Code)
		}
	})
}
