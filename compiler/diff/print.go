package diff

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// WriteText prints the delta for people: per resource class the counts of
// kept, added and removed resources and one line per added (+), removed (-)
// or rebased/changed (~) one, in identity order; then scratch, ops and the
// cost. The content is exactly that of WriteJSON. It returns w's error.
func (d *Delta) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	side := func(label string, s Side) {
		p("%s %s", label, s.Name)
		if s.ID != "" {
			p(" [%s]", s.ID)
		}
		p(" (%s, %d ranks, %s)\n", s.Collective, s.NRanks, s.Protocol)
	}
	side("from:", d.From)
	side("to:  ", d.To)
	end := func(e End) string {
		return fmt.Sprintf("rank %d -> %d %s #%d (peer #%d) init %d", e.Rank, e.Peer, e.Type, e.Ordinal, e.PeerOrdinal, e.Init)
	}
	sem := func(s Semaphore) string {
		return fmt.Sprintf("rank %d -> %d %s #%d (peer #%d)", s.Rank, s.Peer, s.Type, s.Ordinal, s.PeerOrdinal)
	}
	p("channel ends: %d kept, %d added, %d removed\n", d.ChannelEnds.Kept, len(d.ChannelEnds.Added), len(d.ChannelEnds.Removed))
	for _, e := range d.ChannelEnds.Added {
		p("  + %s\n", end(e))
	}
	for _, e := range d.ChannelEnds.Removed {
		p("  - %s\n", end(e))
	}
	s := &d.Semaphores
	p("semaphores: %d kept (%d rebased), %d added, %d removed\n", s.Kept, len(s.Rebased), len(s.Added), len(s.Removed))
	for _, x := range s.Added {
		p("  + %s\n", sem(x))
	}
	for _, x := range s.Removed {
		p("  - %s\n", sem(x))
	}
	for _, x := range s.Rebased {
		p("  ~ %s init %d -> %d\n", sem(x.Semaphore), x.FromInit, x.ToInit)
	}
	c := &d.Connections
	p("connections: %d kept, %d added, %d removed\n", c.Kept, len(c.Added), len(c.Removed))
	for _, x := range c.Added {
		p("  + rank %d -> %d %s\n", x.Rank, x.Peer, x.Type)
	}
	for _, x := range c.Removed {
		p("  - rank %d -> %d %s\n", x.Rank, x.Peer, x.Type)
	}
	g := &d.Registrations
	p("registrations: %d kept, %d added, %d removed\n", g.Kept, len(g.Added), len(g.Removed))
	for _, x := range g.Added {
		p("  + rank %d imports rank %d's %s\n", x.Rank, x.Peer, x.Buf)
	}
	for _, x := range g.Removed {
		p("  - rank %d imports rank %d's %s\n", x.Rank, x.Peer, x.Buf)
	}
	p("scratch chunks: %d ranks kept, %d changed\n", d.Scratch.Kept, len(d.Scratch.Changed))
	for _, x := range d.Scratch.Changed {
		p("  ~ rank %d: %s -> %s\n", x.Rank, count(x.From), count(x.To))
	}
	o := &d.Ops
	p("ops: %d -> %d threadblocks, %d -> %d ops, %d threadblocks unchanged\n", o.TBsFrom, o.TBsTo, o.OpsFrom, o.OpsTo, o.Unchanged)
	for _, x := range o.Ranks {
		p("  rank %d: %s -> %s ops\n", x.Rank, count(int64(x.From)), count(int64(x.To)))
	}
	for _, x := range o.TBs {
		switch x.Kind {
		case "added":
			p("  + rank %d tb %d: %d ops\n", x.Rank, x.TB, x.To)
		case "removed":
			p("  - rank %d tb %d: %d ops\n", x.Rank, x.TB, x.From)
		default:
			p("  ~ rank %d tb %d: %d -> %d ops\n", x.Rank, x.TB, x.From, x.To)
		}
	}
	k := d.Cost()
	p("cost: create %d channel ends, %d semaphores, %d connections, %d registrations; rebase %d semaphores; "+
		"%d cross-rank exchanges over %d rank pairs; scratch grows on %d ranks; %d resources released\n",
		k.ChannelEnds, k.Semaphores, k.Connections, k.Registrations, k.Rebased, k.Exchanges, k.RankPairs, k.ScratchGrows, k.Released)
	return bw.Flush()
}

func count(n int64) string {
	if n < 0 {
		return "absent"
	}
	return fmt.Sprint(n)
}

// MarshalJSON encodes the delta with its cost (Delta.Cost) under "cost".
func (d *Delta) MarshalJSON() ([]byte, error) {
	type plain Delta // no MarshalJSON: avoids recursion
	return json.Marshal(struct {
		*plain
		Cost Cost `json:"cost"`
	}{(*plain)(d), d.Cost()})
}

// WriteJSON writes the delta as indented JSON (two spaces) and a newline:
// the same content as WriteText. It returns w's error.
func (d *Delta) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
