package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestDocsEntryCount: docs/theseus-bench.md and docs/selection-context.md
// state how many generated entries the default context (which this
// command embeds) has; every mention must match its schedule manifest (a
// count of bundles went stale before: it said 111 when there were 105).
func TestDocsEntryCount(t *testing.T) {
	data, err := os.ReadFile("../../examples/contexts/default/schedule_manifest.jsonl")
	if err != nil {
		t.Skipf("no default context: %v", err)
	}
	n := 0
	for sc := bufio.NewScanner(bytes.NewReader(data)); sc.Scan(); {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			n++
		}
	}
	for _, doc := range []string{"theseus-bench.md", "selection-context.md"} {
		text, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		ms := regexp.MustCompile(`(\d+) generated (?:schedule )?entries`).FindAllSubmatch(text, -1)
		if len(ms) == 0 {
			t.Errorf("docs/%s does not state the entry count", doc)
		}
		for _, m := range ms {
			if k, _ := strconv.Atoi(string(m[1])); k != n {
				t.Errorf("docs/%s: %q, but the default context has %d entries", doc, m[0], n)
			}
		}
	}
}
