package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/cudatrace/cudatrace/diagnose"
	"github.com/cudatrace/cudatrace/tracer"
)

// traceCommand runs or attaches, then reports.
func traceCommand(argv []string, o *options, stdout, stderr io.Writer) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if err := checkColor(o.color); err != nil {
		return err
	}
	if err := checkOutput(o, stderr); err != nil {
		return err
	}
	switch {
	case len(argv) == 0 && len(o.pids) == 0:
		return fail(exitUsage, "nothing to trace: give a command after '--', or -p PID\nRun 'cudatrace --help' for usage.")
	case len(argv) > 0 && len(o.pids) > 0:
		return fail(exitUsage, "give either a command or -p PID, not both")
	case o.duration < 0:
		return fail(exitUsage, "--duration %v: give a positive duration, e.g. 30s", o.duration)
	}
	spec := tracer.Spec{
		PIDs:            o.pids,
		Duration:        o.duration,
		RingBufferBytes: o.ringBufBytes,
		Debug:           o.debug,
		DeferRelease:    true, // the report prints while the kernel detaches
	}
	if len(argv) > 0 {
		path, err := exec.LookPath(argv[0])
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				return fail(exitNotFound, "%s: command not found", argv[0])
			}
			return fail(exitNoExec, "%s: %v", argv[0], errors.Unwrap(err))
		}
		spec.Argv = append([]string{path}, argv[1:]...)
		spec.Argv[0] = path
	} else if o.user != "" {
		return fail(exitUsage, "-u applies to a launched command, not to -p")
	}
	for _, pid := range o.pids {
		if pid <= 0 {
			return fail(exitUsage, "invalid PID %d", pid)
		}
		if pid == os.Getpid() {
			return fail(exitUsage, "cannot trace cudatrace itself (PID %d)", pid)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return fail(exitFailure, "no such process: %d", pid)
		}
	}
	if o.user != "" {
		cred, err := diagnose.LookupUser(o.user)
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
		spec.Cred = cred
	}
	if err := diagnose.NVIDIASpec(&spec, o.procDevices, o.deviceMajors, !o.noFold); err != nil {
		return fail(exitFailure, "%v", err)
	}

	notice := func(msg string) { fmt.Fprintf(stderr, "cudatrace: %s\n", msg) }
	backend, err := diagnose.ChooseBackend(o.backend, notice)
	if err != nil {
		if errors.Is(err, diagnose.ErrUnknownBackend) {
			return fail(exitUsage, "%v", err)
		}
		return fail(exitFailure, "%v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSignals := handleSignals(len(spec.Argv) > 0, cancel)
	defer stopSignals()

	var progress diagnose.Progress
	if status := newStatusLine(stderr, statusTarget(spec.Argv, spec.PIDs), len(spec.PIDs) > 0); status != nil {
		progress = statusProgress{status}
	}
	tracing := time.Now()
	rep, release, err := diagnose.Trace(ctx, diagnose.Options{
		Spec:            spec,
		Backend:         backend,
		Fallback:        o.backend == "auto",
		ProcDevicesPath: o.procDevices,
		User:            o.user,
		Version:         toolVersion(),
		Progress:        progress,
		Notice:          notice,
	})
	if err != nil {
		return traceError(err, o)
	}
	emitting := time.Now()
	err = emit(rep, o, stdout, stderr, len(spec.Argv) > 0)
	emitted := time.Now()
	if ferr := release(); ferr != nil {
		fmt.Fprintf(stderr, "cudatrace: cleanup: %v\n", ferr)
	}
	if o.debug {
		ms := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
		fmt.Fprintf(stderr, "cudatrace: timing: main to trace %v, trace and report %v, print %v, release after print %v\n",
			ms(tracing.Sub(mainStarted)), ms(emitting.Sub(tracing)), ms(emitted.Sub(emitting)), ms(time.Since(emitted)))
	}
	var ee *exitError
	if exit := rep.Target.Exit; exit != nil && (err == nil || errors.As(err, &ee) && (ee.code == exitFound || ee.saveFailed || ee.printFailed)) {
		// A launched command's own status wins, as with strace.
		return &exitError{code: exit.ShellCode()}
	}
	return err
}

func checkFormat(f string) error {
	switch f {
	case "text", "json", "markdown", "md", "html":
		return nil
	}
	return fail(exitUsage, "unknown format %q: use text, json, markdown or html", f)
}

func traceError(err error, o *options) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	msg := err.Error()
	if !o.debug && strings.Contains(msg, "\n") {
		msg = msg[:strings.IndexByte(msg, '\n')] + " (--debug shows more)"
	}
	return fail(exitFailure, "%s", msg)
}

// statusProgress shows a diagnosis's progress on the status line.
type statusProgress struct{ s *statusLine }

func (p statusProgress) Start()                { p.s.start() }
func (p statusProgress) Event(e *tracer.Event) { p.s.count(e) }
func (p statusProgress) Stop()                 { p.s.stop() }
