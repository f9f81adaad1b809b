package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/doctor"
	"github.com/cudatrace/cudatrace/render"
)

// exitWarn is doctor's status when the worst check is a WARN; a FAIL exits
// with exitFound (3).
const exitWarn = 5

const doctorAbout = `Checks the NVIDIA device nodes, the device cgroup policy (emulated, v1 and
v2), every LXC/Proxmox/incus container config and CDI spec on this host, the driver (modules,
versions, firmware, fabric manager, kernel log) and the environment; prints PASS/WARN/FAIL with
a fix for each problem. Unprivileged it checks what it can; the rest says SKIP and why. It
changes nothing.`

var doctorExits = []exitRow{
	{exitOK, "every check passed (or was skipped)"},
	{exitFailure, "doctor itself failed (the subject's root or /etc/passwd could not be read for -u)"},
	{exitUsage, "usage error (also: no such process, cgroup or user)"},
	{exitFound, "at least one check FAILed: CUDA cannot start until it is fixed"},
	{exitWarn, "no FAIL, but at least one WARN"},
}

// doctorFlags holds doctor's flags; doctorFlagSet is where they are
// defined.
type doctorFlags struct {
	user, cgroup, format, color string
	pid                         int
	help                        bool
	procDevices, smi, hostRoot  string
}

func doctorFlagSet(v *doctorFlags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("cudatrace doctor", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.StringVarP(&v.user, "user", "u", "", "check node permissions for `USER` (name, UID or UID:GID) instead of the subject's own")
	completeWith(fs, "user", completeUser)
	fs.IntVarP(&v.pid, "pid", "p", 0, "check the cgroup, nodes and environment of process `PID`")
	completeWith(fs, "pid", completePID)
	fs.StringVar(&v.cgroup, "cgroup", "", "check the device policy of cgroup `PATH` (e.g. /lxc/101 or /sys/fs/cgroup/lxc/101)")
	fs.StringVar(&v.format, "format", "text", "print `FORMAT`: text, json or markdown")
	completeWords(fs, "format", "text json markdown")
	fs.StringVar(&v.color, "color", "auto", "colour the text output: `WHEN` auto (a terminal, and NO_COLOR unset or empty), always or never")
	completeWords(fs, "color", colorWhens)
	fs.StringVar(&v.smi, "nvidia-smi", "", "ask nvidia-smi at `PATH` for compute and persistence mode (- asks nothing)")
	completeWith(fs, "nvidia-smi", completeFile)
	fs.BoolVarP(&v.help, "help", "h", false, "show this help")
	fs.StringVar(&v.procDevices, "proc-devices", "", "read device majors from this file (testing)")
	fs.StringVar(&v.hostRoot, "host-root", "", "read container configs and CDI specs under this root (testing)")
	for _, n := range []string{"proc-devices", "host-root"} {
		_ = fs.MarkHidden(n) // the flags were just defined
	}
	return fs
}

// doctorCommand parses doctor's flags, runs doctor.Host and prints the
// result; it returns the exit status.
func doctorCommand(args []string, stdout, stderr io.Writer) int {
	var v doctorFlags
	fs := doctorFlagSet(&v)
	if err := fs.Parse(args); err != nil || v.help {
		if v.help || err == pflag.ErrHelp {
			return finish(writeSubHelp(stdout, lookupSubcommand("doctor")), stderr)
		}
		fmt.Fprintf(stderr, "cudatrace doctor: %v\nRun 'cudatrace doctor --help' for usage.\n", err)
		return exitUsage
	}
	user, cgroup, format, pid := v.user, v.cgroup, v.format, v.pid
	if err := checkColor(v.color); err != nil {
		fmt.Fprintf(stderr, "cudatrace doctor: %v\n", err)
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
	f := render.Format(format)
	if f != render.FormatText && f != render.FormatJSON && f != render.FormatMarkdown {
		fmt.Fprintf(stderr, "cudatrace doctor: unknown format %q (text, json or markdown)\n", format)
		return exitUsage
	}
	res, err := doctor.Host(doctor.Options{PID: pid, Cgroup: cgroup, User: user,
		HostRoot: v.hostRoot, ProcDevicesPath: v.procDevices, NvidiaSMI: v.smi})
	if err != nil {
		fmt.Fprintf(stderr, "cudatrace doctor: %v\n", err)
		if _, wrong := errors.AsType[*doctor.RequestError](err); wrong {
			return exitUsage
		}
		return exitFailure
	}
	res.Tool = toolVersion()
	ro := render.Options{}
	ro.Width, ro.Color = terminalStyle(stdout, v.color)
	if err := render.Doctor(stdout, res, f, ro); err != nil {
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
