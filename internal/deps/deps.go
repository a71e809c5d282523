// Package deps pins the project's third-party modules while the packages
// that use them are being written. It is removed once each is imported for
// real.
package deps

import (
	_ "github.com/alecthomas/participle/v2"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sys/unix"
	_ "gonum.org/v1/gonum/graph/simple"
	_ "gonum.org/v1/gonum/graph/topo"
	_ "gonum.org/v1/gonum/stat"
	_ "gonum.org/v1/plot"
)
