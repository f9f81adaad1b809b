package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/report"
)

// Exit codes. The launched command's own status passes through unchanged
// (128+N when it died of signal N), as with strace.
const (
	exitOK       = 0   // nothing failed (report, explain, attach)
	exitFailure  = 1   // cudatrace itself failed: no privileges, no BPF, I/O error
	exitUsage    = 2   // bad flags or arguments
	exitFound    = 3   // report/explain/attach: a failing NVIDIA call was found
	exitBadInput = 4   // the file is not a report or strace log, or holds nothing NVIDIA-related
	exitNoExec   = 126 // the command exists but cannot be executed
	exitNotFound = 127 // the command was not found
)

const usageText = `cudatrace: find the /dev/nvidia* call that makes CUDA initialisation fail.

Usage:
  cudatrace [flags] [--] COMMAND [ARGS...]   run COMMAND traced, then report
  cudatrace [flags] -p PID[,PID...]          attach to running processes until Ctrl-C or --duration
  cudatrace COMMAND-WORD ...                 one of the commands below

Commands:
%s
Tracing needs root (or CAP_BPF and CAP_PERFMON) for eBPF; without it the ptrace
backend traces processes you own. A launched COMMAND keeps its stdout: the
report goes to stderr. Attached, and with --format json, it goes to stdout.

Flags:
%s
Exit status:
  COMMAND's own  when launching: its exit code, or 128+N if signal N killed it
%s  Each command's own: cudatrace help COMMAND (doctor: 0, 3 FAIL, 5 WARN).

Examples:
  sudo cudatrace -- python3 -c 'import torch; torch.zeros(1).cuda()'
  sudo cudatrace -u nobody -o report.json -- ./train
  sudo cudatrace -p 4242 --duration 30s
  cudatrace report report.json --format markdown
  cudatrace help report
`

// writeMainHelp prints cudatrace --help.
func writeMainHelp(w io.Writer) error {
	var o options
	var exits strings.Builder
	for _, r := range traceExits {
		fmt.Fprintf(&exits, "  %-3d  %s\n", r.code, wrapIndent(r.text, 70, 7))
	}
	_, err := fmt.Fprintf(w, usageText, commandList(), flagUsages(newFlagSet(&o, io.Discard)), exits.String())
	return err
}

// traceExits are the trace form's exit statuses besides the launched
// COMMAND's own.
var traceExits = []exitRow{
	{exitOK, "attached: no NVIDIA call failed (and CUDA, where its return code was traced, started)"},
	exitRowFailure,
	exitRowUsage,
	{exitFound, "attached: a failing NVIDIA call was found, or CUDA's traced return code was an error"},
	{exitNoExec, "COMMAND is not executable"},
	{exitNotFound, "COMMAND not found"},
}

// outputPath is -o's value: an empty one is a usage error, not "no file".
type outputPath string

func (p *outputPath) String() string { return string(*p) }
func (p *outputPath) Type() string   { return "string" }
func (p *outputPath) Set(s string) error {
	if s == "" {
		return errors.New("an empty path: give a file name, or - for stdout")
	}
	*p = outputPath(s)
	return nil
}

// options holds every flag; registerFlags is the only place they are
// defined.
type options struct {
	output    string
	out       *report.Output // -o, opened by checkOutput before anything runs
	format    string
	color     string
	summary   bool
	user      string
	pids      []int
	duration  time.Duration
	backend   string
	allEvents bool
	redact    bool
	quiet     bool
	debug     bool
	version   bool
	help      bool
	follow    bool // strace's -f: always on

	// Hidden, for tests and benchmarks.
	procDevices  string
	deviceMajors []uint
	ringBufBytes int
	noFold       bool
}

func registerFlags(fs *pflag.FlagSet, o *options) {
	fs.VarP((*outputPath)(&o.output), "output", "o", "also write the JSON report to `FILE` (- for stdout); a device or FIFO is written through")
	completeWith(fs, "output", completeFile)
	fs.StringVar(&o.format, "format", "text", "print `FORMAT`: text, json, markdown or html (one self-contained file)")
	completeWords(fs, "format", "text json markdown html")
	fs.StringVar(&o.color, "color", "auto", "colour the text report: `WHEN` auto (a terminal, and NO_COLOR unset or empty), always or never")
	completeWords(fs, "color", colorWhens)
	fs.BoolVarP(&o.summary, "summary", "c", false, "print a summary instead of the timeline, as strace -c: calls and errors per node and call")
	fs.StringVarP(&o.user, "user", "u", "", "run COMMAND as `USER` or UID[:GID] (permission failures depend on who opens)")
	completeWith(fs, "user", completeUser)
	fs.VarP((*pidList)(&o.pids), "pid", "p", "attach to `PID` (repeatable, or comma-separated)")
	completeWith(fs, "pid", completePID)
	fs.DurationVar(&o.duration, "duration", 0, "stop tracing after `DURATION` (e.g. 30s); attached processes keep running")
	fs.StringVar(&o.backend, "backend", "auto", "tracer `NAME`: auto (eBPF, else ptrace), ebpf or ptrace")
	completeWords(fs, "backend", "auto ebpf ptrace")
	fs.BoolVarP(&o.follow, "follow", "f", true, "follow forks and threads, as strace -f (always on; accepted for habit)")
	fs.BoolVar(&o.allEvents, "all-events", false, "list every recorded call, not only the condensed timeline")
	fs.BoolVar(&o.redact, "redact", false, "replace user names, home paths and arguments in the report")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print only the verdict line")
	fs.BoolVar(&o.debug, "debug", false, "print diagnostics: the BPF verifier log on load failure; with eBPF, each start-up step's time, the syscall hook and each program's runs and ns per run")
	fs.BoolVarP(&o.version, "version", "V", false, "print the version and exit")
	fs.BoolVarP(&o.help, "help", "h", false, "show this help")

	fs.StringVar(&o.procDevices, "proc-devices", "/proc/devices", "read device majors from this file (testing)")
	fs.UintSliceVar(&o.deviceMajors, "device-major", nil, "treat this major as an NVIDIA device (testing)")
	fs.IntVar(&o.ringBufBytes, "ringbuf-size", 0, "eBPF ring buffer size in bytes (testing)")
	fs.BoolVar(&o.noFold, "no-fold", false, "send every call through the ring buffer, repeats too (benchmarks)")
	for _, name := range []string{"proc-devices", "device-major", "ringbuf-size", "no-fold"} {
		_ = fs.MarkHidden(name) // cannot fail: the flag was just defined
	}
}

func newFlagSet(o *options, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("cudatrace", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are printed once, by main
	fs.SetInterspersed(true)
	registerFlags(fs, o)
	fs.Usage = func() { _ = writeMainHelp(stderr) }
	return fs
}

// flagUsages lists the visible flags, aligned, without pflag's
// "[=true|false]" decoration on booleans.
func flagUsages(fs *pflag.FlagSet) string {
	type row struct{ left, usage string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		left := "      --" + f.Name
		if f.Shorthand != "" {
			left = "  -" + f.Shorthand + ", --" + f.Name
		}
		name, usage := pflag.UnquoteUsage(f)
		if f.Value.Type() != "bool" && name != "" {
			left += " " + name
		}
		if d := f.DefValue; f.Value.Type() != "bool" && d != "" && d != "0" && d != "0s" && d != "[]" {
			usage += fmt.Sprintf(" (default %q)", d)
		}
		rows = append(rows, row{left, usage})
		width = max(width, len(left))
	})
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "%-*s   %s\n", width, r.left, r.usage)
	}
	return b.String()
}

// pidList is -p: PIDs, repeatable or comma-separated, with an error a
// person can read (pflag's own int list says "strconv.ParseInt: ...").
type pidList []int

func (p *pidList) String() string {
	parts := make([]string, len(*p))
	for i, pid := range *p {
		parts[i] = strconv.Itoa(pid)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func (p *pidList) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return errors.New("not a process ID (give numbers: -p 4242 or -p 4242,4243)")
		}
		*p = append(*p, pid)
	}
	return nil
}

func (p *pidList) Type() string { return "pids" }
