package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/watch"
)

const watchAbout = `Watch the whole host: every process that opens an NVIDIA device node or a
CUDA/NVML library is followed from that open on (with the processes it forks). When CUDA or
NVML fails in one, or one of its device calls fails, its snapshot is taken at once and it is
diagnosed as a trace would be; at its exit one line is printed on stdout: JSON (keys in
docs/watch.md), or a readable line (--format text, the default on a terminal). Processes in
which nothing failed are counted, and printed only with -v. Runs until SIGTERM or SIGINT (or
--duration), then prints the diagnoses of processes that failed and still run, and exits 0.
Needs the eBPF backend (root, or CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN).

The filters are decided at a process's first event, before any snapshot work: --cgroup,
--container and --pod-uid from its cgroup path, --comm from its name (a process is watched from
its first event under that name). The kernel still follows every process; what the filters
leave out is neither recorded nor reported.`

var watchExits = []exitRow{
	{exitOK, "stopped by SIGTERM, SIGINT or --duration"},
	{exitFailure, "watch failed (eBPF unavailable, no privileges, the metrics server failed)"},
	{exitUsage, "usage error (also the ptrace backend: host-wide tracing needs eBPF; --report-dir not a writable directory; --metrics unparsable or in use)"},
}

type watchFlags struct {
	json, verbose, help, debug          bool
	format, reportDir, metrics, backend string
	reportKeep, maxProcesses            int
	duration                            time.Duration
	filter                              watch.Filter
	procDevices                         string
	deviceMajors                        []uint
	ringBufBytes                        int
}

func watchFlagSet(f *watchFlags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("cudatrace watch", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVar(&f.format, "format", "", "print `FORMAT`: json (lines) or text (default: text on a terminal, else json)")
	completeWords(fs, "format", "json text")
	fs.BoolVar(&f.json, "json", false, "the same as --format json")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "also print the processes in which nothing failed")
	fs.StringVar(&f.reportDir, "report-dir", "", "keep each diagnosis's full JSON report in `DIR` as REPORT_ID.json (cudatrace report renders it)")
	fs.IntVar(&f.reportKeep, "report-keep", watch.DefaultReportKeep, "keep the newest `N` reports in --report-dir, removing older ones")
	completeWith(fs, "report-dir", completeDir)
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics on `ADDR` (HOST:PORT or :PORT) at /metrics")
	fs.DurationVar(&f.duration, "duration", 0, "stop after `DURATION` (e.g. 1h); default: until SIGTERM or SIGINT")
	fs.StringVar(&f.filter.CgroupPrefix, "cgroup", "", "watch only processes whose cgroup path is `PATH` or below it")
	fs.StringVar(&f.filter.Container, "container", "", "watch only the container whose ID starts with `ID`")
	fs.StringVar(&f.filter.PodUID, "pod-uid", "", "watch only the Kubernetes pod `UID`")
	fs.StringVar(&f.filter.Comm, "comm", "", "watch only processes named `NAME` (their comm)")
	fs.IntVar(&f.maxProcesses, "max-processes", watch.DefaultMaxProcesses, "follow at most `N` processes at once; more are counted as refused")
	fs.StringVar(&f.backend, "backend", "auto", "tracer `NAME`: auto or ebpf (ptrace cannot trace a whole host)")
	fs.BoolVar(&f.debug, "debug", false, "print diagnostics: the BPF verifier log on load failure, each process as it is followed")
	fs.BoolVarP(&f.help, "help", "h", false, "show this help")
	fs.StringVar(&f.procDevices, "proc-devices", "/proc/devices", "read device majors from this file (testing)")
	fs.UintSliceVar(&f.deviceMajors, "device-major", nil, "treat this major as an NVIDIA device (testing)")
	fs.IntVar(&f.ringBufBytes, "ringbuf-size", 0, "eBPF ring buffer size in bytes (testing)")
	// --backend is only for habit: ptrace is refused with a reason.
	for _, n := range []string{"backend", "proc-devices", "device-major", "ringbuf-size"} {
		_ = fs.MarkHidden(n) // the flags were just defined
	}
	return fs
}

// watchCommand parses watch's flags, checks them all before anything
// starts, watches (watch.Host) until a signal or --duration, and prints
// the summary.
func watchCommand(args []string, stdout, stderr io.Writer) int {
	var f watchFlags
	fs := watchFlagSet(&f)
	if err := fs.Parse(args); err != nil || f.help {
		if f.help || errors.Is(err, pflag.ErrHelp) {
			return finish(writeSubHelp(stdout, lookupSubcommand("watch")), stderr)
		}
		fmt.Fprintf(stderr, "cudatrace watch: %v\nRun 'cudatrace watch --help' for usage.\n", err)
		return exitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "cudatrace watch: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q: watch traces the whole host", fs.Arg(0))
	case f.format != "" && f.format != "json" && f.format != "text":
		return usage("unknown format %q: use json or text", f.format)
	case f.json && f.format == "text":
		return usage("--json and --format text disagree")
	case f.backend == "ptrace":
		return usage("--backend ptrace: host-wide tracing needs the eBPF backend")
	case f.backend != "auto" && f.backend != "ebpf":
		return usage("unknown backend %q: use auto or ebpf", f.backend)
	case f.maxProcesses < 1:
		return usage("--max-processes %d: give at least 1", f.maxProcesses)
	case f.duration < 0:
		return usage("--duration %s is negative", f.duration)
	case f.filter.CgroupPrefix != "" && !strings.HasPrefix(f.filter.CgroupPrefix, "/"):
		return usage("--cgroup %q: give the path as /proc/PID/cgroup shows it (from /)", f.filter.CgroupPrefix)
	}
	c := watch.Config{
		Filter: f.filter, Verbose: f.verbose, Out: stdout, MaxProcesses: f.maxProcesses,
		Duration: f.duration, Debug: f.debug, ReportDir: f.reportDir, ReportKeep: f.reportKeep,
		Metrics: f.metrics, ProcDevicesPath: f.procDevices, DeviceMajors: f.deviceMajors,
		RingBufferBytes: f.ringBufBytes, Version: toolVersion(),
		Notice: func(msg string) { fmt.Fprintf(stderr, "cudatrace watch: %s\n", msg) },
		Ready: func(s tracer.LiveStats) {
			fmt.Fprintf(stderr, "cudatrace watch: watching this host (eBPF, syscall hook %s)\n", s.SyscallHook)
		},
	}
	switch {
	case f.json || f.format == "json":
		c.JSON = true
	case f.format == "text":
	default:
		if file, ok := stdout.(*os.File); !ok || terminalWidth(file) == 0 {
			c.JSON = true // a pipe or file: JSON lines unless --format text
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	sum, err := watch.Host(ctx, c)
	if err != nil {
		if _, wrong := errors.AsType[*watch.ConfigError](err); wrong {
			return usage("%v", err)
		}
		fmt.Fprintf(stderr, "cudatrace watch: %s\n", errorLine(err, f.debug))
		return exitFailure
	}
	fmt.Fprintf(stderr, "cudatrace watch: %d processes watched: %d diagnosed, %d healthy, %d still running; %d refused (--max-processes), %d filtered out; %d events lost\n",
		sum.Processes, sum.Diagnosed, sum.Healthy, sum.Unfinished, sum.Refused, sum.Filtered, sum.Dropped)
	if sum.Dropped > 0 {
		fmt.Fprintf(stderr, "cudatrace watch: %d lines say incomplete: every process that ran while events were lost, or was first seen before the next statistics interval with no new loss\n", sum.Incomplete)
	}
	if sum.Unprinted > 0 {
		fmt.Fprintf(stderr, "cudatrace watch: %d healthy processes were not printed (-v): the diagnosis queue was full\n", sum.Unprinted)
	}
	if sum.Shed > 0 {
		fmt.Fprintf(stderr, "cudatrace watch: %d processes in which something failed were not diagnosed: the %v drain after the end ran out\n",
			sum.Shed, watch.DefaultDrainTimeout)
	}
	return exitOK
}
