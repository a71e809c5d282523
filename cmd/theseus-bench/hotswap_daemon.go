package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
// request as with the copy. The context is live: the second value puts back
// the value the demonstration found (daemonValue), so that an operator's
// setting survives it, and a context that already holds the first value
// (the demonstration would switch nothing) is not published to at all.
// Both values stay in the context's log.

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

// daemonValue returns attr's value in context name as the daemon has it:
// the last value logged, else the attribute's default (an int: the
// demonstration publishes exogenous ints only).
func daemonValue(c *client.Client, name, attr string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cx, err := c.Context(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("reading %s's value in context %s: %w", attr, name, err)
	}
	for _, a := range cx.Attributes {
		if a.Name != attr {
			continue
		}
		v := a.Value
		if a.Values == 0 {
			v = a.Default
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%s's value in context %s is %q, not an int", attr, name, v)
		}
		return n, nil
	}
	return 0, fmt.Errorf("context %s declares no attribute %s", name, attr)
}
