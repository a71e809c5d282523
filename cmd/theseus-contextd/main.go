// Command theseus-contextd is the Theseus context daemon (docs/contextd.md):
// run one per node. Without flags it runs a single node, with its data in
// ~/.theseus/contextd, its API on ~/.theseus/contextd/api.sock, and
// context NAME materialised in ~/.theseus/contexts/NAME (context "default"
// is the runtime's default selection context). With --cluster-listen and
// --routes the nodes form a cluster and the log has three replicas.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/contextd"
)

func main() {
	s := cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
	os.Exit(int(cli.Execute(newRoot(s), os.Args[1:], s)))
}

func newRoot(s cli.Streams) *cobra.Command {
	var cfg contextd.Config
	var routes string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "theseus-contextd",
		Short: "The Theseus context daemon: replicates selection contexts to every node",
		Long: `theseus-contextd keeps this node's selection contexts identical to every other
node's. Publications (theseus-context new sched, new attr, set) go into a
replicated, ordered log (an embedded NATS JetStream server, syncing every
write); a materialiser appends each entry to this node's context directory in
log order, fsyncs, and records what it applied, so that a crash neither loses,
duplicates nor reorders an entry.

Alone (the default) the log lives on this node. In cluster mode
(--cluster-listen and --routes on every node) the log has three replicas and
survives the loss of one node.

The API listens on a unix socket, owner-only (mode 0600); --listen adds TCP,
with TLS (--tls-cert, --tls-key) and a bearer token (--token-file).
GET /metrics serves Prometheus metrics on both.`,
		Example: `  theseus-contextd
  theseus-contextd --name a --cluster-listen 10.0.0.1:7422 \
      --routes nats://10.0.0.1:7422,nats://10.0.0.2:7422,nats://10.0.0.3:7422`,
		Args:              cobra.NoArgs,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", "", "data directory: the log's store, the checkpoint, the socket (default ~/.theseus/contextd)")
	f.StringVar(&cfg.ContextsDir, "contexts", "", "where context NAME is materialised, as DIR/NAME (default ~/.theseus/contexts)")
	f.StringVar(&cfg.Socket, "socket", "", `API unix socket (default DATA/api.sock; "none": no socket)`)
	f.StringVar(&cfg.Listen, "listen", "", "also serve the API on this TCP address (needs --tls-cert, --tls-key, --token-file)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate (PEM) of the TCP API")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "TLS key (PEM) of the TCP API")
	f.StringVar(&cfg.TokenFile, "token-file", "", "file holding the TCP API's bearer token (at least 16 characters)")
	f.StringVar(&cfg.Name, "name", "", "this node's name in the cluster (default: the host name)")
	f.StringVar(&cfg.ClusterListen, "cluster-listen", "", "cluster mode: host:port the routes listen on")
	f.StringVar(&routes, "routes", "", "cluster mode: comma-separated route URLs of the nodes (nats://host:port)")
	f.StringVar(&cfg.ClusterName, "cluster-name", "theseus", "cluster mode: the cluster's name")
	f.StringVar(&cfg.ClusterToken, "cluster-token", "", "cluster mode: shared secret the routes authenticate with")
	f.IntVar(&cfg.Replicas, "replicas", 0, "replicas of the log (default 3 in cluster mode, 1 alone)")
	f.DurationVar(&cfg.Margin, "propagation-margin", 0, "default valid_after is now plus this, 0 or more (default 1s in cluster mode, 0 alone)")
	f.Int64Var(&cfg.MaxScheduleBytes, "max-schedule-bytes", 0, "largest schedule file accepted, in bytes (default 64 MiB)")
	f.BoolVarP(&quiet, "quiet", "q", false, "log nothing but errors")
	cmd.RunE = cli.RunE(func(cmd *cobra.Command, _ []string) error {
		if routes != "" {
			cfg.Routes = strings.Split(routes, ",")
		}
		if cfg.ClusterListen == "" && len(cfg.Routes) > 0 {
			return cli.Usagef("--routes needs --cluster-listen")
		}
		switch {
		case !f.Changed("propagation-margin"):
			cfg.Margin = -1 // the mode's default
		case cfg.Margin < 0:
			return cli.Usagef("--propagation-margin %v: want 0 or more", cfg.Margin)
		}
		if f.Changed("max-schedule-bytes") && cfg.MaxScheduleBytes <= 0 {
			return cli.Usagef("--max-schedule-bytes %d: want a size in bytes, 1 or more (leave it out for 64 MiB)", cfg.MaxScheduleBytes)
		}
		if f.Changed("replicas") && cfg.Replicas <= 0 {
			return cli.Usagef("--replicas %d: want 1 or more", cfg.Replicas)
		}
		cfg.Logf = func(format string, args ...any) {
			if !quiet {
				fmt.Fprintf(s.Err, "%s "+format+"\n", append([]any{time.Now().Format(time.RFC3339)}, args...)...)
			}
		}
		d, err := contextd.Start(cfg)
		if err != nil {
			return cli.Usage(err)
		}
		where := d.Socket()
		if a := d.TCPAddr(); a != "" {
			where += ", https://" + a
		}
		cfg.Logf("theseus-contextd %s: API on %s; contexts in %s", d.Name(), where, d.ContextsDir())
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			<-sig
			cancel()
		}()
		<-ctx.Done()
		cfg.Logf("theseus-contextd %s: stopping", d.Name())
		return d.Close()
	})
	return cmd
}
