package selector

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
)

// Explanation says why Select picks what it picks for one request: the
// agreed snapshot, the attribute values, and every schedule entry with
// whether it matched the request, whether it was usable and its
// preference. `theseusc select` prints it as text (String) or JSON (the
// struct tags).
type Explanation struct {
	Request          RequestInfo      `json:"request"`
	MessageBytes     int64            `json:"message_bytes"`
	Chosen           int              `json:"chosen"` // None (-1) when no schedule is selected
	File             string           `json:"file,omitempty"`
	Context          string           `json:"context"`
	AttributeEntries int              `json:"attribute_entries"` // agreed prefix
	ScheduleEntries  int              `json:"schedule_entries"`  // agreed prefix
	Cut              time.Time        `json:"cut"`               // agreed valid_after cut
	Attributes       []AttributeValue `json:"attributes"`
	Candidates       []Candidate      `json:"candidates"`
}

// RequestInfo is a Request with its enums spelled out.
type RequestInfo struct {
	Coll        string `json:"coll"`
	Count       int64  `json:"count"`
	DataType    string `json:"datatype"`
	RedOp       string `json:"redop"`
	PacketType  string `json:"packettype"`
	Root        int    `json:"root"`
	NRanks      int    `json:"nranks"`
	NLocalRanks int    `json:"nlocalranks"`
	InPlace     bool   `json:"inplace"`
}

// AttributeValue is one attribute entry and, when visible, its value.
type AttributeValue struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Origin  string `json:"origin"`
	Path    string `json:"path,omitempty"`
	Visible bool   `json:"visible"`
	Value   string `json:"value,omitempty"` // exo attributes only
	Reason  string `json:"reason,omitempty"`
}

// Candidate is one schedule entry's fate for the request.
type Candidate struct {
	ID         int     `json:"id"`
	Name       string  `json:"name,omitempty"`
	File       string  `json:"file,omitempty"`
	Collective string  `json:"collective,omitempty"`
	Replaces   int     `json:"replaces"`
	Selectable bool    `json:"selectable"` // in the snapshot, compiled, not excluded
	Matched    bool    `json:"matched"`
	Usable     bool    `json:"usable"`
	Preference *Number `json:"preference,omitempty"` // usable candidates only
	Chosen     bool    `json:"chosen"`
	Reason     string  `json:"reason,omitempty"`
}

// Number is a preference; JSON writes ±Inf as the strings "+Inf"/"-Inf".
type Number float64

// MarshalJSON implements json.Marshaler.
func (n Number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return json.Marshal(bc.FormatFloat(f))
	}
	return json.Marshal(f)
}

func (n Number) String() string { return fmt.Sprint(float64(n)) }

// fromKey inverts orderKey.
func fromKey(k int64) float64 {
	if k < 0 {
		k ^= math.MaxInt64
	}
	return math.Float64frombits(uint64(k))
}

// Explain selects for r exactly as Select would (without counting a request
// or touching the cache) and reports every entry. Like Select it is a
// collective call whenever it takes an agreement step: the first snapshot,
// the first load of the winner, or a rank-local candidate. Errors: those of
// Select.
func (s *Selector) Explain(ctx context.Context, r *Request) (*Explanation, error) {
	// The agreed prefix it reports is the last epoch's (a pipelined
	// epoch's result is collected first).
	if err := s.settle(ctx); err != nil {
		return nil, err
	}
	if s.snap == nil {
		if err := s.epoch(ctx); err != nil {
			return nil, err
		}
		s.untilEpoch = s.opt.CheckPeriod
	}
	msg, err := messageBytes(r)
	if err != nil {
		return nil, err
	}
	cands := s.snap.byColl[r.Coll]
	out := make([]verdict, len(cands))
	id, _, err := s.choose(ctx, r, out)
	if err != nil {
		return nil, err
	}
	e := &Explanation{
		Request: RequestInfo{Coll: r.Coll.String(), Count: r.Count, DataType: r.DataType.String(), RedOp: r.RedOp.String(),
			PacketType: r.PacketType.String(), Root: r.Root, NRanks: r.NRanks, NLocalRanks: r.NLocalRanks, InPlace: r.InPlace},
		MessageBytes: msg, Chosen: id, Context: s.opt.Dir,
		AttributeEntries: s.agreed.attrs, ScheduleEntries: s.agreed.scheds, Cut: s.cutTime(),
	}
	for i, a := range s.rd.attrs {
		av := AttributeValue{Name: a.decl.Name, Type: a.decl.Type.String(), Origin: a.decl.Origin.String(), Visible: s.attrVisible(i)}
		switch {
		case !a.ok:
			av.Reason = a.reason
		case a.decl.Origin == bc.Endo:
			av.Path = a.decl.Path.Path()
		case av.Visible && i < len(s.snap.visible) && s.snap.visible[i]:
			av.Value = a.valueString(s.snap, i)
		}
		if a.ok && !av.Visible {
			av.Reason = "not yet agreed or not yet valid"
		}
		e.Attributes = append(e.Attributes, av)
	}
	pos := map[*sched]int{}
	for i, c := range cands {
		pos[c] = i
	}
	var bestKey int64
	var bestID = None
	for i, c := range cands {
		if c.id == id {
			bestID, bestKey = c.id, out[i].key
		}
	}
	for _, c := range s.rd.scheds {
		cd := Candidate{ID: c.id, Name: c.entry.Name, File: c.entry.File, Replaces: c.entry.Replaces}
		if g := c.entry.Gen; g != nil {
			cd.File = g.String()
		}
		if c.ok {
			cd.Collective = c.entry.Collective.String()
		} else {
			cd.Replaces = -1
		}
		active, why := s.schedActive(c)
		cd.Selectable = active
		i, inColl := pos[c]
		switch {
		case !active:
			cd.Reason = why
		case !inColl:
			cd.Reason = c.mismatch(r, msg)
		case !out[i].matched:
			cd.Reason = c.mismatch(r, msg)
			if cd.Reason == "" {
				cd.Reason = c.reason // excluded while choosing
			}
		default:
			v := out[i]
			cd.Matched = true
			cd.Usable = v.usable
			switch {
			case v.fault != "":
				cd.Reason = "unusable: " + v.fault
			case !v.usable:
				cd.Reason = "usability expression is false"
			default:
				p := Number(fromKey(v.key))
				cd.Preference = &p
				switch {
				case c.id == id:
					cd.Chosen = true
				case v.key < bestKey:
					cd.Reason = fmt.Sprintf("outscored by schedule %d", bestID)
				case v.key == bestKey:
					cd.Reason = fmt.Sprintf("tie: the later schedule %d wins", bestID)
				default:
					cd.Reason = c.reason // excluded while choosing
				}
			}
		}
		e.Candidates = append(e.Candidates, cd)
	}
	if ref, ok := s.Schedule(id); ok {
		e.File = ref.File
	}
	return e, nil
}

func (a *attrEntry) valueString(sn *snapshot, i int) string {
	switch a.decl.Type {
	case bc.Int:
		return fmt.Sprint(sn.env.Attrs[i])
	case bc.Float:
		return bc.FormatFloat(bc.FromBits(sn.env.Attrs[i]))
	case bc.Bool:
		return fmt.Sprint(sn.env.Attrs[i] != 0)
	case bc.Vector:
		return bc.FormatVector(sn.env.Vecs[i])
	}
	return ""
}

// String renders the explanation as text: a header, the attributes, and
// one row per schedule entry.
func (e *Explanation) String() string {
	var b strings.Builder
	r := e.Request
	arr := "out-of-place"
	if r.InPlace {
		arr = "in-place"
	}
	fmt.Fprintf(&b, "request: %s count=%d %s %s %s root=%d nranks=%d nlocalranks=%d %s (%d bytes)\n",
		r.Coll, r.Count, r.DataType, r.RedOp, r.PacketType, r.Root, r.NRanks, r.NLocalRanks, arr, e.MessageBytes)
	fmt.Fprintf(&b, "context: %s (%d attribute and %d schedule entries agreed, cut %s)\n",
		e.Context, e.AttributeEntries, e.ScheduleEntries, e.Cut.Format(time.RFC3339))
	if e.Chosen == None {
		b.WriteString("chosen: none\n")
	} else {
		fmt.Fprintf(&b, "chosen: %d (%s)\n", e.Chosen, e.File)
	}
	if len(e.Attributes) > 0 {
		b.WriteString("attributes:\n")
		tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
		for _, a := range e.Attributes {
			val := a.Value
			if a.Path != "" {
				val = a.Path
			}
			if a.Reason != "" {
				val = a.Reason
			}
			fmt.Fprintf(tw, "  %s\t%s %s\t%s\n", a.Name, a.Origin, a.Type, val)
		}
		tw.Flush()
	}
	b.WriteString("schedules:\n")
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  id\tname\tfile\tmatched\tusable\tpreference\t\n")
	yn := map[bool]string{true: "yes", false: "no"}
	for _, c := range e.Candidates {
		pref := "-"
		if c.Preference != nil {
			pref = bc.FormatFloat(float64(*c.Preference))
		}
		mark := ""
		if c.Chosen {
			mark = "<- chosen"
		}
		name := c.Name
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s%s\n", c.ID, name, c.File, yn[c.Matched], yn[c.Usable], pref, mark, c.Reason)
	}
	tw.Flush()
	return b.String()
}
