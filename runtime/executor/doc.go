package executor

import (
	"fmt"
	"strings"
)

// TableMarkdown renders Table as the Markdown table of docs/executor.md
// (a test keeps the document current).
func TableMarkdown() string {
	var b strings.Builder
	b.WriteString("| # | state | event | next | what happens |\n|---|---|---|---|---|\n")
	for i, t := range Table {
		fmt.Fprintf(&b, "| %d | %v | %v | %v | %s |\n", i+1, t.From, t.Event, t.To, t.Action)
	}
	return b.String()
}
