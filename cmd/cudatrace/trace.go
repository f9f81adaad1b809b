package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/internal/procfs"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	ebpftrace "github.com/cudatrace/cudatrace/tracer/ebpf"
	ptracetrace "github.com/cudatrace/cudatrace/tracer/ptrace"
)

// traceCommand runs or attaches, then reports.
func traceCommand(argv []string, o *options, stdout, stderr io.Writer) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	switch {
	case len(argv) == 0 && len(o.pids) == 0:
		return fail(exitUsage, "nothing to trace: give a command after '--', or -p PID\nRun 'cudatrace --help' for usage.")
	case len(argv) > 0 && len(o.pids) > 0:
		return fail(exitUsage, "give either a command or -p PID, not both")
	}
	spec := tracer.Spec{
		PIDs:            o.pids,
		Duration:        o.duration,
		RingBufferBytes: o.ringBufBytes,
		Debug:           o.debug,
		DeferRelease:    true, // the report prints while the kernel detaches
	}
	if !o.noFold {
		// Repeats the report would only count need not reach it.
		spec.FoldIoctlsAfter, spec.FoldCallsAfter = report.IoctlSamplePerSite, report.SamplePerSite
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
		cred, err := lookupUser(o.user)
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
		spec.Cred = cred
	}
	procDevices, err := os.ReadFile(o.procDevices)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(exitFailure, "read %s: %v", o.procDevices, err)
	}
	majors := snapshot.ParseProcDevices(string(procDevices))
	spec.DeviceMajors = nvidiaMajors(majors, o.deviceMajors)

	backend, err := chooseBackend(o.backend, stderr)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSignals := handleSignals(len(spec.Argv) > 0, cancel)
	defer stopSignals()

	rec := report.NewRecorder()
	snapper := &failureSnapshot{opts: snapshotOptions(o)}
	sink := tracer.SinkFunc(func(e *tracer.Event) {
		rec.Event(e)
		if e.Failed() && e.Kind == tracer.KindOpen && strings.HasPrefix(e.Path, "/dev/nvidia") {
			snapper.trigger(e.PID, e.Path)
		}
	})
	started := time.Now()
	res, err := runBackend(ctx, backend, o.backend == "auto", spec, sink, func() bool { return rec.Seen == 0 }, stderr)
	if err != nil {
		return traceError(err, o)
	}
	rec.AddFolded(res.Folded)
	snapOpts := snapper.opts
	snapOpts.PID = firstPID(spec, rec.Events)
	snapOpts.ExtraPaths = touchedPaths(rec.Events)
	snap := snapper.wait()
	if snap == nil {
		snap = snapshot.Collect(snapOpts)
	}
	fillCred(snap, spec.Cred)

	rep := buildReport(spec, res, rec, snap, started)
	rep.Target.User = o.user
	err = emit(rep, o, stdout, stderr, true)
	if res.Finish != nil {
		if ferr := res.Finish(); ferr != nil {
			fmt.Fprintf(stderr, "cudatrace: cleanup: %v\n", ferr)
		}
	}
	var ee *exitError
	if res.Exit != nil && (err == nil || errors.As(err, &ee) && ee.code == exitFound) {
		// A launched command's own status wins, as with strace.
		return &exitError{code: res.Exit.ShellCode()}
	}
	return err
}

func checkFormat(f string) error {
	switch f {
	case "text", "json", "markdown", "md":
		return nil
	}
	return fail(exitUsage, "unknown format %q: use text, json or markdown", f)
}

func lookupUser(name string) (*tracer.Cred, error) {
	u, err := user.Lookup(name)
	if err != nil {
		if u2, err2 := user.LookupId(name); err2 == nil {
			u = u2
		} else {
			return nil, fmt.Errorf("unknown user %q", name)
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	cred := &tracer.Cred{UID: uint32(uid), GID: uint32(gid), User: u.Username}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(n))
			}
		}
	}
	return cred, nil
}

// nvidiaMajors picks the majors whose fds count as NVIDIA devices. 195 is
// fixed by the driver, so it is included even when nothing is registered.
func nvidiaMajors(devs []snapshot.DriverMajor, extra []uint) []uint32 {
	seen := map[uint32]bool{195: true}
	out := []uint32{195}
	add := func(m uint32) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	for _, d := range devs {
		if strings.HasPrefix(d.Name, "nvidia") {
			add(d.Major)
		}
	}
	for _, m := range extra {
		add(uint32(m))
	}
	return out
}

// chooseBackend implements --backend. auto says in one line why it falls
// back; an explicit choice fails loudly.
func chooseBackend(name string, stderr io.Writer) (tracer.Backend, error) {
	switch name {
	case "ebpf":
		if err := ebpftrace.Probe(); err != nil {
			return nil, fail(exitFailure, "eBPF backend unavailable: %v", err)
		}
		return ebpftrace.New(), nil
	case "ptrace":
		if err := ptracetrace.Probe(); err != nil {
			return nil, fail(exitFailure, "ptrace backend unavailable: %v", err)
		}
		return ptracetrace.New(), nil
	case "auto":
		ebpfErr := ebpftrace.Probe()
		if ebpfErr == nil {
			return ebpftrace.New(), nil
		}
		if err := ptracetrace.Probe(); err != nil {
			return nil, fail(exitFailure, "cannot trace: eBPF: %v; ptrace: %v", ebpfErr, err)
		}
		fmt.Fprintf(stderr, "cudatrace: eBPF unavailable (%v); using ptrace\n", ebpfErr)
		return ptracetrace.New(), nil
	}
	return nil, fail(exitUsage, "unknown backend %q: use auto, ebpf or ptrace", name)
}

// runBackend runs backend; with fallback (--backend auto), an eBPF backend
// that passed its probe but could not load (an older kernel, the verifier)
// gives way to ptrace, provided nothing was traced yet: the target has not
// run, so ptrace can still start it from the beginning.
func runBackend(ctx context.Context, backend tracer.Backend, fallback bool, spec tracer.Spec, sink tracer.Sink, untouched func() bool, stderr io.Writer) (*tracer.Result, error) {
	res, err := backend.Run(ctx, spec, sink)
	if err == nil || !fallback || backend.Name() != "ebpf" || !errors.Is(err, tracer.ErrUnavailable) || !untouched() {
		return res, err
	}
	if perr := ptracetrace.Probe(); perr != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "cudatrace: eBPF unavailable (%v); using ptrace\n", err)
	return ptracetrace.New().Run(ctx, spec, sink)
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

// handleSignals keeps cudatrace alive on Ctrl-C so the report still
// prints. A launched command gets the signal from the terminal itself (same
// process group); a signal sent to cudatrace alone is forwarded to its
// children. An attach is stopped (detached) instead.
func handleSignals(launched bool, cancel context.CancelFunc) func() {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	done := make(chan struct{})
	go func() {
		interrupts := 0
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				if !launched {
					cancel()
					continue
				}
				s := sig.(syscall.Signal)
				if s == syscall.SIGINT {
					interrupts++
					if interrupts >= 3 {
						s = syscall.SIGKILL // the target ignores Ctrl-C
					} else if terminalDelivered() {
						continue
					}
				}
				for _, pid := range childPIDs() {
					syscall.Kill(pid, s)
				}
			}
		}
	}()
	return func() { signal.Stop(ch); close(done) }
}

// terminalDelivered reports whether a SIGINT came from our controlling
// terminal to our whole foreground process group (the target got it too).
func terminalDelivered() bool {
	pgrp, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pgrp == syscall.Getpgrp()
}

// childPIDs lists cudatrace's direct children (the launched target).
func childPIDs() []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.PPID == self {
			out = append(out, pid)
		}
	}
	return out
}

// failureSnapshot takes the system snapshot once, at the first failed
// device open, while the failing process still exists. It runs beside the
// event stream so the tracer never stalls.
type failureSnapshot struct {
	opts snapshot.Options
	once sync.Once
	done chan struct{}
	snap *snapshot.Snapshot
}

func (f *failureSnapshot) trigger(pid int, path string) {
	f.once.Do(func() {
		f.done = make(chan struct{})
		opts := f.opts
		opts.PID = pid
		opts.ExtraPaths = []string{path} // described even if it is missing
		go func() {
			defer close(f.done)
			snap := snapshot.Collect(opts)
			// A target that exited while it was being read leaves a snapshot
			// that is part its view, part cudatrace's (mounts or cgroups
			// lost on the way): drop it, and the exit snapshot is taken
			// instead.
			if exited(pid) {
				snap = nil
			}
			f.snap = snap
		}()
	})
}

// exited reports whether pid is a zombie or gone.
func exited(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err != nil || st.Gone()
}

func (f *failureSnapshot) wait() *snapshot.Snapshot {
	triggered := false
	f.once.Do(func() {}) // no trigger after this point
	if f.done != nil {
		triggered = true
		<-f.done
	}
	if !triggered {
		return nil
	}
	return f.snap
}

func snapshotOptions(o *options) snapshot.Options {
	return snapshot.Options{
		ProcDevicesPath: o.procDevices,
		KmsgSince:       time.Now(),
	}
}

// firstPID is the process whose view the exit snapshot takes: the attached
// one, or the first traced process.
func firstPID(spec tracer.Spec, events []tracer.Event) int {
	if len(spec.PIDs) > 0 {
		return spec.PIDs[0]
	}
	if len(events) > 0 {
		return events[0].PID
	}
	return 0
}

// touchedPaths are the device paths the trace touched, so the snapshot
// describes them even when they are missing.
func touchedPaths(events []tracer.Event) []string {
	seen := map[string]bool{}
	var out []string
	for i := range events {
		p := events[i].Path
		if strings.HasPrefix(p, "/dev/") && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// fillCred records the -u credentials when the target was already gone at
// snapshot time (its status unread: no comm, though its PID is kept).
func fillCred(s *snapshot.Snapshot, c *tracer.Cred) {
	if c == nil || s.Process.Comm != "" {
		return
	}
	s.Process.UID, s.Process.GID, s.Process.Groups, s.Process.User = c.UID, c.GID, c.Groups, c.User
}

func buildReport(spec tracer.Spec, res *tracer.Result, rec *report.Recorder, snap *snapshot.Snapshot, started time.Time) *report.Report {
	rep := &report.Report{
		Schema:  report.SchemaVersion,
		Tool:    report.Tool{Name: "cudatrace", Version: toolVersion()},
		Created: time.Now().UTC(),
		Target: report.Target{
			Argv:     spec.Argv,
			PIDs:     spec.PIDs,
			UID:      os.Getuid(),
			Exit:     res.Exit,
			Attached: len(spec.PIDs) > 0,
		},
		Trace: report.Trace{
			Source:   "live",
			Backend:  res.Backend,
			Started:  res.Started,
			Duration: res.Ended.Sub(res.Started),
			Events:   rec.Seen,
			Stored:   len(rec.Events),
			Dropped:  res.Dropped,
			Complete: res.Dropped == 0,
			Notes:    res.Notes,
		},
		Events:   rec.Events,
		Ioctls:   rec.Ioctls(),
		Folded:   rec.Folded(),
		Snapshot: snap,
	}
	if spec.Cred != nil {
		rep.Target.UID = int(spec.Cred.UID)
	}
	if rec.Overflow > 0 {
		// The failing call may be among them: as incomplete as a drop.
		rep.Trace.Complete = false
		rep.Trace.Notes = append(rep.Trace.Notes, fmt.Sprintf("%d events beyond the first %d were counted but not stored: the trace is incomplete", rec.Overflow, len(rec.Events)))
	}
	if rep.Trace.Started.IsZero() {
		rep.Trace.Started = started
	}
	rep.Analysis = annotate.Analyze(rep.Events, snap)
	return rep
}
