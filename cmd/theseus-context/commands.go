package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/publish"
	"github.com/theseus-ccl/theseus/examples/contexts"
)

func newSchedCmd(g *globals) *cobra.Command {
	var r api.SchedRequest
	var replaces int
	cmd := &cobra.Command{
		Use:   "sched FILE --coll C [--usability EXPR] [--preference EXPR]",
		Short: "Publish a schedule file and its policy; print its id",
		Long: `sched verifies FILE as the runtime loads it (Theseus schedule JSON, MSCCL XML,
textual IR or a .tsb bundle), type-checks and compiles the usability and
preference expressions against the context's attribute manifest, and publishes
the file (stored as schedules/<sha256><ext>) and its manifest entry, with the
compiled programs beside the expressions. It prints the schedule's id.

--gen ALGO publishes a generated-schedule entry instead of a file: a built-in
generator (theseusc gen --list) and its parameters (--protocol, --channels,
--avoid); the runtime builds its program for each communicator's shape, and
--nranks is optional (default: any).`,
		Example: `  theseus-context new sched ring.tsb --coll allreduce --preference 10
  theseus-context new sched avoid.json --coll allreduce --replaces 1 --usability 'slow_rank >= 0' --preference 12
  theseus-context new sched --gen ring --coll allreduce --channels 'clamp(64 / nranks, 1, 32)' --preference 5`,
	}
	f := cmd.Flags()
	f.StringVar(&r.Collective, "coll", "", "the schedule's collective (required): allreduce, allgather, ...")
	f.StringVar(&r.Usable, "usability", "", `usability expression, a bool (default "true")`)
	f.StringVar(&r.Preference, "preference", "", `preference expression, an int or float (default "0")`)
	f.IntVar(&replaces, "replaces", 0, "id of the earlier schedule this one replaces (delta migration source; default none)")
	f.StringVar(&r.ValidAfter, "valid-after", "", "when it takes effect: a time, +DURATION or always (default now + the propagation margin)")
	f.StringVar(&r.Name, "name", "", "the entry's name (default: FILE's base name)")
	f.StringVar(&r.Comment, "comment", "", "free text")
	f.IntVar(&r.NRanks, "nranks", 0, "communicator size (default: the file's)")
	f.IntVar(&r.NLocalRanks, "nlocalranks", 0, "ranks per node it needs (default: the file's)")
	f.Int64Var(&r.MinBytes, "min-bytes", 0, "smallest message size in bytes it serves (default: the file's)")
	f.Int64Var(&r.MaxBytes, "max-bytes", 0, "largest message size in bytes it serves (default: the file's)")
	f.StringVar(&r.Gen, "gen", "", "a built-in generator instead of FILE: a generated-schedule entry")
	f.StringVar(&r.Protocol, "protocol", "", "with --gen: simple (default) or ll")
	f.StringVar(&r.Channels, "channels", "", "with --gen: parallel lanes, an integer or an expression over nranks and nlocalranks")
	f.IntSliceVar(&r.Avoid, "avoid", nil, "with --gen: ranks to keep off relaying paths (comma-separated)")
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, args []string) error {
		if r.Collective == "" {
			return cli.Usagef("--coll is required")
		}
		if f.Changed("replaces") {
			if replaces < 0 {
				return cli.Usagef("--replaces %d: want the id of an earlier schedule (0 or more); leave the flag out for none", replaces)
			}
			r.Replaces = &replaces
		}
		switch {
		case r.Gen != "" && len(args) > 0:
			return cli.Usagef("--gen names a generator: give no FILE")
		case r.Gen == "" && (r.Protocol != "" || r.Channels != "" || len(r.Avoid) > 0):
			return cli.Usagef("--protocol, --channels and --avoid go with --gen")
		case r.Gen != "":
		case len(args) != 1:
			return cli.Usagef("want one FILE (or --gen ALGO), got %d argument(s)", len(args))
		default:
			data, err := readFile(args[0], publish.DefaultMaxScheduleBytes)
			if err != nil {
				return g.fail(err)
			}
			r.FileName, r.File = filepath.Base(args[0]), data
		}
		b, err := g.backend()
		if err != nil {
			return err
		}
		return g.published(b.Sched(ctx(), g.context, r))
	})
	return cmd
}

// readFile reads at most limit+1 bytes: a regular file over limit bytes is
// rejected here, with its size (as the daemon would reject it), and one
// that grows past it while read is sent cut, for the daemon to reject.
func readFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, cli.Usage(err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, cli.Usagef("%s is a directory", path)
	} else if err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, &api.Error{Reason: api.ReasonTooLarge, Message: fmt.Sprintf("%s is %d bytes, over the limit of %d for a schedule file", filepath.Base(path), st.Size(), limit)}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, cli.Usage(err)
	}
	return b, nil
}

func newAttrCmd(g *globals) *cobra.Command {
	var r api.AttrRequest
	cmd := &cobra.Command{
		Use:   "attr NAME --origin endo --path request.X | --origin exo --type T [--default V]",
		Short: "Declare an attribute policies may read",
		Example: `  theseus-context new attr msgsize --origin endo --path request.messagesize
  theseus-context new attr slow_rank --origin exo --type int --default -1`,
		Args: cli.ExactArgs(1, "one attribute NAME"),
	}
	f := cmd.Flags()
	f.StringVar(&r.Origin, "origin", "", "endo (a field of the request) or exo (published with set)")
	f.StringVar(&r.Type, "type", "", "exo: int, float, bool or vector (endo attributes are int)")
	f.StringVar(&r.Path, "path", "", "endo: the request field, request.messagesize, request.nranks, ...")
	f.StringVar(&r.Default, "default", "", "exo: the value until one is set (default the type's zero)")
	f.StringVar(&r.ValidAfter, "valid-after", "", "when it takes effect (default now + the propagation margin)")
	f.StringVar(&r.Description, "description", "", "free text")
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, args []string) error {
		r.Name = args[0]
		b, err := g.backend()
		if err != nil {
			return err
		}
		return g.published(b.Attr(ctx(), g.context, r))
	})
	return cmd
}

func setCmd(g *globals) *cobra.Command {
	var r api.ValueRequest
	cmd := &cobra.Command{
		Use:   "set [flags] NAME VALUE [flags]",
		Short: "Publish a value of an exogenous attribute",
		Long: `set appends VALUE to the value log of exogenous attribute NAME. VALUE is an
int (3), a float (2.5), a bool (true) or a vector ([1, 2.5] or 1,2.5), of
NAME's declared type.

VALUE is taken as it is written, even when it starts with '-' (set slow_rank
-1): flags go before NAME or after VALUE, not between them.`,
		Example: `  theseus-context set slow_rank 2
  theseus-context set slow_rank -1 --valid-after +30s`,
		Args: cli.MinArgs(2, "NAME and VALUE"),
	}
	cmd.Flags().StringVar(&r.ValidAfter, "valid-after", "", "when it takes effect (default now + the propagation margin)")
	cmd.Flags().StringVar(&r.Comment, "comment", "", "free text")
	// Flag parsing stops at NAME, so that a VALUE such as -1 or -0.5 is not
	// read as a shorthand flag; what follows VALUE is parsed as flags again.
	cmd.Flags().SetInterspersed(false)
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, args []string) error {
		rest := args[2:]
		if args[1] == "--" && len(args) >= 3 { // set NAME -- VALUE, as pflag's terminator would have it
			args, rest = []string{args[0], args[2]}, args[3:]
		}
		if len(rest) > 0 {
			if err := cmd.Flags().Parse(rest); err != nil {
				return cli.Usage(err)
			}
			if help, _ := cmd.Flags().GetBool("help"); help {
				return cmd.Help()
			}
			if extra := cmd.Flags().Args(); len(extra) > 0 {
				return cli.Usagef("want NAME and VALUE, then flags; got %q after VALUE", extra[0])
			}
		}
		r.Name, r.Value = args[0], args[1]
		b, err := g.backend()
		if err != nil {
			return err
		}
		return g.published(b.Value(ctx(), g.context, r))
	})
	return cmd
}

func initCmd(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "init [--from default|DIR]",
		Short: "Seed an empty context from the default context (or a directory)",
		Long: `init publishes every entry of a source context into the addressed one, which
must be empty: the attributes, the schedules with their files (each at the id
it has in the source), and the values, each with its own valid_after. The
source is the embedded default context, or a context directory.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&from, "from", "default", `"default" (the embedded default context) or a context directory`)
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, _ []string) error {
		var src fs.FS
		if from == "default" {
			src = contexts.Default()
		} else {
			if st, err := os.Stat(from); err != nil || !st.IsDir() {
				return cli.Usagef("--from %s: not a directory", from)
			}
			// Through an os.Root: a symbolic link that leads out of the
			// directory is refused, as a ".." path is.
			root, err := os.OpenRoot(from)
			if err != nil {
				return cli.Usage(fmt.Errorf("--from %s: %w", from, err))
			}
			defer root.Close()
			src = root.FS()
		}
		reqs, err := publish.Seed(src)
		if err != nil {
			return cli.Usage(fmt.Errorf("--from %s: %w", from, err))
		}
		// Every entry is validated before any is published: a seed with a
		// bad entry publishes nothing (the daemon validates each again).
		if err := publish.CheckSeed(&publish.Validator{Margin: g.margin}, reqs); err != nil {
			return g.fail(err)
		}
		g.creating = true
		b, err := g.backend()
		if err != nil {
			return err
		}
		c, err := b.Context(ctx(), g.context)
		if err != nil {
			return g.fail(err)
		}
		if len(c.Attributes) > 0 || len(c.Schedules) > 0 {
			return g.fail(&api.Error{Reason: api.ReasonNotEmpty, Message: fmt.Sprintf("%s has %d attribute and %d schedule entries: init seeds an empty context",
				g.target(), len(c.Attributes), len(c.Schedules))})
		}
		counts := map[string]int{}
		for _, r := range reqs {
			switch {
			case r.Attr != nil:
				_, err = b.Attr(ctx(), g.context, *r.Attr)
				counts["attributes"]++
			case r.Sched != nil:
				_, err = b.Sched(ctx(), g.context, *r.Sched)
				counts["schedules"]++
			case r.Value != nil:
				_, err = b.Value(ctx(), g.context, *r.Value)
				counts["values"]++
			}
			if err != nil {
				return g.fail(err)
			}
		}
		if g.json {
			return writeJSON(g.s.Out, counts)
		}
		fmt.Fprintf(g.s.Out, "%s seeded from %s: %d attributes, %d schedules, %d values\n", g.target(), from,
			counts["attributes"], counts["schedules"], counts["values"])
		return nil
	})
	return cmd
}

func listCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List the context's attributes and schedules", Args: cobra.NoArgs}
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, _ []string) error {
		b, err := g.backend()
		if err != nil {
			return err
		}
		c, err := b.Context(ctx(), g.context)
		if err != nil {
			return g.fail(err)
		}
		if g.json {
			return writeJSON(g.s.Out, c)
		}
		w := tabwriter.NewWriter(g.s.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "ATTR\tNAME\tTYPE\tORIGIN\tPATH/DEFAULT\tVALUE\tVALID AFTER\n")
		for _, a := range c.Attributes {
			if a.Invalid != "" {
				fmt.Fprintf(w, "%d\t(invalid: %s)\n", a.ID, a.Invalid)
				continue
			}
			pd, val := a.Path, a.Value
			if a.Origin == "exo" {
				pd = a.Default
				val += fmt.Sprintf(" (%d logged)", a.Values)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Name, a.Type, a.Origin, pd, strings.TrimSpace(val), a.ValidAfter)
		}
		fmt.Fprintf(w, "\nSCHED\tNAME\tCOLLECTIVE\tNRANKS\tREPLACES\tPRECOMPILED\tVALID AFTER\n")
		for _, s := range c.Schedules {
			if s.Invalid != "" {
				fmt.Fprintf(w, "%d\t(invalid: %s)\n", s.ID, s.Invalid)
				continue
			}
			rep := "-"
			if s.Replaces >= 0 {
				rep = strconv.Itoa(s.Replaces)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%v\t%s\n", s.ID, orNone(s.Name), s.Collective, nranksText(s.NRanks), rep, s.Precompiled, s.ValidAfter)
		}
		return w.Flush()
	})
	return cmd
}

func showCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "show ID|NAME", Short: "Show a schedule (by id or name) or an attribute (by name)", Args: cli.ExactArgs(1, "a schedule ID or a NAME")}
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, args []string) error {
		b, err := g.backend()
		if err != nil {
			return err
		}
		c, err := b.Context(ctx(), g.context)
		if err != nil {
			return g.fail(err)
		}
		var found []any
		if id, err := strconv.Atoi(args[0]); err == nil {
			if id < 0 || id >= len(c.Schedules) {
				return cli.Findingsf("context %s has no schedule %d (it has %d)", g.context, id, len(c.Schedules))
			}
			found = append(found, c.Schedules[id])
		} else {
			for _, a := range c.Attributes {
				if a.Name == args[0] {
					found = append(found, a)
				}
			}
			for _, s := range c.Schedules {
				if s.Name == args[0] {
					found = append(found, s)
				}
			}
		}
		if len(found) == 0 {
			return cli.Findingsf("context %s has no attribute or schedule named %q", g.context, args[0])
		}
		if g.json {
			if len(found) == 1 {
				return writeJSON(g.s.Out, found[0])
			}
			return writeJSON(g.s.Out, found)
		}
		for _, x := range found {
			switch v := x.(type) {
			case api.Schedule:
				from := "file " + v.File
				if v.Gen != "" {
					from = "generated by " + v.Gen
				}
				rep := "none"
				if v.Replaces >= 0 {
					rep = strconv.Itoa(v.Replaces)
				}
				fmt.Fprintf(g.s.Out, "schedule %d %s: %s, %s ranks, %s\n  usable: %s\n  preference: %s\n  precompiled: %v\n  replaces: %s\n  valid after: %s\n  line: %s\n",
					v.ID, orNone(v.Name), v.Collective, nranksText(v.NRanks), from, orNone(v.Usable), orNone(v.Preference), v.Precompiled, rep, orNone(v.ValidAfter), v.Line)
			case api.Attribute:
				fmt.Fprintf(g.s.Out, "attribute %d %s: %s %s", v.ID, v.Name, v.Origin, v.Type)
				if v.Origin == "endo" {
					fmt.Fprintf(g.s.Out, " from %s\n", v.Path)
				} else {
					fmt.Fprintf(g.s.Out, ", default %s, %d value(s) logged, last %s\n", v.Default, v.Values, orNone(v.Value))
				}
				fmt.Fprintf(g.s.Out, "  valid after: %s\n  line: %s\n", orNone(v.ValidAfter), v.Line)
			}
		}
		return nil
	})
	return cmd
}

// nranksText is an entry's nranks as list and show print it: "any" for 0.
func nranksText(n int) string {
	if n == 0 {
		return "any"
	}
	return strconv.Itoa(n)
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func statusCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "status", Short: "Show every node's applied log sequence and lag", Args: cobra.NoArgs,
		Long: `status lists every node of the daemon's cluster: those that answer, with the
log sequence each has applied, its lag behind the log and its error if any,
and those that do not (down, or unreachable from the answering node), with
what each said last. It exits 1 when a node is down or reports an error.`}
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, _ []string) error {
		b, err := g.backend()
		if err != nil {
			return err
		}
		st, err := b.Status(ctx())
		if err != nil {
			return g.fail(err)
		}
		down, failing := 0, 0
		for _, n := range st.Nodes {
			switch {
			case n.Down:
				down++
			case n.Error != "":
				failing++
			}
		}
		down += st.Unnamed
		if g.json {
			writeJSON(g.s.Out, st)
		} else {
			if st.Last == 0 && slices.ContainsFunc(st.Nodes, func(n api.Node) bool { return n.Applied > 0 }) {
				fmt.Fprintf(g.s.Out, "log: last entry unknown (the log has no leader now: no quorum, or an election)\n")
			} else {
				fmt.Fprintf(g.s.Out, "log: last entry %d\n", st.Last)
			}
			w := tabwriter.NewWriter(g.s.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "NODE\tSTATE\tAPPLIED\tLAG\tCONTEXTS\tERROR\n")
			for _, n := range st.Nodes {
				state := "up"
				if n.Down {
					state = "down"
				}
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", n.Node, state, n.Applied, n.Lag, orNone(strings.Join(n.Contexts, ",")), orNone(n.Error))
			}
			if st.Unnamed > 0 {
				fmt.Fprintf(w, "(%d more)\tdown\t-\t-\t-\tknown to the cluster by id only: not heard from since it restarted\n", st.Unnamed)
			}
			if err := w.Flush(); err != nil {
				return err
			}
		}
		switch {
		case down > 0:
			return cli.Findingsf("%d of %d nodes down or unreachable", down, len(st.Nodes)+st.Unnamed)
		case failing > 0:
			return cli.Findingsf("%d of %d nodes report an error", failing, len(st.Nodes))
		}
		return nil
	})
	return cmd
}
