package contextd

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/theseus-ccl/theseus/contextd/api"
)

// logLast is the log's last sequence from its leader, cached for 200 ms
// (0 when the log is unreachable).
func (d *Daemon) logLast(ctx context.Context) uint64 {
	d.mu.Lock()
	if time.Since(d.last.at) < 200*time.Millisecond {
		s := d.last.seq
		d.mu.Unlock()
		return s
	}
	d.mu.Unlock()
	st, _, err := d.log()
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	d.mu.Lock()
	d.last.seq, d.last.at = info.State.LastSeq, time.Now()
	d.mu.Unlock()
	return info.State.LastSeq
}

// Node is this node's state, with the log's last sequence asked of the
// log's leader (up to a second when the leader is being elected).
func (d *Daemon) Node(ctx context.Context) api.Node {
	d.logLast(ctx)
	return d.node()
}

// node is this node's state now, with the log's last sequence as this node
// last learnt it (never below what it applied): it does not wait on the
// log, so that a status request is answered at once even when the log has
// no leader.
func (d *Daemon) node() api.Node {
	n := api.Node{Node: d.cfg.Name, Root: d.cfg.ContextsDir, Replicas: d.cfg.Replicas, Contexts: d.Contexts()}
	if d.cfg.ClusterListen != "" {
		n.Cluster = d.cfg.ClusterName
	}
	d.mu.Lock()
	n.Applied, n.Error, n.Last = d.m.applied, d.lastErr, max(d.last.seq, d.m.applied)
	d.mu.Unlock()
	n.Lag = n.Last - n.Applied
	return n
}

func (d *Daemon) answerStatus(msg *nats.Msg) {
	b, _ := json.Marshal(d.node())
	msg.Respond(b)
}

// clusterNodes returns the names of the nodes of this node's cluster as
// JetStream's meta group knows them, this node included (alone: this node
// only), and how many more peers it knows without a name yet (after a
// restart of the whole cluster, until they are heard from).
func (d *Daemon) clusterNodes() (names []string, unnamed int) {
	names = []string{d.cfg.Name}
	if d.cfg.ClusterListen == "" {
		return names, 0
	}
	jsi, err := d.ns.Jsz(&server.JSzOptions{})
	if err != nil || jsi.Meta == nil {
		return names, 0
	}
	add := func(n string) {
		switch {
		case n == "":
		case strings.HasPrefix(n, "Server name unknown"):
			unnamed++
		case !slices.Contains(names, n):
			names = append(names, n)
		}
	}
	add(jsi.Meta.Leader)
	for _, p := range jsi.Meta.Replicas {
		add(p.Name)
	}
	return names, unnamed
}

// gather asks every daemon of the cluster for its state (a NATS request
// every daemon answers, over the routes) and returns the answers that came
// within wait, or before want nodes had answered.
func (d *Daemon) gather(ctx context.Context, wait time.Duration, want int) []api.Node {
	inbox := nats.NewInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err == nil {
		defer sub.Unsubscribe()
		err = d.nc.PublishRequest(statusSubject, inbox, nil)
	}
	if err != nil {
		return []api.Node{d.node()}
	}
	var out []api.Node
	deadline := time.Now().Add(wait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for len(out) < want {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var n api.Node
		if json.Unmarshal(msg.Data, &n) == nil && !slices.ContainsFunc(out, func(x api.Node) bool { return x.Node == n.Node }) {
			out = append(out, n)
		}
	}
	return out
}

// reachable counts the daemons that answer within half a second, this one
// included, of the cluster's known nodes.
func (d *Daemon) reachable(ctx context.Context) (up, known int) {
	names, unnamed := d.clusterNodes()
	known = max(len(names)+unnamed, d.cfg.Replicas, len(d.cfg.Routes))
	return len(d.gather(ctx, 500*time.Millisecond, known)), known
}

// Status asks every node of the cluster for its state (gathered for up to
// a second, or until every node known has answered) and lists the nodes
// that did not answer as down, with what each last said to this node. The
// nodes known are those of JetStream's meta group (every node of the
// cluster, up or not), those the routes name and those seen before.
func (d *Daemon) Status(ctx context.Context) api.Status {
	st := api.Status{Last: d.logLast(ctx)}
	names, unnamed := d.clusterNodes()
	want := max(len(names)+unnamed, len(d.cfg.Routes), 1)
	st.Nodes = d.gather(ctx, time.Second, want)
	for i := range st.Nodes {
		// Each node's lag behind the log as this node knows it now.
		n := &st.Nodes[i]
		n.Last = max(n.Last, st.Last)
		n.Lag = n.Last - n.Applied
	}
	now := time.Now()
	d.mu.Lock()
	for _, n := range st.Nodes {
		d.seen[n.Node] = seenNode{n, now}
		if !slices.Contains(names, n.Node) {
			names = append(names, n.Node)
		}
	}
	for name := range d.seen {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if slices.ContainsFunc(st.Nodes, func(x api.Node) bool { return x.Node == name }) {
			continue
		}
		n := api.Node{Node: name, Down: true, Contexts: []string{}, Error: "not answering: down, or unreachable from " + d.cfg.Name}
		if s, ok := d.seen[name]; ok {
			n = s.node
			n.Down, n.LastSeen = true, s.at.UTC().Format(time.RFC3339)
			n.Lag = 0
			if st.Last > n.Applied {
				n.Lag = st.Last - n.Applied
			}
			n.Error = fmt.Sprintf("not answering: down, or unreachable from %s (last answered %s ago, applied %d then)",
				d.cfg.Name, now.Sub(s.at).Round(time.Second), s.node.Applied)
		}
		st.Nodes = append(st.Nodes, n)
	}
	d.mu.Unlock()
	if unnamed > 0 {
		st.Unnamed = unnamed
	}
	slices.SortFunc(st.Nodes, func(a, b api.Node) int { return strings.Compare(a.Node, b.Node) })
	return st
}

// seenNode is a node's last answer to this node's status requests.
type seenNode struct {
	node api.Node
	at   time.Time
}
