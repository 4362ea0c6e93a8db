package report

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strings"
)

// chartBar is one labelled bar; limit, when not NaN, is the budget the value
// is held to, drawn as a tick.
type chartBar struct {
	label string
	value float64
	class string
	limit float64
}

// chartPanel is one bar chart with its own scale. A ratio panel is drawn on
// a log scale around 1, bars pointing left for values below 1 and right above.
type chartPanel struct {
	title, unit string
	ratios      bool
	bars        []chartBar
}

const (
	chartWidth   = 980
	chartLabelW  = 380
	chartBarMaxW = 470
	chartRowH    = 22
	chartTitleH  = 34
	chartGap     = 18
)

var barColors = map[string]string{"floor": "#9e9e9e", "skewgate": "#1f77b4", "other": "#ff7f0e"}

// SVG renders the chart of the results: p50 and throughput of every macro
// path, then the macro and the micro ratios. It is plain SVG with inline
// attributes, viewable anywhere without scripts or web fonts.
func (r *Results) SVG() []byte {
	limits := map[string]float64{}
	for _, b := range Budgets {
		limits[b.Figure] = b.Limit
	}
	var panels []chartPanel
	if len(r.Paths) > 0 {
		latency := chartPanel{title: "Macro: p50 latency per path (median of rounds)", unit: "ms"}
		throughput := chartPanel{title: "Macro: throughput per path (median of rounds)", unit: "req/s"}
		floors := map[string]bool{}
		for _, p := range r.Paths {
			floors[p.Floor] = true
		}
		for _, p := range r.Paths {
			class := "other"
			switch {
			case floors[p.ID]:
				class = "floor"
			case strings.HasPrefix(p.ID, "skewgate"):
				class = "skewgate"
			}
			latency.bars = append(latency.bars, chartBar{p.ID, float64(p.P50) / 1000, class, math.NaN()})
			throughput.bars = append(throughput.bars, chartBar{p.ID, float64(p.RPS), class, math.NaN()})
		}
		panels = append(panels, latency, throughput)
	}
	for _, group := range []struct{ name, title string }{
		{GroupMacro, "Macro ratios (log scale, dashed line = 1; black ticks = budgets)"},
		{GroupMicro, "Micro ratios (log scale, dashed line = 1; black ticks = budgets)"},
	} {
		panel := chartPanel{title: group.title, unit: "x", ratios: true}
		for _, f := range r.Figures {
			if f.Group == group.name && f.Unit == "ratio" {
				limit, ok := limits[f.Key]
				if !ok {
					limit = math.NaN()
				}
				panel.bars = append(panel.bars, chartBar{f.Key, float64(f.Value), "skewgate", limit})
			}
		}
		if len(panel.bars) > 0 {
			panels = append(panels, panel)
		}
	}

	height := chartGap + 6
	for _, p := range panels {
		height += chartTitleH + len(p.bars)*chartRowH + chartGap
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="11" fill="#555555">skewgate benchmarks, %s: %s, %d cores, %s</text>`+"\n",
		chartGap, html.EscapeString(r.Date), html.EscapeString(r.Machine.CPU), r.Machine.Cores, html.EscapeString(r.Machine.Go))
	y := chartGap + 6
	for _, p := range panels {
		y = p.render(&b, y)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func (p chartPanel) render(b *bytes.Buffer, y int) int {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", chartGap, y+22, html.EscapeString(p.title))
	y += chartTitleH
	top := y
	position := p.scale()
	for _, bar := range p.bars {
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", chartLabelW-8, y+15, html.EscapeString(bar.label))
		label := "n/a"
		if x, ok := position(bar.value); ok {
			x0, _ := position(p.origin())
			left, width := math.Min(x0, x), math.Max(math.Abs(x-x0), 1)
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y+4, width, chartRowH-6, barColors[bar.class])
			label = formatValue(bar.value) + " " + p.unit
		}
		if x, ok := position(bar.limit); ok {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#000000" stroke-width="2"/>`+"\n", x, y+1, x, y+chartRowH-1)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#333333">%s</text>`+"\n", chartLabelW+chartBarMaxW+10, y+15, html.EscapeString(label))
		y += chartRowH
	}
	if p.ratios {
		x, _ := position(1)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", x, top, x, y)
	}
	return y + chartGap
}

// origin is where bars start: 0 on a linear scale, 1 on a ratio scale.
func (p chartPanel) origin() float64 {
	if p.ratios {
		return 1
	}
	return 0
}

// scale maps a value to its x position; ok is false for values it cannot
// place (NaN, or not positive on a log scale).
func (p chartPanel) scale() func(float64) (float64, bool) {
	if p.ratios {
		// Symmetric around 1 so that 2x and 0.5x are equally long.
		span := math.Log(2)
		for _, bar := range p.bars {
			for _, v := range []float64{bar.value, bar.limit} {
				if v > 0 {
					span = math.Max(span, math.Abs(math.Log(v)))
				}
			}
		}
		center := float64(chartLabelW) + chartBarMaxW/2
		return func(v float64) (float64, bool) {
			if !(v > 0) {
				return 0, false
			}
			return center + math.Log(v)/span*(chartBarMaxW/2), true
		}
	}
	largest := 0.0
	for _, bar := range p.bars {
		if bar.value > largest {
			largest = bar.value
		}
	}
	if largest <= 0 {
		largest = 1
	}
	return func(v float64) (float64, bool) {
		if math.IsNaN(v) {
			return 0, false
		}
		return float64(chartLabelW) + math.Max(v, 0)/largest*chartBarMaxW, true
	}
}
