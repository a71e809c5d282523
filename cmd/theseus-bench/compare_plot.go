package main

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/theseus-ccl/theseus/internal/nccltests"
)

// palette is Tableau 10: ten colors far enough apart that the eight
// collectives of a theseus-bench run each get their own (plotutil's seven
// repeat at the eighth, so allreduce and scatter shared a red).
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}

// seriesColor is series i's color (the palette repeats after ten).
func seriesColor(i int) color.Color { return palette[i%len(palette)] }

// log2Ticks marks every power of two of a byte axis and labels some of
// them (at most about ten) with sizeLabel: 8, 1K, 64M, 1G.
type log2Ticks struct{}

func (log2Ticks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max >= min) || !finite(max) {
		return nil
	}
	lo, hi := int(math.Ceil(math.Log2(min)-1e-9)), int(math.Floor(math.Log2(max)+1e-9))
	if hi < lo || hi-lo > 128 {
		return nil
	}
	step := 1
	for (hi-lo)/step > 10 {
		step *= 2
	}
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		t := plot.Tick{Value: math.Exp2(float64(e))}
		if e%step == 0 {
			t.Label = sizeLabel(int64(t.Value))
			if e < 0 {
				t.Label = fmt.Sprintf("2^%d", e)
			}
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// plotGroup is what one pair of PNG files shows: every mode of one
// collective, number of ranks and datatype/reduction/root.
type plotGroup struct {
	coll   string
	nranks int
	data   dataKey
	tables []*table // one per mode, sorted by mode
}

// plotName is the files' common stem: <collective>[-n<ranks>], then
// -<type>-<redop> and -root<r> when the collective mixes them.
func plotName(g *plotGroup, mixedData, mixedRoot bool) string {
	s := g.coll
	if g.nranks > 0 {
		s += fmt.Sprintf("-n%d", g.nranks)
	}
	if mixedData {
		s += "-" + g.data.typ + "-" + g.data.redop
	}
	if mixedRoot && g.data.root >= 0 {
		s += fmt.Sprintf("-root%d", g.data.root)
	}
	// File-name safety: the type and redop come from the input.
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// writePlots draws, per plotGroup, busbw (linear) and time (log) against
// the size (log₂ axis) into dir/<name>-busbw.png and dir/<name>-time.png:
// one line per library and mode (color: library; dashes and marks: mode),
// out of place unless inPlace. Rows of size 0, and values that are not
// positive (time) or not finite, are left out; a plot with no point left
// is not written. It returns the two files of each table.
func writePlots(dir string, cr *comparison, inPlace bool) (files map[*table][2]string, err error) {
	defer func() {
		// gonum/plot panics on some degenerate ranges; never let input
		// data crash the command.
		if r := recover(); r != nil {
			err = fmt.Errorf("plotting: %v", r)
		}
	}()
	type gk struct {
		coll   string
		nranks int
		data   dataKey
	}
	groups := map[gk]*plotGroup{}
	var order []gk
	datas := map[[2]any]map[[2]string]bool{} // (coll, nranks) → type/redop seen
	roots := map[[2]any]map[int]bool{}
	for _, t := range cr.tables {
		k := gk{t.key.coll, t.key.nranks, t.data}
		g := groups[k]
		if g == nil {
			g = &plotGroup{coll: k.coll, nranks: k.nranks, data: k.data}
			groups[k] = g
			order = append(order, k)
		}
		g.tables = append(g.tables, t)
		ck := [2]any{k.coll, k.nranks}
		if datas[ck] == nil {
			datas[ck], roots[ck] = map[[2]string]bool{}, map[int]bool{}
		}
		datas[ck][[2]string{t.data.typ, t.data.redop}] = true
		roots[ck][t.data.root] = true
	}
	a, where := 0, "out of place"
	if inPlace {
		a, where = 1, "in place"
	}
	files = map[*table][2]string{}
	for _, k := range order {
		g := groups[k]
		sort.SliceStable(g.tables, func(i, j int) bool { return g.tables[i].key.mode < g.tables[j].key.mode })
		ck := [2]any{k.coll, k.nranks}
		stem := filepath.Join(dir, plotName(g, len(datas[ck]) > 1, len(roots[ck]) > 1))
		title := g.coll
		if g.nranks > 0 {
			title += fmt.Sprintf(", %d ranks", g.nranks)
		}
		title += ", " + g.data.String()
		var out [2]string
		for i, what := range []string{"busbw", "time"} {
			path := stem + "-" + what + ".png"
			ok, err := drawPlot(path, fmt.Sprintf("%s: %s (%s)", title, what, where), what, g, cr, a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if ok {
				out[i] = path
			}
		}
		if out[0] != "" || out[1] != "" {
			for _, t := range g.tables {
				files[t] = out
			}
		}
	}
	return files, nil
}

// drawPlot draws one panel; ok is false when no point is left to draw
// (nothing is written then).
func drawPlot(path, title, what string, g *plotGroup, cr *comparison, a int) (ok bool, err error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "size (bytes)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = log2Ticks{}
	if what == "busbw" {
		p.Y.Label.Text = "busbw (GB/s)"
	} else {
		p.Y.Label.Text = "time (µs)"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	// Top left is empty in both panels: small sizes have little busbw and
	// little time.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	n := 0
	for mi, t := range g.tables {
		for si, side := range []struct {
			name string
			rows []*nccltests.Row
		}{{cr.baseName, rowsOf(t, false)}, {cr.candName, rowsOf(t, true)}} {
			var pts plotter.XYs
			for _, r := range side.rows {
				x := result(r, a)
				v := x.BusBW
				if what == "time" {
					v = x.TimeUS
				}
				if r.Bytes <= 0 || !finite(v) || v < 0 || what == "time" && v <= 0 {
					continue
				}
				pts = append(pts, plotter.XY{X: float64(r.Bytes), Y: v})
				xmin, xmax = math.Min(xmin, float64(r.Bytes)), math.Max(xmax, float64(r.Bytes))
				ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
			}
			if len(pts) == 0 {
				continue
			}
			n += len(pts)
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return false, err
			}
			l.Color = seriesColor(si)
			l.Width = vg.Points(1.5)
			l.Dashes = plotutil.Dashes(mi)
			s.Color = seriesColor(si)
			s.Shape = plotutil.Shape(mi)
			p.Add(l, s)
			label := side.name
			if t.key.mode != "" {
				label += " " + t.key.mode
			}
			p.Legend.Add(label, l, s)
		}
	}
	if n == 0 {
		return false, nil
	}
	// Log axes: pad by a factor, so that the end marks show whole.
	if xmin == xmax {
		xmin, xmax = xmin/2, xmax*2
	}
	p.X.Min, p.X.Max = xmin/1.25, xmax*1.25
	if what == "time" {
		if ymin == ymax {
			ymin, ymax = ymin/2, ymax*2
		}
		p.Y.Min, p.Y.Max = ymin/1.25, ymax*1.25
	} else {
		p.Y.Min = 0
		if ymax <= 0 {
			ymax = 1
		}
		p.Y.Max = ymax * 1.05
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return false, err
	}
	return true, nil
}

// rowsOf returns one side's rows of a table, by size.
func rowsOf(t *table, cand bool) []*nccltests.Row {
	var rs []*nccltests.Row
	for _, r := range t.rows {
		x := r.base
		if cand {
			x = r.cand
		}
		if x != nil {
			rs = append(rs, x)
		}
	}
	return rs
}
