package policy

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

const docPath = "../../../docs/policy-language.md"

// enumTable renders the integer values policies see for the enum-valued
// request fields, from ir's enums.
func enumTable() string {
	var b strings.Builder
	b.WriteString("| `request.coll` | `request.datatype` | `request.redop` | `request.packettype` |\n|---|---|---|---|\n")
	cols := [4][]string{}
	for c := ir.Collective(0); c < ir.NumCollectives; c++ {
		cols[0] = append(cols[0], fmt.Sprintf("%d %s", c, c))
	}
	for d := ir.DataType(0); d < ir.NumDataTypes; d++ {
		cols[1] = append(cols[1], fmt.Sprintf("%d %s", d, d))
	}
	for r := ir.RedOp(0); r < ir.NumRedOps; r++ {
		cols[2] = append(cols[2], fmt.Sprintf("%d %s", r, r))
	}
	for _, p := range []ir.PacketType{ir.LL16, ir.LL8} {
		cols[3] = append(cols[3], fmt.Sprintf("%d %s", p, p))
	}
	rows := 0
	for _, c := range cols {
		rows = max(rows, len(c))
	}
	for i := 0; i < rows; i++ {
		b.WriteString("|")
		for _, c := range cols {
			cell := ""
			if i < len(c) {
				cell = " " + c[i]
			}
			b.WriteString(cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestDocEnumTable keeps the enum table of docs/policy-language.md equal
// to ir's enums (-update rewrites it).
func TestDocEnumTable(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	const begin, end = "<!-- enums:begin (generated: go test ./compiler/frontends/policy -update) -->\n", "<!-- enums:end -->"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the enum table markers", docPath)
	}
	want := enumTable()
	if got := s[i+len(begin) : j]; got != want {
		if *update {
			os.WriteFile(docPath, []byte(s[:i+len(begin)]+want+s[j:]), 0o644)
			return
		}
		t.Fatalf("the enum table in %s is stale (go test -update):\n%s", docPath, want)
	}
}

// TestDocListing keeps the disassembly shown in the doc true.
func TestDocListing(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	p, ds := Compile("msgsize <= 65536 && slow_rank != 2", testAttrs, Options{Want: WantBool})
	if p == nil {
		t.Fatal(ds)
	}
	if !strings.Contains(string(doc), p.Disassemble()) {
		t.Fatalf("the listing in %s differs from:\n%s", docPath, p.Disassemble())
	}
}
