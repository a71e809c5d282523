package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); when
// empty, the module version and VCS stamp of the build are used.
var version = ""

type versionCmd struct {
	cmd *cobra.Command
	s   cli.Streams
}

func newVersionCmd(s cli.Streams) *versionCmd {
	c := &versionCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "version",
		Short: "Print the version of theseusc and of the formats it reads and writes",
		Args:  cli.ExactArgs(0, "no arguments"),
		RunE: cli.RunE(func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(c.s.Out, "%s\nformats: schedule JSON v%d, bundle v%d, op table v%d\n",
				versionString(), schedjson.Version, bundle.Version, optable.Version)
			return cli.Internal(err)
		}),
	}
	return c
}

// versionString is "theseusc VERSION (go1.x, commit C[, modified])".
func versionString() string {
	v := version
	var extra []string
	extra = append(extra, runtime.Version())
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		rev, modified := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if modified {
				rev += ", modified"
			}
			extra = append(extra, "commit "+rev)
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return fmt.Sprintf("theseusc %s (%s)", v, strings.Join(extra, ", "))
}
