// Command genheader writes optable.CHeader to a file (go generate in
// codegen/optable).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/theseus-ccl/theseus/codegen/optable"
)

func main() {
	out := flag.String("o", "", "output file")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "genheader: -o is required")
		os.Exit(2)
	}
	if err := os.WriteFile(*out, optable.CHeader(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genheader:", err)
		os.Exit(1)
	}
}
