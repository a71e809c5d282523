package contextd

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

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

// Node is this node's state.
func (d *Daemon) Node(ctx context.Context) api.Node {
	last := d.logLast(ctx)
	n := api.Node{Node: d.cfg.Name, Last: last, Root: d.cfg.ContextsDir, Replicas: d.cfg.Replicas, Contexts: d.Contexts()}
	if d.cfg.ClusterListen != "" {
		n.Cluster = d.cfg.ClusterName
	}
	d.mu.Lock()
	n.Applied, n.Error = d.m.applied, d.lastErr
	d.mu.Unlock()
	if last > n.Applied {
		n.Lag = last - n.Applied
	}
	return n
}

func (d *Daemon) answerStatus(msg *nats.Msg) {
	b, _ := json.Marshal(d.Node(context.Background()))
	msg.Respond(b)
}

// Status asks every node of the cluster for its state (a NATS request
// answered by every daemon, gathered for up to a second or until every
// node the routes name has answered).
func (d *Daemon) Status(ctx context.Context) api.Status {
	st := api.Status{Last: d.logLast(ctx)}
	// Stop waiting once as many nodes have answered as the routes name
	// (a list that names every node, this one included, as usual), else
	// after a second.
	want := max(len(d.cfg.Routes), 1)
	inbox := nats.NewInbox()
	sub, err := d.nc.SubscribeSync(inbox)
	if err == nil {
		defer sub.Unsubscribe()
		err = d.nc.PublishRequest(statusSubject, inbox, nil)
	}
	if err != nil {
		st.Nodes = []api.Node{d.Node(ctx)}
		return st
	}
	deadline := time.Now().Add(time.Second)
	for len(st.Nodes) < want {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var n api.Node
		if json.Unmarshal(msg.Data, &n) == nil {
			st.Nodes = append(st.Nodes, n)
		}
	}
	slices.SortFunc(st.Nodes, func(a, b api.Node) int { return strings.Compare(a.Node, b.Node) })
	return st
}
