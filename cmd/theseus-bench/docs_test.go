package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDocsBundleCount: docs/theseus-bench.md states how many bundles the
// default context (which this command embeds) holds; every mention must
// match examples/contexts/default/schedules (it said 111 when there were 105).
func TestDocsBundleCount(t *testing.T) {
	files, err := os.ReadDir("../../examples/contexts/default/schedules")
	if err != nil {
		t.Skipf("no default context: %v", err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "theseus-bench.md"))
	if err != nil {
		t.Fatal(err)
	}
	ms := regexp.MustCompile(`(\d+) bundles|runs all (\d+) over`).FindAllSubmatch(doc, -1)
	if len(ms) < 2 {
		t.Fatalf("docs/theseus-bench.md: %d mentions of the bundle count, want 2", len(ms))
	}
	for _, m := range ms {
		n, _ := strconv.Atoi(string(m[1]) + string(m[2]))
		if n != len(files) {
			t.Errorf("docs/theseus-bench.md: %q, but the default context has %d bundles", m[0], len(files))
		}
	}
}
