package main

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/client"
)

// The hot swap through the context daemon: when a theseus-contextd answers
// on socket (--contextd) and materialises the very directory the
// benchmark reads (context NAME in its contexts root), the demonstration
// publishes with the daemon, as `theseus-context --context NAME set
// slow_rank 2` does, valid at once, and every rank reads that directory
// instead of a private copy: the daemon appends the value there (and on
// every other node of its cluster), and the ranks switch at the same
// request as with the copy. The two values stay in the context's log; the
// second restores the first's predecessor.

// daemonFor returns the daemon's client and the context name when the
// daemon on socket serves dir ("none", or no daemon: ok false).
func daemonFor(socket, dir string) (c *client.Client, name string, ok bool) {
	if socket == "none" {
		return nil, "", false
	}
	c, err := client.New(client.Options{Socket: socket, Timeout: 10 * time.Second})
	if err != nil {
		return nil, "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return nil, "", false
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, "", false
	}
	for _, n := range st.Nodes {
		if n.Error != "" || filepath.Dir(abs) != filepath.Clean(n.Root) {
			continue
		}
		if name := filepath.Base(abs); slices.Contains(n.Contexts, name) {
			return c, name, true
		}
	}
	return nil, "", false
}

// daemonPublish publishes v as attr's value in context name.
func daemonPublish(c *client.Client, name, attr string) func(v int) error {
	return func(v int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := c.Value(ctx, name, api.ValueRequest{Name: attr, Value: strconv.Itoa(v), ValidAfter: "+0s",
			Comment: "theseus-bench hot swap"})
		return err
	}
}
