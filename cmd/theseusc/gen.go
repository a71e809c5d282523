package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/ir"
)

type genCmd struct {
	cmd         *cobra.Command
	s           cli.Streams
	list        bool
	listOut     *cli.OutputFlags
	coll        string
	nranks      int
	nlocalranks int
	protocol    string
	channels    int
	root        int
	avoid       []int
	order       []int
	name        string
	out         string
	verify      bool
}

func newGenCmd(s cli.Streams) *genCmd {
	c := &genCmd{s: s}
	var algos strings.Builder
	for _, a := range gen.Algorithms() {
		var cs []string
		for _, k := range a.Collectives {
			cs = append(cs, k.String())
		}
		fmt.Fprintf(&algos, "  %-10s %s (%s)\n", a.Name, a.Summary, strings.Join(cs, ", "))
	}
	c.cmd = &cobra.Command{
		Use:   "gen ALGO --coll C --nranks N [flags]",
		Short: "Generate a standard algorithm as Theseus schedule JSON",
		Long: `gen writes the schedule of a standard algorithm (compiler/gen,
docs/generators.md) for any number of ranks as canonical Theseus schedule
JSON, to OUT or standard output. "gen --list" lists the algorithms:

` + algos.String() + `
Errors in the options (an unknown algorithm, a collective it does not serve,
nranks out of range, nlocalranks not dividing nranks, channels outside
1..32, an avoided rank that would relay or that is the root of a rooted
collective, --order for an algorithm that ignores it) are usage errors
(exit 2).`,
		Example: `  theseusc gen ring --coll allreduce --nranks 8 -o ring8.json
  theseusc gen hier --coll allreduce --nranks 16 --nlocalranks 8 --protocol ll
  theseusc gen tree --coll broadcast --nranks 6 --root 2 --avoid 3
  theseusc gen --list`,
		Args: func(cmd *cobra.Command, args []string) error {
			if c.list {
				if len(args) != 0 {
					return cli.Usagef("--list takes no ALGO")
				}
				return nil
			}
			return cli.ExactArgs(1, "one ALGO (see gen --list)")(cmd, args)
		},
	}
	f := c.cmd.Flags()
	f.BoolVar(&c.list, "list", false, "list the algorithms")
	c.listOut = cli.AddOutputFlags(c.cmd, cli.AlgorithmPrinters)
	f.StringVar(&c.coll, "coll", "", "collective (default: the algorithm's only collective, if it has one)")
	f.IntVar(&c.nranks, "nranks", 0, "number of ranks, 1..65536 (required)")
	f.IntVar(&c.nlocalranks, "nlocalranks", 0, "ranks per node (hierarchical algorithms; must divide nranks)")
	f.StringVar(&c.protocol, "protocol", "simple", "protocol: simple or ll")
	f.IntVar(&c.channels, "channels", 1, fmt.Sprintf("parallel lanes (threadblocks and channels), 1..%d", gen.MaxChannels))
	f.IntVar(&c.root, "root", 0, "root rank (broadcast, reduce, gather, scatter)")
	f.IntSliceVar(&c.avoid, "avoid", nil, "ranks that must not relay data (comma-separated)")
	f.IntSliceVar(&c.order, "order", nil, "rank order for ring, chain and tree (a permutation of 0..nranks-1)")
	f.StringVar(&c.name, "name", "", "program name (default: <algo>_<coll>_n<nranks>_k<channels>_<protocol>...)")
	f.StringVarP(&c.out, "output", "o", "", `file to write ("-" or absent: standard output)`)
	f.BoolVar(&c.verify, "verify", false, "verify the generated program, and check that its JSON parses back to it, before writing it (exit 1 on errors)")
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

// genOutputLimit is the largest JSON gen writes: what the readers read
// (cli.MaxInputBytes); tests lower it.
var genOutputLimit = cli.MaxInputBytes

func (c *genCmd) run(cmd *cobra.Command, args []string) error {
	if c.list {
		pr, err := cli.Resolve(c.listOut, cli.AlgorithmPrinters)
		if err != nil {
			return err
		}
		return cli.Internal(pr(c.s.Out, gen.Algorithms()))
	}
	algo := args[0]
	var info *gen.Algorithm
	for _, a := range gen.Algorithms() {
		if strings.EqualFold(a.Name, algo) || contains(a.Aliases, algo) {
			info = &a
			break
		}
	}
	if info == nil {
		return cli.Usagef("unknown algorithm %q (see theseusc gen --list)", algo)
	}
	opts := gen.Options{NRanks: c.nranks, NLocalRanks: c.nlocalranks, Channels: c.channels,
		Root: c.root, Avoid: c.avoid, Order: c.order, Name: c.name}
	switch {
	case c.coll != "":
		k, err := ir.ParseCollective(c.coll)
		if err != nil {
			return cli.Usagef("--coll: %v", err)
		}
		opts.Collective = k
	case len(info.Collectives) == 1:
		opts.Collective = info.Collectives[0]
	default:
		return cli.Usagef("--coll is required: %s serves %s", info.Name, collList(info.Collectives))
	}
	if !cmd.Flags().Changed("nranks") {
		return cli.Usagef("--nranks is required")
	}
	if c.channels < 1 || c.channels > gen.MaxChannels {
		return cli.Usagef("--channels must be in 1..%d, got %d", gen.MaxChannels, c.channels)
	}
	if len(c.order) > 0 && !info.UsesOrder {
		var users []string
		for _, a := range gen.Algorithms() {
			if a.UsesOrder {
				users = append(users, a.Name)
			}
		}
		return cli.Usagef("--order: %s ignores the rank order (it is used by %s)", info.Name, strings.Join(users, ", "))
	}
	if opts.Collective.Rooted() {
		for _, r := range c.avoid {
			if r == c.root {
				return cli.Usagef("--avoid %d: rank %d is the root of this %s, which never relays (it only sends or only receives); avoid other ranks", r, r, opts.Collective)
			}
		}
	}
	proto, err := ir.ParseProtocol(c.protocol)
	if err != nil {
		return cli.Usagef("--protocol: %v", err)
	}
	opts.Protocol = proto
	p, err := gen.Generate(algo, opts)
	switch {
	case errors.Is(err, gen.ErrUnknownAlgorithm), errors.Is(err, gen.ErrUnsupported),
		errors.Is(err, gen.ErrOptions), errors.Is(err, gen.ErrAvoid):
		return cli.Usage(err)
	case err != nil:
		return cli.Internal(err)
	}
	// The size first, before verifying: lint, compile, sim and the runtime
	// read at most MaxInputBytes of a schedule file, and formatting stops
	// as soon as the JSON is over it (a 2048-rank ring's is 608 MB).
	out, err := schedjson.FormatMax(p, genOutputLimit)
	switch {
	case errors.Is(err, schedjson.ErrTooLarge):
		return cli.Usagef("the program's JSON is more than the %d bytes (%d MiB) theseusc and the runtime read of a schedule file (compiler/load.MaxInputBytes): %s; generate fewer ranks or channels, or name the generator in a selection context instead (docs/selection-context.md §5.5), which builds the program in memory",
			genOutputLimit, genOutputLimit>>20, strings.TrimPrefix(err.Error(), schedjson.ErrTooLarge.Error()+": "))
	case err != nil:
		return cli.Internal(err)
	}
	if c.verify {
		ds := verify.Verify(p, verify.Options{})
		cli.PrintDiags(c.s.Err, ds)
		if cli.CountErrors(ds) > 0 {
			return cli.Findingsf("the generated program does not verify: %s", summary(ds))
		}
		if err := roundTrip(p, out); err != nil {
			return err
		}
	}
	return writeOutput(c.out, out, c.s.Out)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func collList(cs []ir.Collective) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.String())
	}
	return strings.Join(s, ", ")
}
