// Command plot draws bench-results.csv as an SVG bar chart: added ns per
// call for each workload and tracer configuration, on a log scale (strace
// and eBPF differ by orders of magnitude). Plain SVG, no dependencies.
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"html"
	"math"
	"os"
	"strconv"
	"strings"
)

type bar struct {
	group, label string
	median       float64
	min, max     float64
}

var colours = map[string]string{
	"ebpf":           "#2b8a3e",
	"ebpf-other":     "#74b816",
	"ptrace":         "#1971c2",
	"strace":         "#c92a2a",
	"strace-seccomp": "#e8590c",
}

func main() {
	in := flag.String("in", "bench-out/bench-results.csv", "summary CSV from scripts/bench/run")
	out := flag.String("out", "bench-out/bench-overhead.svg", "SVG to write")
	flag.Parse()
	bars, err := readBars(*in)
	if err != nil {
		fail("%v", err)
	}
	if len(bars) == 0 {
		fail("%s: no rows with an added cost per call", *in)
	}
	if err := os.WriteFile(*out, []byte(render(bars)), 0o644); err != nil {
		fail("%v", err)
	}
}

func readBars(path string) ([]bar, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(recs) < 1 {
		return nil, fmt.Errorf("%s: empty", path)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for _, need := range []string{"workload", "config", "added_ns_median", "added_ns_min", "added_ns_max", "added_per"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s: no %s column", path, need)
		}
	}
	var bars []bar
	for _, r := range recs[1:] {
		per := r[col["added_per"]]
		if per != "traced call" && per != "untraced call" {
			continue
		}
		med, err := strconv.ParseFloat(r[col["added_ns_median"]], 64)
		if err != nil {
			continue
		}
		lo, _ := strconv.ParseFloat(r[col["added_ns_min"]], 64)
		hi, _ := strconv.ParseFloat(r[col["added_ns_max"]], 64)
		w := r[col["workload"]]
		bars = append(bars, bar{group: w + " (ns per " + per + ")", label: r[col["config"]], median: med, min: lo, max: hi})
	}
	return bars, nil
}

// Layout, in SVG user units.
const (
	left, right, top = 260.0, 40.0, 50.0
	width            = 900.0
	barH, gap        = 18.0, 6.0
	groupGap         = 26.0
	lo, hi           = 1.0, 1e6 // log axis range, ns
)

func x(v float64) float64 {
	v = math.Min(math.Max(v, lo), hi)
	return left + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(width-left-right)
}

func render(bars []bar) string {
	var b strings.Builder
	y := top
	var body strings.Builder
	group := ""
	for _, br := range bars {
		if br.group != group {
			if group != "" {
				y += groupGap - gap
			}
			group = br.group
			fmt.Fprintf(&body, `<text x="10" y="%.1f" font-weight="bold">%s</text>`+"\n", y+12, html.EscapeString(group))
			y += 20
		}
		c := colours[br.label]
		if c == "" {
			c = "#868e96"
		}
		fmt.Fprintf(&body, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+13, html.EscapeString(br.label))
		fmt.Fprintf(&body, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", left, y, x(br.median)-left, barH, c)
		if br.min != br.max {
			fmt.Fprintf(&body, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#212529"/>`+"\n", x(br.min), x(br.max), y+barH/2, y+barH/2)
		}
		fmt.Fprintf(&body, `<text x="%.1f" y="%.1f">%s</text>`+"\n", math.Max(x(br.median), x(br.max))+6, y+13, label(br.median))
		y += barH + gap
	}
	height := y + 40
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">Added time per call over untraced (median, whiskers min–max; log scale, values ≤ 1 ns drawn at 1)</text>`+"\n")
	for e := 0; e <= 6; e++ {
		v := math.Pow(10, float64(e))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#dee2e6"/>`+"\n", x(v), x(v), top-5, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#495057">%s</text>`+"\n", x(v), y+16, label(v))
	}
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	return b.String()
}

func label(ns float64) string {
	switch a := math.Abs(ns); {
	case a >= 1e6:
		return fmt.Sprintf("%.3g ms", ns/1e6)
	case a >= 1e3:
		return fmt.Sprintf("%.3g µs", ns/1e3)
	default:
		return fmt.Sprintf("%.3g ns", ns)
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "plot: "+format+"\n", a...)
	os.Exit(1)
}
