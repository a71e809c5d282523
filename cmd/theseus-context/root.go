package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/client"
	"github.com/theseus-ccl/theseus/contextd/publish"
)

// backend is where commands publish: the daemon, or a directory.
type backend interface {
	Attr(ctx context.Context, name string, r api.AttrRequest) (*api.Published, error)
	Sched(ctx context.Context, name string, r api.SchedRequest) (*api.Published, error)
	Value(ctx context.Context, name string, r api.ValueRequest) (*api.Published, error)
	Context(ctx context.Context, name string) (*api.Context, error)
	Status(ctx context.Context) (*api.Status, error)
}

// local adapts publish.Local (one directory: the context name is unused).
type local struct{ l *publish.Local }

func (b local) Attr(_ context.Context, _ string, r api.AttrRequest) (*api.Published, error) {
	return b.l.Attr(r)
}
func (b local) Sched(_ context.Context, _ string, r api.SchedRequest) (*api.Published, error) {
	return b.l.Sched(r)
}
func (b local) Value(_ context.Context, _ string, r api.ValueRequest) (*api.Published, error) {
	return b.l.Value(r)
}
func (b local) Context(context.Context, string) (*api.Context, error) { return b.l.Context() }
func (b local) Status(context.Context) (*api.Status, error) {
	return nil, cli.Usagef("status reports the daemon's nodes: there is none with --local")
}

// globals are the root's persistent flags.
type globals struct {
	s       cli.Streams
	context string
	// contextSet: --context was given.
	contextSet bool
	local      string
	creating   bool // init: --local DIR may not exist yet
	margin     time.Duration
	socket     string
	addr       string
	tokenFile  string
	caFile     string
	json       bool
}

func newRoot(s cli.Streams) *cobra.Command {
	g := &globals{s: s}
	root := &cobra.Command{
		Use:   "theseus-context",
		Short: "Publish schedules, attributes and values to Theseus selection contexts",
		Long: `theseus-context publishes to a selection context through the context daemon
(theseus-contextd), which replicates every publication to every node in one
order, or, with --local DIR, straight into one context directory.

Every publication is validated first and rejected, with its reason, when it
would not work: a schedule must load and verify as the runtime loads it, its
policy expressions must type-check against the context's attributes (they are
published precompiled), a value must be of its attribute's type. Nothing is
written on any node for a rejected publication.

By default an entry becomes valid (valid_after) now plus the daemon's
propagation margin, so every node has it before it takes effect; --valid-after
sets a time (RFC 3339, local standard time, Unix seconds), +DURATION, or
"always".

Exit codes: 0 done, 1 rejected (status: a node down or failing), 2 usage
error (or no daemon), 3 internal failure, 4 retry: the daemon's log has no
quorum (nothing was published), or the daemon closed the connection before
answering (the publication may or may not be in the log).`,
		Example: `  theseus-context new attr slow_rank --origin exo --type int --default -1
  theseus-context new sched ring.json --coll allreduce --usability 'msgsize >= 65536' --preference '20 - (slow_rank >= 0 ? 15 : 0)'
  theseus-context set slow_rank 2
  theseus-context --local ./ctx init --from default`,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		fmt.Fprint(s.Err, cmd.UsageString())
		return cli.Usagef("a subcommand is required")
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.context, "context", api.DefaultContext, "the context to address (the daemon materialises NAME in its contexts directory)")
	pf.StringVar(&g.local, "local", "", "no daemon: publish straight into this context directory (one node)")
	pf.DurationVar(&g.margin, "propagation-margin", 0, "with --local: default valid_after is now plus this")
	pf.StringVar(&g.socket, "socket", "", "the daemon's unix socket (default ~/.theseus/contextd/api.sock)")
	pf.StringVar(&g.addr, "addr", "", "the daemon's TCP API instead, https://host:port (with --token-file)")
	pf.StringVar(&g.tokenFile, "token-file", "", "file holding the TCP API's bearer token")
	pf.StringVar(&g.caFile, "ca", "", "CA certificate (PEM) that signed the TCP API's certificate")
	pf.BoolVar(&g.json, "json", false, "print the result as JSON")
	newCmd := &cobra.Command{Use: "new", Short: "Publish a new schedule (new sched) or attribute (new attr)"}
	newCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		fmt.Fprint(s.Err, cmd.UsageString())
		return cli.Usagef("new what? sched or attr")
	}
	newCmd.AddCommand(newSchedCmd(g), newAttrCmd(g))
	root.AddCommand(newCmd, setCmd(g), initCmd(g), listCmd(g), showCmd(g), statusCmd(g))
	root.PersistentPreRun = func(cmd *cobra.Command, _ []string) {
		g.contextSet = cmd.Flags().Changed("context")
	}
	return root
}

// backend opens what the flags name.
func (g *globals) backend() (backend, error) {
	if g.local != "" {
		if g.addr != "" || g.socket != "" {
			return nil, cli.Usagef("--local conflicts with --socket and --addr")
		}
		if g.contextSet {
			return nil, cli.Usagef("--local DIR names the context directory itself: give no --context with it")
		}
		st, err := os.Stat(g.local)
		switch {
		case err == nil && !st.IsDir():
			return nil, cli.Usagef("--local %s: not a directory (a context directory holds attribute_manifest.jsonl and schedule_manifest.jsonl)", g.local)
		case err != nil && !g.creating:
			// A typo must not become a new, empty context.
			return nil, cli.Usagef("--local %s: no such context directory (start one with theseus-context --local %s init, or theseusc context init %s)", g.local, g.local, g.local)
		}
		return local{&publish.Local{Dir: g.local, V: publish.Validator{Margin: g.margin}}}, nil
	}
	if err := api.CheckContext(g.context); err != nil {
		return nil, cli.Usage(err)
	}
	o := client.Options{Socket: g.socket, Addr: g.addr, CAFile: g.caFile}
	if g.tokenFile != "" {
		b, err := os.ReadFile(g.tokenFile)
		if err != nil {
			return nil, cli.Usage(err)
		}
		o.Token = strings.TrimSpace(string(b))
	}
	c, err := client.New(o)
	if err != nil {
		return nil, cli.Usage(err)
	}
	return c, nil
}

// fail turns an error into the exit code: a rejection, or a file that
// ends in a torn line, is a finding (its reason and diagnostics printed);
// no daemon, or --local into a daemon's directory, a usage error.
func (g *globals) fail(err error) error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		if g.json {
			writeJSON(g.s.Out, ae)
		}
		return cli.Findingsf("rejected (%s): %s", ae.Reason, ae.Error())
	case errors.Is(err, client.ErrNoDaemon), errors.Is(err, publish.ErrDaemonRoot):
		// (--local into a daemon's contexts directory: publish through it)
		return cli.Usage(err)
	case errors.Is(err, publish.ErrTornLine):
		return cli.Findingsf("rejected: %v", err)
	case errors.Is(err, client.ErrNoAnswer), errors.Is(err, client.ErrUnavailable):
		// No quorum, or no answer: the same command may be run again
		// (after list/show for a publication that got no answer).
		return cli.Retry(err)
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		return err
	}
	return cli.Internal(err)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// published prints a publication's reply.
func (g *globals) published(p *api.Published, err error) error {
	if err != nil {
		return g.fail(err)
	}
	if g.json {
		return writeJSON(g.s.Out, p)
	}
	what := map[string]string{api.KindAttr: "attribute entry", api.KindSched: "schedule", api.KindValue: "value"}[p.Kind]
	when := "valid at once"
	if p.ValidAfter != "" {
		when = "valid after " + p.ValidAfter
	}
	where := fmt.Sprintf("log entry %d", p.Seq)
	if p.Seq == 0 {
		where = "written"
	}
	if !p.Applied {
		fmt.Fprintf(g.s.Err, "theseus-context: %s acknowledged but not yet applied on this node (see theseus-context status)\n", where)
		fmt.Fprintf(g.s.Out, "%s published to %s (%s, %s)\n", what, g.target(), where, when)
		return nil
	}
	if p.Kind == api.KindSched {
		file := ""
		if p.File != "" { // a generated entry has none
			file = ": " + p.File
		}
		fmt.Fprintf(g.s.Out, "schedule %d published to %s (%s, %s)%s\n", p.ID, g.target(), where, when, file)
		return nil
	}
	if p.Kind == api.KindValue {
		// "value 0 published" read as the value 0: name the line and what it says.
		fmt.Fprintf(g.s.Out, "value published to %s (%s, line %d of its log: %s, %s)\n", g.target(), where, p.ID, p.Line, when)
		return nil
	}
	fmt.Fprintf(g.s.Out, "%s %d published to %s (%s, %s)\n", what, p.ID, g.target(), where, when)
	return nil
}

func ctx() context.Context { return context.Background() }

// target names what the commands address: the --local directory, or the
// daemon's context.
func (g *globals) target() string {
	if g.local != "" {
		return g.local
	}
	return "context " + g.context
}
