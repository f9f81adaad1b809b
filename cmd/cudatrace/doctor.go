package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/doctor"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
)

// exitWarn is doctor's status when the worst check is a WARN; a FAIL exits
// with exitFound (3).
const exitWarn = 5

const doctorUsage = `Usage: cudatrace doctor [-u USER] [--pid PID | --cgroup PATH]

Check, without running anything, whether CUDA can start here. Checks the NVIDIA device nodes, the device cgroup policy (emulated, v1 and
v2), every LXC/Proxmox/incus container config and CDI spec on this host,
the driver (modules, versions, firmware, fabric manager, kernel log) and
the environment. Unprivileged it checks what it can; the rest says SKIP
and why. It changes nothing.

Flags:
%s
Exit status:
  0  every check passed (or was skipped)
  1  doctor itself failed
  2  usage error
  3  at least one check FAILed: CUDA cannot start until it is fixed
  5  no FAIL, but at least one WARN
`

// doctorCommand parses doctor's flags, surveys the host and prints the
// result; it returns the exit status.
func doctorCommand(args []string, stdout, stderr io.Writer) int {
	var (
		user, cgroup, format string
		pid                  int
		help                 bool
		procDevices, smi     string
		hostRoot             string
	)
	fs := pflag.NewFlagSet("cudatrace doctor", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVarP(&user, "user", "u", "", "check node permissions for `USER` (name, UID or UID:GID) instead of the subject's own")
	fs.IntVarP(&pid, "pid", "p", 0, "check the cgroup, nodes and environment of process `PID`")
	fs.StringVar(&cgroup, "cgroup", "", "check the device policy of cgroup `PATH` (e.g. /lxc/101 or /sys/fs/cgroup/lxc/101)")
	fs.StringVarP(&format, "format", "f", "text", "print `FORMAT`: text, json or markdown")
	fs.BoolVarP(&help, "help", "h", false, "show this help")
	fs.StringVar(&procDevices, "proc-devices", "", "read device majors from this file (testing)")
	fs.StringVar(&smi, "nvidia-smi", "", "nvidia-smi to ask for compute and persistence mode; - asks nothing")
	fs.StringVar(&hostRoot, "host-root", "", "read container configs and CDI specs under this root (testing)")
	for _, n := range []string{"proc-devices", "host-root"} {
		_ = fs.MarkHidden(n) // the flags were just defined
	}
	if err := fs.Parse(args); err != nil || help {
		if help || err == pflag.ErrHelp {
			fmt.Fprintf(stdout, doctorUsage, flagUsages(fs))
			return exitOK
		}
		fmt.Fprintf(stderr, "cudatrace doctor: %v\nRun 'cudatrace doctor --help' for usage.\n", err)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "cudatrace doctor: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case pid < 0:
		fmt.Fprintf(stderr, "cudatrace doctor: --pid %d is not a process ID\n", pid)
		return exitUsage
	case pid > 0 && cgroup != "":
		fmt.Fprintln(stderr, "cudatrace doctor: give --pid or --cgroup, not both")
		return exitUsage
	}
	if format == "md" {
		format = "markdown"
	}
	f := report.Format(format)
	if f != report.FormatText && f != report.FormatJSON && f != report.FormatMarkdown {
		fmt.Fprintf(stderr, "cudatrace doctor: unknown format %q (text, json or markdown)\n", format)
		return exitUsage
	}
	if pid > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			fmt.Fprintf(stderr, "cudatrace doctor: no process %d\n", pid)
			return exitUsage
		}
	}
	if cgroup != "" && strings.Contains(cgroup, "..") {
		fmt.Fprintf(stderr, "cudatrace doctor: --cgroup %q: .. is not allowed\n", cgroup)
		return exitUsage
	}

	sv := snapshot.SurveyHost(snapshot.SurveyOptions{PID: pid, Cgroup: cgroup, User: user,
		HostRoot: hostRoot, ProcDevicesPath: procDevices, NvidiaSMI: smi})
	if user != "" && sv.User == nil {
		fmt.Fprintf(stderr, "cudatrace doctor: -u %s: no such user\n", doctor.Escape(user))
		return exitUsage
	}
	res := doctor.Run(sv)
	res.Tool = toolVersion()
	ro := report.RenderOptions{}
	if file, ok := stdout.(*os.File); ok {
		ro.Width = terminalWidth(file)
		ro.Color = ro.Width > 0 && wantColor(os.Getenv)
	}
	if err := report.RenderDoctor(stdout, res, f, ro); err != nil {
		fmt.Fprintf(stderr, "cudatrace doctor: print: %v\n", err)
		return exitFailure
	}
	switch res.Status {
	case doctor.Fail:
		return exitFound
	case doctor.Warn:
		return exitWarn
	}
	return exitOK
}
