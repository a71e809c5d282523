package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlot draws algbw (top) and busbw (bottom) against the size column,
// one line per collective, datatype and reduction (out of place solid, in
// place dashed; colors from palette, distinct for the eight collectives),
// with a log2 size axis (log2Ticks, as compare's), as a PNG (gonum/plot). Rows
// of size 0 are left out (the axis is logarithmic).
func writePlot(w io.Writer, rep *Report) error {
	type series struct {
		name string
		oop  [2]plotter.XYs // algbw, busbw
		ip   [2]plotter.XYs
	}
	var order []string
	all := map[string]*series{}
	for _, r := range rep.Rows {
		if r.Bytes <= 0 {
			continue
		}
		name := r.Collective
		if multiTypes(rep) {
			name += " " + r.Type
			if r.RedOp != "none" {
				name += " " + r.RedOp
			}
		}
		s := all[name]
		if s == nil {
			s = &series{name: name}
			all[name] = s
			order = append(order, name)
		}
		x := float64(r.Bytes)
		s.oop[0] = append(s.oop[0], plotter.XY{X: x, Y: r.OutOfPlace.AlgBW})
		s.oop[1] = append(s.oop[1], plotter.XY{X: x, Y: r.OutOfPlace.BusBW})
		s.ip[0] = append(s.ip[0], plotter.XY{X: x, Y: r.InPlace.AlgBW})
		s.ip[1] = append(s.ip[1], plotter.XY{X: x, Y: r.InPlace.BusBW})
	}
	if len(order) == 0 {
		return fmt.Errorf("nothing to plot: every row has size 0")
	}
	h := rep.Header
	var plots [2]*plot.Plot
	for i, what := range []string{"algbw", "busbw"} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("theseus-bench %s: %d ranks, backend %s", what, h.NRanks, h.Backend)
		p.X.Label.Text = "size (bytes)"
		p.Y.Label.Text = what + " (GB/s)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = log2Ticks{} // as compare draws it: 16, 256, 4K, 64K, 1M, ...
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		for j, name := range order {
			s := all[name]
			for k, pts := range [][]plotter.XY{s.oop[i], s.ip[i]} {
				l, err := plotter.NewLine(plotter.XYs(pts))
				if err != nil {
					return err
				}
				l.Color = seriesColor(j)
				l.Width = vg.Points(1.5)
				label := name
				if k == 1 {
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
					label += " (in place)"
				}
				p.Add(l)
				p.Legend.Add(label, l)
			}
		}
		plots[i] = p
	}
	img := vgimg.New(vg.Points(900), vg.Points(1100))
	dc := draw.New(img)
	t := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10),
		PadRight: vg.Points(10), PadY: vg.Points(20)}
	cs := plot.Align([][]*plot.Plot{{plots[0]}, {plots[1]}}, t, dc)
	plots[0].Draw(cs[0][0])
	plots[1].Draw(cs[1][0])
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// multiTypes reports whether the rows mix datatypes or reductions (then the
// legend names them).
func multiTypes(rep *Report) bool {
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Collective+"|"+r.Type+"|"+r.RedOp] = true
	}
	colls := map[string]bool{}
	for _, r := range rep.Rows {
		colls[r.Collective] = true
	}
	return len(seen) > len(colls)
}

// savePlot writes the plot to file (a .png name).
func savePlot(file string, rep *Report) error {
	if ext := strings.ToLower(filepath.Ext(file)); ext != ".png" {
		return fmt.Errorf("--plot %s: want a .png file", file)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := writePlot(f, rep); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
