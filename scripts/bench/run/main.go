// Command run is the benchmark driver behind scripts/bench.sh. It runs the
// workload under each tracer configuration, interleaved and in alternating
// order, checks every trace against the workload's own counts, and writes
// the raw runs and a summary as CSV.
//
// It expects root (eBPF, mknod done by the script), cudatrace and workload
// built into -bin, and a character node c 1:9 (or any major-1 node) at
// -node whose path starts with /dev/nvidia.
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cudatrace/cudatrace/internal/procfs"
	"github.com/cudatrace/cudatrace/scripts/bench/internal/floor"
)

// A config is one way of running the workload.
type config struct {
	name string
	// wrap returns the command line around the workload's argv; nil argv
	// means the workload runs untraced.
	wrap func(b *bench, report string, argv []string) []string
	// neighbour: the tracer traces a sleeping process while the workload
	// runs untraced beside it.
	neighbour bool
	cudatrace bool // the run has a cudatrace report to check
	base      bool // the -base build of cudatrace instead of -bin's
	// floor: the workload runs untraced with do-nothing programs on the
	// syscall tracepoints (W1 and W2 only): the hook's own cost, which
	// cudatrace's programs can add to but not remove.
	floor bool
}

// baseConfigs compare a second build (-base) side by side with this one, in
// the same interleaved run: the before and after of a change, as ratios
// the machine's drift cannot skew.
var baseConfigs = []config{
	{name: "ebpf-base", cudatrace: true, base: true, wrap: func(b *bench, rep string, argv []string) []string {
		a := b.cudatraceArgv("ebpf", rep)
		a[0] = b.base
		return append(a, argv...)
	}},
	{name: "ebpf-other-base", cudatrace: true, neighbour: true, base: true},
	{name: "ptrace-base", cudatrace: true, base: true, wrap: func(b *bench, rep string, argv []string) []string {
		a := b.cudatraceArgv("ptrace", rep)
		a[0] = b.base
		return append(a, argv...)
	}},
}

var configs = []config{
	{name: "untraced"},
	{name: "ebpf", cudatrace: true, wrap: func(b *bench, rep string, argv []string) []string {
		return append(b.cudatraceArgv("ebpf", rep), argv...)
	}},
	{name: "ebpf-other", cudatrace: true, neighbour: true},
	{name: "floor", floor: true},
	{name: "ptrace", cudatrace: true, wrap: func(b *bench, rep string, argv []string) []string {
		return append(b.cudatraceArgv("ptrace", rep), argv...)
	}},
	// Every call through the ring buffer, as if no two were alike: the
	// per-event cost folding (the default) avoids for repeats.
	{name: "ebpf-nofold", cudatrace: true, wrap: func(b *bench, rep string, argv []string) []string {
		return append(noFold(b.cudatraceArgv("ebpf", rep)), argv...)
	}},
	{name: "strace", wrap: func(b *bench, _ string, argv []string) []string {
		return append([]string{b.strace, "-f", "-e", "trace=openat,ioctl", "-o", "/dev/null", "--"}, argv...)
	}},
	{name: "strace-seccomp", wrap: func(b *bench, _ string, argv []string) []string {
		return append([]string{b.strace, "-f", "--seccomp-bpf", "-e", "trace=openat,ioctl", "-o", "/dev/null", "--"}, argv...)
	}},
}

// A workload is one program shape; each runs under every config.
type workload struct {
	name string
	args []string
}

type bench struct {
	bin, out, node, strace string
	base                   string // a baseline cudatrace binary (-base), or ""
	ringbuf                int    // bytes for W5
	keepReports            bool
	timeout                time.Duration
	runs                   []run
	runsCSV                *csv.Writer
	seq                    int
}

// run is one measured execution.
type run struct {
	Workload, Config string
	Rep              int
	OK               bool
	Note             string
	W                map[string]string // the workload's own line
	WallNs           int64             // the whole command, tracer start-up and report included
	CPUNs            int64             // tracer + workload, from wait4
	MaxRSSKB         int64             // wait4 ru_maxrss: the largest of tracer and target
	StartupNs        int64             // spawn until the workload's main ran
	// From the cudatrace report, when there is one.
	Events, Dropped, Captured, Truth int64
	FirstEventNs                     int64
	HasReport                        bool
}

func (r run) wi(k string) int64 {
	v, _ := strconv.ParseInt(r.W[k], 10, 64)
	return v
}

func main() {
	var b bench
	var reps, n1, n2, n4, n5, big int
	var quick bool
	flag.StringVar(&b.bin, "bin", "", "directory holding cudatrace and workload")
	flag.StringVar(&b.out, "out", "bench-out", "output directory")
	flag.StringVar(&b.node, "node", "", "character node (major 1) whose path starts with /dev/nvidia")
	flag.StringVar(&b.strace, "strace", "strace", "strace binary (empty: skip the strace configs)")
	flag.StringVar(&b.base, "base", "", "a second cudatrace binary (the build before a change), run as the ebpf-base configs beside this one")
	flag.IntVar(&b.ringbuf, "ringbuf", 4096, "W5 ring buffer size in bytes")
	flag.IntVar(&reps, "reps", 10, "repetitions of every workload × config")
	// 100,000 traced calls: with fewer, a few ms of noise in the start-up
	// CPU that cpu ns subtracts moves it by hundreds of ns per call.
	flag.IntVar(&n1, "n1", 50000, "W1 iterations")
	flag.IntVar(&n2, "n2", 20000, "W2 iterations")
	flag.IntVar(&n4, "n4", 1000, "W4 iterations per worker")
	flag.IntVar(&n5, "n5", 2000, "W5 iterations per thread")
	flag.IntVar(&big, "big", 5_000_000, "iterations of the RSS check (2 events each); 0 skips it")
	flag.BoolVar(&b.keepReports, "keep-reports", false, "keep every cudatrace JSON report under OUT/reports")
	flag.BoolVar(&quick, "quick", false, "a smoke run: fewer repetitions and iterations")
	only := flag.String("workloads", "", "comma-separated subset of W1,W2,W4,start,true,W5 (default: all); start is needed for the cpu ns column")
	onlyCfgs := flag.String("configs", "", "comma-separated subset of the configs (default: all); untraced is always run, the others are paired with it")
	flag.DurationVar(&b.timeout, "timeout", 5*time.Minute, "limit per command")
	flag.Parse()
	if quick {
		reps, n1, n2, n4, n5, big = 2, 2000, 10000, 300, 500, 0
	}
	if b.bin == "" || b.node == "" {
		fatal("need -bin and -node")
	}
	if b.strace != "" {
		if p, err := exec.LookPath(b.strace); err == nil {
			b.strace = p
		} else {
			fmt.Fprintf(os.Stderr, "bench: %s not found; skipping the strace configs\n", b.strace)
			b.strace = ""
		}
	}
	if err := os.MkdirAll(filepath.Join(b.out, "reports"), 0o755); err != nil {
		fatal("%v", err)
	}
	f, err := os.Create(filepath.Join(b.out, "bench-runs.csv"))
	if err != nil {
		fatal("%v", err)
	}
	defer func() { _ = f.Close() }() // written through runsCSV, whose Error() is checked
	b.runsCSV = csv.NewWriter(f)
	_ = b.runsCSV.Write(runHeader) // errors surface in runsCSV.Error()

	dev := func(n, threads, procs int) []string {
		return []string{"-mode", "dev", "-path", b.node, "-n", strconv.Itoa(n),
			"-threads", strconv.Itoa(threads), "-procs", strconv.Itoa(procs)}
	}
	want := func(name string) bool {
		return *only == "" || slices.Contains(strings.Split(*only, ","), name)
	}
	var workloads []workload
	for _, w := range []workload{
		{"W1", dev(n1, 1, 0)},
		{"W2", []string{"-mode", "getppid", "-n", strconv.Itoa(n2)}},
		{"W4", dev(n4, 8, 2)},
		{"start", dev(0, 1, 0)}, // start-up: the target does nothing
	} {
		if want(w.name) {
			workloads = append(workloads, w)
		}
	}
	cfgs := configs
	if b.strace == "" {
		cfgs = cfgs[:6]
	}
	trueCfgs := slices.DeleteFunc(slices.Clone(cfgs[:5]), func(c config) bool { return c.floor })
	if b.strace != "" {
		// ptrace's /bin/true against strace's (issue 31's goal).
		trueCfgs = append(trueCfgs, configByName("strace"), configByName("strace-seccomp"))
	}
	if b.base != "" {
		cfgs = append(slices.Clone(cfgs), baseConfigs...)
		trueCfgs = append(trueCfgs, baseConfigs...)
	}
	if *onlyCfgs != "" {
		keep := func(c config) bool {
			return c.name != "untraced" && !slices.Contains(strings.Split(*onlyCfgs, ","), c.name)
		}
		cfgs, trueCfgs = slices.DeleteFunc(slices.Clone(cfgs), keep), slices.DeleteFunc(trueCfgs, keep)
	}
	// Alternate: each repetition rotates the config order and every other
	// one reverses it, so no config always follows the same neighbour.
	for rep := range reps {
		for _, w := range workloads {
			order := rotate(cfgs, rep)
			for _, c := range order {
				if w.name == "start" && c.neighbour || c.floor && w.name != "W1" && w.name != "W2" {
					continue
				}
				b.measure(w, c, rep)
			}
		}
		fmt.Fprintf(os.Stderr, "bench: repetition %d/%d done\n", rep+1, reps)
	}
	// /bin/true start-up, as the issue words it: cudatrace -- /bin/true
	// minus /bin/true.
	for rep := range reps {
		for _, c := range rotate(trueCfgs, rep) {
			if c.neighbour || !want("true") {
				continue
			}
			b.measureTrue(c, rep)
		}
	}
	// W5: a burst into a tiny ring buffer; drops must add up exactly.
	w5 := workload{"W5", dev(n5, 16, 0)}
	for rep := range max(3, reps/3) {
		if !want("W5") {
			break
		}
		b.measureW5(w5, rep, b.ringbuf)
		b.measureW5(w5, rep, 0)
	}
	if big > 0 {
		// Unfolded: the recorder itself must hold 10M events in bounded memory.
		b.measure(workload{"W1-10M", dev(big, 1, 0)}, configByName("ebpf-nofold"), 0)
	}
	b.runsCSV.Flush()

	sum := summarise(b.runs)
	if err := writeSummary(filepath.Join(b.out, "bench-results.csv"), sum); err != nil {
		fatal("%v", err)
	}
	printTable(os.Stdout, sum)
	printChecks(os.Stdout, b.runs)
	fmt.Println()
	printGoals(os.Stdout, b.runs)
}

func configByName(name string) config {
	i := slices.IndexFunc(configs, func(c config) bool { return c.name == name })
	return configs[i]
}

// execOnFloor runs argv untraced while do-nothing programs sit on the
// syscall tracepoints.
func (b *bench) execOnFloor(argv []string) (*result, error) {
	detach, err := floor.Attach()
	if err != nil {
		return nil, fmt.Errorf("floor programs: %v", err)
	}
	defer detach()
	return b.exec(argv)
}

// rotate returns cfgs starting at cfgs[rep mod n], forwards on even reps
// and backwards on odd ones: every config runs first in turn, and each runs
// after either neighbour.
func rotate(cfgs []config, rep int) []config {
	n := len(cfgs)
	out := make([]config, n)
	for i := range n {
		if rep%2 == 0 {
			out[i] = cfgs[(rep+i)%n]
		} else {
			out[i] = cfgs[((rep-i)%n+n)%n]
		}
	}
	return out
}

func (b *bench) cudatraceArgv(backend, report string) []string {
	a := []string{filepath.Join(b.bin, "cudatrace"), "-q", "--backend", backend, "--device-major", "1", "-o", report}
	return append(a, "--")
}

// noFold adds --no-fold before the "--" that ends a cudatraceArgv.
func noFold(argv []string) []string {
	return append(argv[:len(argv)-1:len(argv)-1], "--no-fold", "--")
}

// tracerBin is the cudatrace binary config c runs.
func (b *bench) tracerBin(c config) string {
	if c.base {
		return b.base
	}
	return filepath.Join(b.bin, "cudatrace")
}

func (b *bench) workloadArgv(w workload) []string {
	return append([]string{filepath.Join(b.bin, "workload")}, w.args...)
}

func (b *bench) reportPath(w, c string, rep int) string {
	b.seq++
	return filepath.Join(b.out, "reports", fmt.Sprintf("%03d-%s-%s-%d.json", b.seq, w, c, rep))
}

// measure runs workload w under config c once.
func (b *bench) measure(w workload, c config, rep int) {
	r := run{Workload: w.name, Config: c.name, Rep: rep}
	rep_ := b.reportPath(w.name, c.name, rep)
	argv := b.workloadArgv(w)
	var res *result
	var err error
	switch {
	case c.neighbour:
		res, err = b.runBeside(b.tracerBin(c), rep_, argv)
	case c.floor:
		res, err = b.execOnFloor(argv)
	case c.wrap == nil:
		res, err = b.exec(argv)
	default:
		res, err = b.exec(c.wrap(b, rep_, argv))
	}
	b.finish(&r, res, err, c.cudatrace, rep_)
}

func (b *bench) finish(r *run, res *result, err error, hasReport bool, reportPath string) {
	if err != nil {
		r.Note = err.Error()
	} else {
		r.W, r.WallNs, r.CPUNs, r.MaxRSSKB = res.line, res.wall.Nanoseconds(), res.cpu.Nanoseconds(), res.maxRSS
		if s := r.wi("start_unix_ns"); s > 0 {
			r.StartupNs = s - res.spawned.UnixNano()
		}
		r.OK = true
		r.Truth = r.wi("traced")
		if r.Config == "ebpf-other" || r.Config == "ebpf-other-base" {
			r.Truth = 0 // the workload is not the traced process
		}
		if hasReport {
			if err := r.readReport(reportPath, b.node, b.keepReports); err != nil {
				r.OK, r.Note = false, err.Error()
			} else if r.Captured+r.Dropped != r.Truth && r.Dropped == 0 {
				r.OK, r.Note = false, fmt.Sprintf("captured %d of %d events, none reported dropped", r.Captured, r.Truth)
			}
		}
	}
	if !r.OK {
		fmt.Fprintf(os.Stderr, "bench: %s/%s rep %d: %s\n", r.Workload, r.Config, r.Rep, r.Note)
	}
	b.runs = append(b.runs, *r)
	_ = b.runsCSV.Write(r.csv()) // errors surface in runsCSV.Error()
	b.runsCSV.Flush()
}

// measureTrue times /bin/true alone and under cudatrace.
func (b *bench) measureTrue(c config, rep int) {
	r := run{Workload: "true", Config: c.name, Rep: rep}
	argv := []string{"/bin/true"}
	path := b.reportPath("true", c.name, rep)
	if c.wrap != nil {
		argv = c.wrap(b, path, argv)
	}
	res, err := b.exec(argv)
	if !b.keepReports {
		_ = os.Remove(path) // a missing report is the run's failure, reported below
	}
	if err != nil {
		r.Note = err.Error()
	} else {
		r.OK, r.WallNs, r.CPUNs, r.MaxRSSKB = true, res.wall.Nanoseconds(), res.cpu.Nanoseconds(), res.maxRSS
	}
	b.runs = append(b.runs, r)
	_ = b.runsCSV.Write(r.csv()) // errors surface in runsCSV.Error()
}

// measureW5 runs the burst under eBPF with the given ring size (0: the
// default) and checks truth − captured = dropped.
func (b *bench) measureW5(w workload, rep, ring int) {
	cfg := "ebpf-nofold-ring" + strconv.Itoa(ring)
	if ring == 0 {
		cfg = "ebpf-nofold"
	}
	r := run{Workload: w.name, Config: cfg, Rep: rep}
	path := b.reportPath(w.name, cfg, rep)
	// Unfolded, so that every call goes through the ring.
	argv := noFold(b.cudatraceArgv("ebpf", path))
	if ring > 0 {
		argv = append(argv[:len(argv)-1], "--ringbuf-size", strconv.Itoa(ring), "--")
	}
	res, err := b.exec(append(argv, b.workloadArgv(w)...))
	b.finish(&r, res, err, true, path)
	// Exact accounting: every call the workload made, plus its process's
	// exec and exit events, was either delivered or counted as dropped.
	// (A dropped exec or exit is why truth − captured may be one short of
	// the drop count.)
	last := &b.runs[len(b.runs)-1]
	if want := last.Truth + 2; last.OK && last.Events+last.Dropped != want {
		last.OK = false
		last.Note = fmt.Sprintf("delivered %d + dropped %d = %d, want truth %d + exec + exit = %d",
			last.Events, last.Dropped, last.Events+last.Dropped, last.Truth, want)
		fmt.Fprintf(os.Stderr, "bench: W5: %s\n", last.Note)
	}
}

// readReport fills the event counts from a cudatrace JSON report. Captured
// counts the workload's own calls: opens of the node and ioctls (only
// ioctls on major-1 fds are recorded). Everything else (exec, exit) is
// stored verbatim, so subtracting it from the delivered total is exact.
func (r *run) readReport(path, node string, keep bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("no report: %v", err)
	}
	var rep struct {
		Trace struct {
			Events  int64    `json:"events"`
			Stored  int64    `json:"stored"`
			Dropped int64    `json:"dropped"`
			Notes   []string `json:"notes"`
		} `json:"trace"`
		Events []struct {
			Time int64  `json:"t_ns"`
			Kind string `json:"kind"`
			Path string `json:"path"`
		} `json:"events"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("report %s: %v", path, err)
	}
	r.HasReport = true
	r.Events, r.Dropped = rep.Trace.Events, rep.Trace.Dropped
	other := int64(0)
	for _, e := range rep.Events {
		if !(e.Kind == "ioctl" || e.Kind == "open" && e.Path == node) {
			other++
		}
	}
	for _, n := range rep.Trace.Notes {
		if strings.Contains(n, "counted but not stored") {
			other = 2 // beyond the store cap: only the workload's exec and exit
		}
	}
	r.Captured = r.Events - other
	if len(rep.Events) > 0 {
		r.FirstEventNs = rep.Events[0].Time
	}
	if !keep {
		_ = os.Remove(path) // tens of MB per repetition otherwise
	}
	return nil
}

type result struct {
	line    map[string]string
	spawned time.Time
	wall    time.Duration
	cpu     time.Duration
	maxRSS  int64
}

// exec runs argv and parses the workload's line from its stdout.
func (b *bench) exec(argv []string) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	res := &result{spawned: time.Now()}
	err := cmd.Run()
	res.wall = time.Since(res.spawned)
	if cmd.ProcessState != nil {
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		res.cpu = time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
		res.maxRSS = ru.Maxrss
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, lastLine(errb.String()))
	}
	res.line = parseLine(out.String())
	if argv[len(argv)-1] != "/bin/true" && res.line["mode"] == "" {
		return nil, fmt.Errorf("%s: no workload line in %q", argv[0], out.String())
	}
	return res, nil
}

// runBeside starts cudatrace on a sleeping process, waits until the sleeper
// runs (so the programs are attached), runs the workload untraced, then
// ends the sleeper and collects cudatrace's report and usage.
func (b *bench) runBeside(tracer, report string, argv []string) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	tr := exec.CommandContext(ctx, tracer, "-q", "--backend", "ebpf",
		"--device-major", "1", "-o", report, "--", "/bin/sleep", "3600")
	var errb strings.Builder
	tr.Stdout, tr.Stderr = io.Discard, &errb
	if err := tr.Start(); err != nil {
		return nil, err
	}
	sleeper, err := waitChild(tr.Process.Pid, "sleep", 10*time.Second)
	if err != nil {
		_ = tr.Process.Kill()
		_ = tr.Wait() // killed: its status says nothing
		return nil, fmt.Errorf("neighbour: %v: %s", err, lastLine(errb.String()))
	}
	res, werr := b.exec(argv)
	_ = syscall.Kill(sleeper, syscall.SIGKILL) // it may have exited already
	err = tr.Wait()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 128+int(syscall.SIGKILL)) {
		return nil, fmt.Errorf("neighbour cudatrace: %v: %s", err, lastLine(errb.String()))
	}
	if werr != nil {
		return nil, werr
	}
	// The tracer's own usage, not the workload's.
	ru := tr.ProcessState.SysUsage().(*syscall.Rusage)
	res.cpu += time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	res.maxRSS = max(res.maxRSS, ru.Maxrss)
	return res, nil
}

// waitChild waits until parent has a child running comm.
func waitChild(parent int, comm string, limit time.Duration) (int, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if st, err := procfs.ReadStat(pid); err == nil && st.PPID == parent && st.Comm == comm {
				return pid, nil
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return 0, fmt.Errorf("no %q child of %d after %v", comm, parent, limit)
}

func parseLine(out string) map[string]string {
	kv := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "bench-workload ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				kv[k] = v
			}
		}
	}
	return kv
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

var runHeader = []string{"workload", "config", "rep", "ok", "loop_ns", "ns_op", "traced", "untraced",
	"wall_ns", "cpu_ns", "workload_cpu_ns", "maxrss_kb", "startup_ns", "nvcsw", "events", "captured", "truth", "dropped",
	"first_event_ns", "note", "nvcsw_all", "spread_ns"}

func (r run) csv() []string {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	return []string{r.Workload, r.Config, strconv.Itoa(r.Rep), strconv.FormatBool(r.OK),
		r.W["loop_ns"], r.W["ns_op"], r.W["traced"], r.W["untraced"],
		i(r.WallNs), i(r.CPUNs), r.W["cpu_ns"], i(r.MaxRSSKB), i(r.StartupNs), r.W["nvcsw"],
		i(r.Events), i(r.Captured), i(r.Truth), i(r.Dropped), i(r.FirstEventNs), r.Note, r.W["nvcsw_all"], r.W["spread_ns"]}
}

func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	os.Exit(1)
}
