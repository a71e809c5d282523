package main

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/runtime/trace"
)

// traceCmd is `theseus-bench trace-plot`.
type traceCmd struct {
	calls int
	call  string
	width float64
}

func newTracePlotCmd(s cli.Streams) *cobra.Command {
	t := &traceCmd{}
	cmd := &cobra.Command{
		Use:   "trace-plot TRACE.json OUT.png",
		Short: "Draw a window of a Theseus trace (THESEUS_TRACE, --trace) as a PNG timeline",
		Long: `trace-plot draws the last --calls calls named --call in a trace that
THESEUS_TRACE or theseus-bench --trace wrote (docs/trace.md): one row per track
(each rank's calls on the host, with their phases beneath them, and each
threadblock's launches and ops, on the GPU or in the host interpreter), time
across in microseconds from the window's start. The window spans the chosen
calls of rank 0 (the first process), from the first one's start to the end of
the last span of any track that began before the last call ended.

For a closer look, open the trace itself in ui.perfetto.dev or chrome://tracing.

Calls are named "<collective> <bytes> B" (allreduce 1024 B); --call matches
the start of the name. Exit codes: 0 drawn; 2 usage error (a file that is not
a trace, no matching call in it); 3 the PNG could not be written.`,
		Example: `  theseus-bench --nranks 2 --coll allreduce -b 1K -e 1K --trace t.json --hotswap=false
  theseus-bench trace-plot t.json trace.png --calls 2 --call "allreduce 1024 B"`,
		Args: cli.ExactArgs(2, "TRACE.json OUT.png"),
		RunE: cli.RunE(func(cmd *cobra.Command, args []string) error { return t.run(s, args[0], args[1]) }),
	}
	f := cmd.Flags()
	f.IntVar(&t.calls, "calls", 2, "how many of the last calls to draw")
	f.StringVar(&t.call, "call", "allreduce", "draw the calls whose name starts with this (\"allreduce\", \"allreduce 1024 B\")")
	f.Float64Var(&t.width, "width", 1000, "the image's width in points")
	return cmd
}

func (t *traceCmd) run(s cli.Streams, in, out string) error {
	if t.calls < 1 {
		return cli.Usagef("--calls %d: want at least 1", t.calls)
	}
	if !strings.EqualFold(filepath.Ext(out), ".png") {
		return cli.Usagef("%s: want a .png file", out)
	}
	f, err := trace.Read(in)
	if err != nil {
		return cli.Usage(err)
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := t.draw(w, f); err != nil {
		w.Close()
		os.Remove(out)
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "%s: the last %d calls named %q\n", out, t.calls, t.call)
	return nil
}

// traceRow is one track of the drawing.
type traceRow struct {
	pid, tid int
	name     string
	spans    []trace.Event
}

// draw renders f's window (traceCmd's doc) to w.
func (t *traceCmd) draw(w io.Writer, f *trace.File) error {
	procs, threads := f.Names()
	var pids []int
	for p := range procs {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	if len(pids) == 0 {
		return cli.Usagef("the trace names no process")
	}
	var calls []trace.Event
	for _, e := range f.TraceEvents {
		if e.Ph == "X" && e.Cat == "call" && e.PID == pids[0] && strings.HasPrefix(e.Name, t.call) {
			calls = append(calls, e)
		}
	}
	if len(calls) == 0 {
		return cli.Usagef("no call named %q in the trace", t.call)
	}
	sort.Slice(calls, func(i, j int) bool { return calls[i].TS < calls[j].TS })
	calls = calls[max(0, len(calls)-t.calls):]
	lo, callEnd := calls[0].TS, calls[len(calls)-1].TS+calls[len(calls)-1].Dur
	hi := callEnd
	rows := map[[2]int]*traceRow{}
	for _, e := range f.TraceEvents {
		if e.Ph != "X" || e.TS+e.Dur < lo || e.TS > callEnd {
			continue
		}
		// Every rank's own calls may start a little before rank 0's.
		if e.Cat == "call" && e.TS < lo && e.PID != pids[0] {
			continue
		}
		k := [2]int{e.PID, e.TID}
		r := rows[k]
		if r == nil {
			name := threads[k]
			if name == "" {
				name = fmt.Sprintf("tid %d", e.TID)
			}
			r = &traceRow{pid: e.PID, tid: e.TID, name: procs[e.PID] + ": " + name}
			rows[k] = r
		}
		r.spans = append(r.spans, e)
		hi = max(hi, e.TS+e.Dur)
	}
	var order []*traceRow
	for _, r := range rows {
		order = append(order, r)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].pid != order[j].pid {
			return order[i].pid < order[j].pid
		}
		return order[i].tid < order[j].tid
	})
	p := plot.New()
	p.Title.Text = fmt.Sprintf("the last %d call(s) %s of rank 0 (%s)", len(calls), calls[len(calls)-1].Name, procs[pids[0]])
	p.X.Label.Text = "µs from the first call's start"
	p.X.Min, p.X.Max = 0, hi-lo
	p.Y.Min, p.Y.Max = -0.5, float64(len(order))-0.5
	var ticks []plot.Tick
	for i, r := range order {
		ticks = append(ticks, plot.Tick{Value: float64(len(order) - 1 - i), Label: r.name})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	p.Add(&spanPlotter{rows: order, lo: lo})
	height := vg.Points(float64(60 + 28*len(order)))
	img := vgimg.New(vg.Points(t.width), height)
	p.Draw(draw.New(img))
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// spanPlotter draws the rows' spans as bars: a span nested in another of
// its row is drawn thinner, on top of it, and labelled when its name fits.
type spanPlotter struct {
	rows []*traceRow
	lo   float64
}

func (sp *spanPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	names := map[string]int{}
	colorOf := func(e trace.Event) color.Color {
		switch e.Cat {
		case "call":
			return color.Gray{Y: 200}
		case "launch":
			return color.RGBA{R: 176, G: 196, B: 222, A: 255}
		}
		i, ok := names[e.Name]
		if !ok {
			i = len(names)
			names[e.Name] = i
		}
		return plotutil.Color(i)
	}
	font := plot.DefaultFont
	font.Size = vg.Points(7)
	sty := draw.TextStyle{Color: color.Black, Font: font, Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YCenter}
	for i, r := range sp.rows {
		y := float64(len(sp.rows) - 1 - i)
		spans := append([]trace.Event(nil), r.spans...)
		sort.Slice(spans, func(a, b int) bool {
			if spans[a].TS != spans[b].TS {
				return spans[a].TS < spans[b].TS
			}
			return spans[a].Dur > spans[b].Dur
		})
		var open []float64 // ends of the enclosing spans
		for _, e := range spans {
			for len(open) > 0 && open[len(open)-1] <= e.TS {
				open = open[:len(open)-1]
			}
			depth := len(open)
			open = append(open, e.TS+e.Dur)
			h := 0.4 / float64(1+depth)
			x0, x1 := trX(e.TS-sp.lo), trX(e.TS+e.Dur-sp.lo)
			if x1-x0 < vg.Points(0.6) {
				x1 = x0 + vg.Points(0.6)
			}
			y0, y1 := trY(y-h), trY(y+h)
			c.FillPolygon(colorOf(e), c.ClipPolygonXY([]vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}}))
			label := strings.TrimSuffix(e.Name, ".tsb")
			vx0, vx1 := max(x0, c.Min.X), min(x1, c.Max.X) // the part in the window
			if wd := sty.Width(label); wd < vx1-vx0 {
				c.FillText(sty, vg.Point{X: (vx0 + vx1) / 2, Y: (y0 + y1) / 2}, label)
			}
		}
	}
}

func newTraceMergeCmd(s cli.Streams) *cobra.Command {
	return &cobra.Command{
		Use:   "trace-merge OUT.json TRACE.json...",
		Short: "Lay the traces of several processes (THESEUS_TRACE with %p) side by side in one file",
		Long: `trace-merge reads traces that the processes of one job wrote (THESEUS_TRACE=t.%p.json)
and writes one trace of them all: each file's times moved to the earliest
file's epoch (otherData.epoch_unix_ns), its processes renumbered after the
previous files'. The processes of one host share its clock, so their spans line
up; across hosts, as well as the hosts' clocks agree.

Exit codes: 0 written; 2 usage error (an input that is not a trace); 3 the
output could not be written.`,
		Example: `  theseus-bench trace-merge job.json /tmp/t.*.json`,
		Args:    cli.MinArgs(2, "OUT.json and at least one TRACE.json"),
		RunE: cli.RunE(func(cmd *cobra.Command, args []string) error {
			var fs []*trace.File
			for _, in := range args[1:] {
				f, err := trace.Read(in)
				if err != nil {
					return cli.Usage(fmt.Errorf("%s: %w", in, err))
				}
				fs = append(fs, f)
			}
			m := trace.Merge(fs)
			if err := m.Write(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(s.Out, "%s: %d traces, %d events\n", args[0], len(fs), len(m.TraceEvents))
			return nil
		}),
	}
}
