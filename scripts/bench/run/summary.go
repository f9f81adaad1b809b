package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// row is one line of the summary: a workload under a config, over all its
// repetitions. Added costs are paired with the untraced run of the same
// repetition, which cancels slow drift in the machine's load.
type row struct {
	Workload, Config string
	Runs, OK         int
	NsOp             float64 // median ns per iteration (per worker)
	Ratio            stat    // loop time / untraced loop time
	Added            stat    // added ns per unit (Per)
	Per              string  // "traced call", "untraced call", "run"
	CPUAdded         float64 // median added CPU (tracer + target) per unit, start-up CPU excluded
	Stops            float64 // voluntary context switches of the target per traced call
	MaxRSSMB         float64 // largest peak RSS over the runs
	Events, Truth    int64   // summed over runs (cudatrace only)
	Dropped          int64
	Spread           float64 // median share of the loop between the first and the last worker done (W4)
	FirstEventMs     float64 // median time from trace start to the first event
	WallMs           float64 // median wall time of the whole command
}

type stat struct{ Median, Min, Max float64 }

func (s stat) valid() bool { return !math.IsNaN(s.Median) }

func newStat(v []float64) stat {
	if len(v) == 0 {
		return stat{math.NaN(), math.NaN(), math.NaN()}
	}
	slices.Sort(v)
	return stat{median(v), v[0], v[len(v)-1]}
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

func medianOf(v []float64) float64 {
	slices.Sort(v)
	return median(v)
}

type key struct {
	w, c string
	rep  int
}

func summarise(runs []run) []row {
	byKey := map[key]run{}
	var order []key // first-seen (workload, config)
	seen := map[[2]string]bool{}
	for _, r := range runs {
		if r.OK {
			byKey[key{r.Workload, r.Config, r.Rep}] = r
		}
		if !seen[[2]string{r.Workload, r.Config}] {
			seen[[2]string{r.Workload, r.Config}] = true
			order = append(order, key{r.Workload, r.Config, 0})
		}
	}
	// Start-up CPU per config, so a short run is not charged for loading
	// BPF programs: median CPU of the do-nothing run, minus untraced.
	fixedCPU := map[string]float64{}
	for _, k := range order {
		if k.w != "start" {
			continue
		}
		var d []float64
		for _, r := range runs {
			if u, ok := byKey[key{"start", "untraced", r.Rep}]; ok && r.OK && r.Workload == "start" && r.Config == k.c {
				d = append(d, float64(r.CPUNs-u.CPUNs))
			}
		}
		fixedCPU[k.c] = medianOf(d)
	}
	fixedCPU["ebpf-other"] = fixedCPU["ebpf"]
	fixedCPU["ebpf-other-base"] = fixedCPU["ebpf-base"]

	var rows []row
	slices.SortStableFunc(order, func(a, b key) int { return workloadRank(a.w) - workloadRank(b.w) })
	for _, k := range order {
		rw := row{Workload: k.w, Config: k.c}
		var nsop, ratio, added, cpu, stops, spread, first, wall []float64
		for _, r := range runs {
			if r.Workload != k.w || r.Config != k.c {
				continue
			}
			rw.Runs++
			if !r.OK {
				continue
			}
			rw.OK++
			nsop = append(nsop, parseF(r.W["ns_op"]))
			wall = append(wall, float64(r.WallNs)/1e6)
			rw.MaxRSSMB = max(rw.MaxRSSMB, float64(r.MaxRSSKB)/1024)
			if r.HasReport {
				rw.Events += r.Captured
				rw.Truth += r.Truth
				rw.Dropped += r.Dropped
				first = append(first, float64(r.FirstEventNs)/1e6)
			}
			u, ok := byKey[key{k.w, "untraced", r.Rep}]
			if !ok || k.c == "untraced" {
				continue
			}
			var units float64
			switch k.w {
			case "W2":
				rw.Per, units = "untraced call", float64(u.wi("untraced"))
			case "start":
				rw.Per, units = "run", 1
				added = append(added, float64(r.StartupNs-u.StartupNs))
				continue
			case "true":
				rw.Per, units = "run", 1
				added = append(added, float64(r.WallNs-u.WallNs))
				continue
			default:
				rw.Per, units = "traced call", float64(u.wi("traced"))
			}
			if units == 0 {
				continue
			}
			lr, lu := float64(r.wi("loop_ns")), float64(u.wi("loop_ns"))
			ratio = append(ratio, lr/lu)
			added = append(added, (lr-lu)/units)
			cpu = append(cpu, (float64(r.CPUNs-u.CPUNs)-fixedCPU[k.c])/units)
			if (k.w == "W1" || k.w == "W4") && k.c != "ebpf-other" && k.c != "ebpf-other-base" {
				stops = append(stops, float64(r.switches()-u.switches())/units)
			}
			if k.w == "W4" && lr > 0 && r.W["spread_ns"] != "" {
				spread = append(spread, float64(r.wi("spread_ns"))/lr)
			}
		}
		rw.NsOp = medianOf(nsop)
		rw.Ratio, rw.Added = newStat(ratio), newStat(added)
		rw.CPUAdded, rw.Stops, rw.Spread = medianOf(cpu), medianOf(stops), medianOf(spread)
		rw.FirstEventMs, rw.WallMs = medianOf(first), medianOf(wall)
		rows = append(rows, rw)
	}
	return rows
}

// switches are the workload's voluntary context switches, its child
// processes' included (W4's), where the workload reports them.
func (r run) switches() int64 {
	if r.W["nvcsw_all"] != "" {
		return r.wi("nvcsw_all")
	}
	return r.wi("nvcsw")
}

func workloadRank(w string) int {
	return slices.Index([]string{"W1", "W2", "W4", "W5", "W1-10M", "start", "true"}, w)
}

func parseF(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

var summaryHeader = []string{"workload", "config", "runs", "ok", "ns_op_median", "ratio_median", "ratio_min", "ratio_max",
	"added_ns_median", "added_ns_min", "added_ns_max", "added_per", "cpu_added_ns", "stops_per_traced",
	"maxrss_mb", "captured", "truth", "dropped", "first_event_ms", "wall_ms", "end_spread"}

func f1(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func f3(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func (r row) fields() []string {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{r.Workload, r.Config, strconv.Itoa(r.Runs), strconv.Itoa(r.OK), f1(r.NsOp),
		f3(r.Ratio.Median), f3(r.Ratio.Min), f3(r.Ratio.Max),
		f1(r.Added.Median), f1(r.Added.Min), f1(r.Added.Max), r.Per, f1(r.CPUAdded), f3(r.Stops),
		f1(r.MaxRSSMB), i(r.Events), i(r.Truth), i(r.Dropped), f3(r.FirstEventMs), f1(r.WallMs), f3(r.Spread)}
}

func writeSummary(path string, rows []row) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(summaryHeader) // errors surface in w.Error()
	for _, r := range rows {
		_ = w.Write(r.fields()) // errors surface in w.Error()
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// printTable prints the one table bench.sh shows.
func printTable(out io.Writer, rows []row) {
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tconfig\tok\tns/op\tratio [min–max]\tadded ns [min–max]\tper\tcpu ns\tstops\tRSS MB\tcaptured/truth\tdropped\t1st ev ms\t")
	for _, r := range rows {
		ratio, added := "", ""
		if r.Ratio.valid() {
			ratio = fmt.Sprintf("%.3f [%.3f–%.3f]", r.Ratio.Median, r.Ratio.Min, r.Ratio.Max)
		}
		if r.Added.valid() {
			added = fmt.Sprintf("%s [%s–%s]", f1(r.Added.Median), f1(r.Added.Min), f1(r.Added.Max))
		}
		capt := ""
		if r.Truth > 0 || r.Events > 0 {
			capt = fmt.Sprintf("%d/%d", r.Events, r.Truth)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n",
			r.Workload, r.Config, r.OK, r.Runs, f1(r.NsOp), ratio, added, r.Per, f1(r.CPUAdded),
			f3(r.Stops), f1(r.MaxRSSMB), capt, r.Dropped, f3(r.FirstEventMs))
	}
	_ = tw.Flush() // stdout: nowhere to report
}

// printChecks compares the results with the targets.
func printChecks(out io.Writer, runs []run) {
	rows := summarise(runs)
	get := func(w, c string) (row, bool) {
		for _, r := range rows {
			if r.Workload == w && r.Config == c {
				return r, true
			}
		}
		return row{}, false
	}
	check := func(name string, ok bool, detail string) {
		mark := "PASS"
		if !ok {
			mark = "MISS"
		}
		fmt.Fprintf(out, "  %s  %-58s %s\n", mark, name, detail)
	}
	fmt.Fprintln(out, "\nTargets (issues 7 and 19):")
	if r, ok := get("W2", "ebpf-other"); ok && r.Added.valid() {
		check("eBPF: ≤ +15 ns per untraced syscall, neighbour (W2b)", r.Added.Median <= 15, fmt.Sprintf("%.1f ns", r.Added.Median))
	}
	if r, ok := get("W2", "ebpf"); ok && r.Added.valid() {
		check("eBPF: ≤ +30 ns per untraced syscall, tracee (W2a)", r.Added.Median <= 30, fmt.Sprintf("%.1f ns", r.Added.Median))
	}
	e1, okE := get("W1", "ebpf")
	if okE && e1.Ratio.valid() {
		check("eBPF: W1 ≤ 1.3x", e1.Ratio.Median <= 1.3, fmt.Sprintf("%.3fx", e1.Ratio.Median))
		if e1.Added.valid() {
			check("eBPF: W1 ≤ +150 ns per traced call", e1.Added.Median <= 150, fmt.Sprintf("%.0f ns", e1.Added.Median))
		}
		check("eBPF: ≤ 1 µs per traced event incl. user space (CPU)", e1.CPUAdded <= 1000,
			fmt.Sprintf("%.0f ns CPU (%.0f ns of target wall time)", e1.CPUAdded, e1.Added.Median))
	}
	// Not a target: the same loop with every call sent to user space, the
	// cost per call when no two are alike.
	if r, ok := get("W1", "ebpf-nofold"); ok && r.Ratio.valid() {
		fmt.Fprintf(out, "  info  %-58s %.3fx, %.0f ns CPU (%.0f ns of target wall time)\n",
			"eBPF --no-fold: W1, every call sent to user space", r.Ratio.Median, r.CPUAdded, r.Added.Median)
	}
	if r, ok := get("start", "ebpf"); ok && r.Added.valid() {
		check("eBPF: start-up (spawn → target runs) ≤ 25 ms", r.Added.Median <= 25e6, fmt.Sprintf("%.1f ms", r.Added.Median/1e6))
	}
	if r, ok := get("true", "ebpf"); ok && r.Added.valid() {
		check("eBPF: cudatrace -- /bin/true ≤ 35 ms more than /bin/true", r.Added.Median <= 35e6, fmt.Sprintf("%.1f ms", r.Added.Median/1e6))
	}
	if r, ok := get("W1-10M", "ebpf-nofold"); ok {
		check("eBPF: RSS ≤ 64 MB for 10M events", r.MaxRSSMB <= 64 && r.OK > 0,
			fmt.Sprintf("%.1f MB, %d events captured of %d, %d dropped", r.MaxRSSMB, r.Events, r.Truth, r.Dropped))
	}
	if r, ok := get("W2", "ptrace"); ok && r.Ratio.valid() {
		check("ptrace: W2 ≈ 1.0x (≤ 1.05)", r.Ratio.Median <= 1.05, fmt.Sprintf("%.3fx", r.Ratio.Median))
	}
	p1, okP := get("W1", "ptrace")
	if okP && p1.Added.valid() {
		check("ptrace: ≤ 2 stops per traced syscall", p1.Stops <= 2.05, fmt.Sprintf("%.2f", p1.Stops))
		if s, ok := get("W1", "strace-seccomp"); ok && s.Added.valid() {
			check("ptrace: never slower than strace -f --seccomp-bpf (W1)", p1.Added.Median <= s.Added.Median,
				fmt.Sprintf("%.0f vs %.0f ns", p1.Added.Median, s.Added.Median))
		}
		if s, ok := get("W4", "strace-seccomp"); ok && s.Added.valid() {
			if p4, ok := get("W4", "ptrace"); ok && p4.Added.valid() {
				check("ptrace: never slower than strace -f --seccomp-bpf (W4)", p4.Added.Median <= s.Added.Median,
					fmt.Sprintf("%.0f vs %.0f ns", p4.Added.Median, s.Added.Median))
			}
		}
	}
	// How evenly the tracer served W4's ten workers: the share of the loop
	// between the first worker done and the last. A tracer that favours
	// some tracees lets them finish early and the rest crawl on alone.
	for _, c := range []string{"ptrace", "ptrace-base", "strace-seccomp"} {
		if r, ok := get("W4", c); ok && !math.IsNaN(r.Spread) {
			fmt.Fprintf(out, "  info  %-58s %.0f %% of the loop; %.2f stops, %.0f ns CPU per traced call\n",
				"W4 "+c+": workers' ends spread over", 100*r.Spread, r.Stops, r.CPUAdded)
		}
	}
	if s, ok := get("W1", "strace"); ok && okE && s.Added.valid() && e1.Added.valid() {
		f := s.Added.Median / math.Max(e1.Added.Median, 1)
		check("eBPF: ≥ 100x less added time per event than strace -f", f >= 100, fmt.Sprintf("%.0fx", f))
	}
	// The hook's own cost (do-nothing programs on sys_enter and sys_exit)
	// and what cudatrace's programs add above it: only that part can be
	// cut without another hook (fentry).
	for _, fl := range []struct{ w, what, above, also string }{
		{"W2", "W2 untraced syscall: raw tracepoint floor", "ebpf", "ebpf-other"},
		{"W1", "W1 per traced call: raw tracepoint floor", "ebpf", ""},
	} {
		f, ok := get(fl.w, "floor")
		if !ok || !f.Added.valid() {
			continue
		}
		line := fmt.Sprintf("hook floor %.1f ns", f.Added.Median)
		if r, ok := get(fl.w, fl.above); ok && r.Added.valid() {
			line += fmt.Sprintf(", ours %.1f ns above it", r.Added.Median-f.Added.Median)
		}
		if r, ok := get(fl.w, fl.also); ok && r.Added.valid() {
			line += fmt.Sprintf(" (neighbour: %.1f)", r.Added.Median-f.Added.Median)
		}
		fmt.Fprintf(out, "  info  %-58s %s\n", fl.what, line)
	}
	// The -base build beside this one: the change's effect, same run.
	for _, cmp := range []struct {
		w, c, base, what, unit string
		scale                  float64
	}{
		{"W1", "ebpf", "ebpf-base", "added per traced call", "ns", 1},
		{"W2", "ebpf", "ebpf-base", "added per untraced call, tracee", "ns", 1},
		{"W2", "ebpf-other", "ebpf-other-base", "added per untraced call, neighbour", "ns", 1},
		{"W4", "ebpf", "ebpf-base", "added per traced call", "ns", 1},
		{"W1", "ptrace", "ptrace-base", "ptrace added per traced call", "ns", 1},
		{"W4", "ptrace", "ptrace-base", "ptrace added per traced call", "ns", 1},
		{"start", "ebpf", "ebpf-base", "spawn → target runs", "ms", 1e6},
		{"true", "ebpf", "ebpf-base", "cudatrace -- /bin/true, added", "ms", 1e6},
	} {
		now, ok1 := get(cmp.w, cmp.c)
		before, ok2 := get(cmp.w, cmp.base)
		if ok1 && ok2 && now.Added.valid() && before.Added.valid() {
			fmt.Fprintf(out, "  info  %-58s %.1f %s now, %.1f before (-base)\n",
				cmp.w+" "+cmp.what, now.Added.Median/cmp.scale, cmp.unit, before.Added.Median/cmp.scale)
		}
	}
	drops, short := int64(0), 0
	for _, r := range runs {
		if (r.Workload == "W1" || r.Workload == "W2" || r.Workload == "W4") && r.HasReport {
			drops += r.Dropped
			if r.Captured != r.Truth {
				short++
			}
		}
	}
	check("zero drops W1–W4 at the default buffer", drops == 0 && short == 0,
		fmt.Sprintf("%d dropped, %d runs with captured ≠ truth", drops, short))
	exact, total, dropped := 0, 0, int64(0)
	for _, r := range runs {
		if r.Workload == "W5" && r.Config != "ebpf-nofold" && r.HasReport {
			total++
			dropped += r.Dropped
			if r.OK {
				exact++
			}
		}
	}
	if total > 0 {
		check("W5: delivered + dropped = truth + exec + exit, tiny ring", exact == total,
			fmt.Sprintf("%d/%d runs exact, %d drops in all", exact, total, dropped))
	}
}

// printGoals is issue 31's table: each measure now, with -base's build,
// strace's where it has one, the goal, and whether it is met. Rows whose
// runs are missing are left out.
func printGoals(out io.Writer, runs []run) {
	rows := summarise(runs)
	get := func(w, c string) (row, bool) {
		for _, r := range rows {
			if r.Workload == w && r.Config == c && r.Added.valid() {
				return r, true
			}
		}
		return row{}, false
	}
	ms := func(w, c string) (float64, bool) {
		r, ok := get(w, c)
		return r.Added.Median / 1e6, ok
	}
	ns := func(w, c string) (float64, bool) {
		r, ok := get(w, c)
		return r.Added.Median, ok
	}
	tw := tabwriter.NewWriter(out, 2, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tnow\tbase\tstrace\tgoal\tPASS/MISS")
	line := func(name string, at func(w, c string) (float64, bool), w, c, unit, goal string, met func(now, strace float64, haveStrace bool) bool, straces ...string) {
		now, ok := at(w, c)
		if !ok {
			return
		}
		base := "–"
		if v, ok := at(w, c+"-base"); ok {
			base = fmt.Sprintf("%.1f %s", v, unit)
		}
		st, stMin, haveStrace := "–", 0.0, false
		var parts []string
		for _, s := range straces {
			if v, ok := at(w, s); ok {
				parts = append(parts, fmt.Sprintf("%.1f %s (%s)", v, unit, s))
				if !haveStrace || v < stMin {
					stMin, haveStrace = v, true
				}
			}
		}
		if len(parts) > 0 {
			st = strings.Join(parts, ", ")
		}
		mark := "MISS"
		if met(now, stMin, haveStrace) {
			mark = "PASS"
		}
		fmt.Fprintf(tw, "%s\t%.1f %s\t%s\t%s\t%s\t%s\n", name, now, unit, base, st, goal, mark)
	}
	below := func(limit float64) func(float64, float64, bool) bool {
		return func(now, _ float64, _ bool) bool { return now <= limit }
	}
	atStrace := func(now, strace float64, have bool) bool { return have && now <= strace }
	line("eBPF start-up (spawn → target runs)", ms, "start", "ebpf", "ms", "≤ 25 ms", below(25), "strace", "strace-seccomp")
	line("cudatrace -- /bin/true, added", ms, "true", "ebpf", "ms", "≤ 35 ms", below(35))
	line("ptrace start-up", ms, "start", "ptrace", "ms", "≤ strace's", atStrace, "strace", "strace-seccomp")
	line("cudatrace --backend ptrace -- /bin/true, added", ms, "true", "ptrace", "ms", "≤ strace's", atStrace, "strace", "strace-seccomp")
	line("eBPF W1, per traced call", ns, "W1", "ebpf", "ns", "≤ +150 ns", below(150))
	line("ptrace W4, per traced call", ns, "W4", "ptrace", "ns", "never slower", atStrace, "strace-seccomp")
	if e, ok := ns("W1", "ebpf"); ok {
		if s, ok := ns("W1", "strace"); ok {
			f := s / max(e, 1)
			mark := "MISS"
			if f >= 100 {
				mark = "PASS"
			}
			fmt.Fprintf(tw, "vs strace -f, added time per event\t%.0fx less\t–\t–\t≥ 100x\t%s\n", f, mark)
		}
	}
	_ = tw.Flush() // stdout: nowhere to report
}
