package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	if len(argv) == 0 && o.user != "" {
		return fail(exitUsage, "-u applies to a launched command, not to -p")
	}
	spec := tracer.Spec{
		Argv:            argv,
		PIDs:            o.pids,
		Duration:        o.duration,
		RingBufferBytes: o.ringBufBytes,
		Debug:           o.debug,
		DeferRelease:    true, // the report prints while the kernel detaches
	}
	if err := diagnose.ResolveTarget(&spec); err != nil {
		return targetError(err)
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

// targetExits maps what diagnose.ResolveTarget found wrong with the target
// to its exit status.
var targetExits = map[diagnose.TargetProblem]int{
	diagnose.CommandNotFound:      exitNotFound,
	diagnose.CommandNotExecutable: exitNoExec,
	diagnose.InvalidPID:           exitUsage,
	diagnose.NoSuchProcess:        exitFailure,
}

func targetError(err error) error {
	code := exitFailure
	if te, ok := errors.AsType[*diagnose.TargetError](err); ok {
		code = targetExits[te.Problem]
	}
	return fail(code, "%v", err)
}

func traceError(err error, o *options) error {
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return fail(exitFailure, "%s", errorLine(err, o.debug))
}

// errorLine is err's first line, saying --debug shows the rest, unless
// debug.
func errorLine(err error, debug bool) string {
	msg := err.Error()
	if !debug && strings.Contains(msg, "\n") {
		msg = msg[:strings.IndexByte(msg, '\n')] + " (--debug shows more)"
	}
	return msg
}

// statusProgress shows a diagnosis's progress on the status line.
type statusProgress struct{ s *statusLine }

func (p statusProgress) Start()                { p.s.start() }
func (p statusProgress) Event(e *tracer.Event) { p.s.count(e) }
func (p statusProgress) Stop()                 { p.s.stop() }
