package env

import (
	"flag"
	"math"
	"os"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite docs/env.md")

func fakeEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestPrefixPrecedence(t *testing.T) {
	defer SetLookupForTest(fakeEnv(map[string]string{
		"THESEUS_INITIAL_SCRATCH_SIZE": "1MB",
		"MSCCLPP_INITIAL_SCRATCH_SIZE": "2MB",
		"THESEUS_HCA_DEVICES":          "mlx5_0,mlx5_1",
	}))()
	n, err := InitScratch.Size()
	if err != nil || n != 2<<20 {
		t.Fatalf("InitScratch = %d, %v; want 2 MiB from MSCCLPP_", n, err)
	}
	if got := InitScratch.Source(); got != "MSCCLPP_INITIAL_SCRATCH_SIZE" {
		t.Fatalf("source %q", got)
	}
	if got := HCADevices.String(); got != "mlx5_0,mlx5_1" {
		t.Fatalf("HCADevices = %q; THESEUS_ prefix must be recognised too", got)
	}
}

func TestDefaults(t *testing.T) {
	defer SetLookupForTest(fakeEnv(nil))()
	if n, _ := InitScratch.Size(); n != 16<<20 {
		t.Fatalf("default scratch %d", n)
	}
	if n, _ := CheckPeriod.Int(); n != 1000 {
		t.Fatalf("check period %d", n)
	}
	if n, _ := VectorMaxLen.Int(); n != 1024 {
		t.Fatalf("vector max %d", n)
	}
	if s, _ := LLProtocol.Enum(); s != "LL16" {
		t.Fatalf("LL protocol %q", s)
	}
	if b, _ := AltScratch.Bool(); b {
		t.Fatal("alternate scratch on by default")
	}
}

func TestParseSize(t *testing.T) {
	cases := map[string]int64{"0": 0, "4096": 4096, "16MB": 16 << 20, "1KB": 1024, "2GB": 2 << 30, "1.5MB": 3 << 19, "64k": 64 << 10, "2GiB": 2 << 30, " 8 MB ": 8 << 20, "10B": 10}
	for in, want := range cases {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "MB", "12XB", "1e30GB", "NaN", "nanMB", "-inf", "inf", "-0.5KB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestBadValuesNameTheVariable(t *testing.T) {
	defer SetLookupForTest(fakeEnv(map[string]string{"THESEUS_LL_PROTOCOL": "LL128", "THESEUS_CONTEXT_CHECK_PERIOD": "often"}))()
	if _, err := LLProtocol.Enum(); err == nil || err.Error() != `THESEUS_LL_PROTOCOL="LL128": want one of LL8, LL16` {
		t.Fatalf("err = %v", err)
	}
	if _, err := CheckPeriod.Int(); err == nil || err.Error() != `THESEUS_CONTEXT_CHECK_PERIOD="often": not an integer` {
		t.Fatalf("err = %v", err)
	}
}

func TestDocIsCurrent(t *testing.T) {
	const path = "../../docs/env.md"
	want := Doc()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("docs/env.md is stale; run go test ./runtime/env -update")
	}
}

// TestTimeoutDuration checks that THESEUS_TIMEOUT values convert without
// overflow: huge values mean MaxTimeout, and ten times that still fits.
func TestTimeoutDuration(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want time.Duration
	}{{0, 0}, {-5, 0}, {1, time.Millisecond}, {60000, time.Minute},
		{int64(MaxTimeout / time.Millisecond), MaxTimeout}, {int64(MaxTimeout/time.Millisecond) + 1, MaxTimeout},
		{9223372036854, MaxTimeout}, {math.MaxInt64, MaxTimeout}} {
		if got := TimeoutDuration(c.ms); got != c.want {
			t.Errorf("TimeoutDuration(%d) = %v, want %v", c.ms, got, c.want)
		}
	}
	if 10*MaxTimeout <= 0 || time.Now().Add(10*MaxTimeout).Before(time.Now()) {
		t.Errorf("ten times MaxTimeout (%v) overflows", MaxTimeout)
	}
}

// TestEmptyEnumIsUnset: an enum variable set but empty (THESEUS_BACKEND=)
// takes its default, as unset (fresh user f25: it named an empty backend).
func TestEmptyEnumIsUnset(t *testing.T) {
	defer SetLookupForTest(fakeEnv(map[string]string{"THESEUS_BACKEND": " ", "THESEUS_LL_PROTOCOL": ""}))()
	if v, err := Backend.Enum(); err != nil || v != "cuda" {
		t.Errorf("THESEUS_BACKEND=' ': %q, %v; want the default cuda", v, err)
	}
	if v, err := LLProtocol.Enum(); err != nil || v != "LL16" {
		t.Errorf("THESEUS_LL_PROTOCOL='': %q, %v; want the default LL16", v, err)
	}
}
