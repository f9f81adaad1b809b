package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/ebpf"
	"github.com/cudatrace/cudatrace/tracer/ptrace"
)

// traceCommand runs or attaches, then reports.
func traceCommand(argv []string, o *options, stdout, stderr io.Writer) error {
	if err := checkFormat(o.format); err != nil {
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
	status := newStatusLine(stderr, statusTarget(spec.Argv, spec.PIDs), len(spec.PIDs) > 0)
	sink := tracer.SinkFunc(func(e *tracer.Event) {
		status.count(e)
		rec.Event(e)
		// The snapshot is taken while the failing process still exists.
		switch {
		case e.Failed() && e.Kind == tracer.KindOpen && nvdev.IsNodePath(e.Path):
			snapper.triggerAs(e.PID, e.Path, true)
		case e.Kind == tracer.KindOpen && !e.Failed() && e.Dev == nil && nvdev.IsNodePath(e.Path):
			// The live backends read the new fd's inode: no device number
			// means it is not a device (LXC's placeholder file). Snapshot
			// it in the target's view, which the exit snapshot may lose.
			snapper.trigger(e.PID, e.Path)
		case e.APIFailed():
			snapper.cudaFailed(e.Ret)
			snapper.trigger(e.PID, "")
		case e.Failed() && (e.NoEntry || e.Kind == tracer.KindIoctl):
			snapper.trigger(e.PID, "")
		}
	})
	started := time.Now()
	status.start()
	res, err := runBackend(ctx, backend, o.backend == "auto", spec, sink, func() bool { return rec.Seen == 0 }, stderr)
	status.stop()
	if err != nil {
		return traceError(err, o)
	}
	rec.AddFolded(res.Folded)
	snap := snapper.wait()
	snapOpts := snapper.options()
	snapOpts.PID = firstPID(spec, rec.Events())
	snapOpts.ExtraPaths = touchedPaths(rec.Events())
	if snap == nil {
		snap = snapshot.Collect(snapOpts)
		snapper.fillEnv(snap)
	}
	fillCred(snap, spec.Cred)

	rep := buildReport(spec, res, rec, snap, started)
	rep.Target.User = o.user
	err = emit(rep, o, stdout, stderr, len(spec.Argv) > 0)
	if res.Finish != nil {
		if ferr := res.Finish(); ferr != nil {
			fmt.Fprintf(stderr, "cudatrace: cleanup: %v\n", ferr)
		}
	}
	var ee *exitError
	if res.Exit != nil && (err == nil || errors.As(err, &ee) && (ee.code == exitFound || ee.saveFailed)) {
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

// nvidiaMajors picks the majors whose fds count as NVIDIA devices. 195 is
// fixed by the driver, so it is included even when nothing is registered.
func nvidiaMajors(devs []snapshot.DriverMajor, extra []uint) []uint32 {
	seen := map[uint32]bool{nvdev.Major: true}
	out := []uint32{nvdev.Major}
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
		if err := ebpf.Probe(); err != nil {
			return nil, fail(exitFailure, "eBPF backend unavailable: %v", err)
		}
		return ebpf.New(), nil
	case "ptrace":
		if err := ptrace.Probe(); err != nil {
			return nil, fail(exitFailure, "ptrace backend unavailable: %v", err)
		}
		return ptrace.New(), nil
	case "auto":
		ebpfErr := ebpf.Probe()
		if ebpfErr == nil {
			return ebpf.New(), nil
		}
		if err := ptrace.Probe(); err != nil {
			return nil, fail(exitFailure, "cannot trace: eBPF: %v; ptrace: %v", ebpfErr, err)
		}
		fmt.Fprintf(stderr, "cudatrace: eBPF unavailable (%v); using ptrace\n", ebpfErr)
		return ptrace.New(), nil
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
	if perr := ptrace.Probe(); perr != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "cudatrace: eBPF unavailable (%v); using ptrace\n", err)
	return ptrace.New().Run(ctx, spec, sink)
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

// failureSnapshot takes the system snapshot at the first failed device
// open, while the failing process still exists. It runs beside the event
// stream so the tracer never stalls. An earlier, weaker trigger (a failed
// ioctl, a non-device open: a container runtime's setup can make those
// before the target's cgroup is in place) is replaced by the first failed
// open of an NVIDIA node.
type failureSnapshot struct {
	opts   snapshot.Options
	mu     sync.Mutex
	closed bool
	strong bool // a failed NVIDIA open triggered it
	wg     sync.WaitGroup
	snap   *snapshot.Snapshot
	gen    int
	// env is the failing process's environment, read at once: a process
	// that exits right after CUDA fails outlives the first reads, not the
	// whole snapshot, and CUDA_VISIBLE_DEVICES may be the cause.
	env map[string]string
}

// cudaFailed notes CUDA's failure code: compute mode (46) and the fabric
// manager (802) are asked of nvidia-smi, which takes a second or more and
// so is asked only then.
func (f *failureSnapshot) cudaFailed(code int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code == 46 || code == 802 {
		f.opts.NvidiaSMI = "auto" // nvidia-smi is not a traced child
	}
}

func (f *failureSnapshot) options() snapshot.Options {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opts
}

func (f *failureSnapshot) trigger(pid int, path string) { f.triggerAs(pid, path, false) }

func (f *failureSnapshot) triggerAs(pid int, path string, strong bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.strong || (f.gen > 0 && !strong) {
		return
	}
	f.strong = strong
	f.gen++
	gen := f.gen
	if env, err := snapshot.TargetEnv(pid); err == nil {
		f.env = env
	}
	opts := f.opts
	opts.PID = pid
	if path != "" {
		opts.ExtraPaths = []string{path} // described even if it is missing
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		snap := snapshot.Collect(opts)
		// A target that exited while it was being read leaves a snapshot
		// that is part its view, part cudatrace's (mounts or cgroups
		// lost on the way): drop it, and the exit snapshot is taken
		// instead.
		if snap.TargetLost {
			snap = nil
		}
		f.mu.Lock()
		if gen == f.gen {
			f.snap = snap
		}
		f.mu.Unlock()
	}()
}

func (f *failureSnapshot) wait() *snapshot.Snapshot {
	f.mu.Lock()
	f.closed = true // no trigger after this point
	f.mu.Unlock()
	f.wg.Wait()
	return f.snap
}

// fillEnv gives an exit snapshot, taken when the target was gone, the
// environment read at the failure.
func (f *failureSnapshot) fillEnv(s *snapshot.Snapshot) {
	if s.Env == nil && f.env != nil {
		s.Env = f.env
	}
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
			Source:      "live",
			Backend:     res.Backend,
			SyscallHook: res.SyscallHook,
			Started:     res.Started,
			Duration:    res.Ended.Sub(res.Started),
			Events:      rec.Seen,
			Stored:      len(rec.Events()),
			Dropped:     res.Dropped,
			Complete:    res.Dropped == 0,
			Notes:       res.Notes,

			APIReturns:   res.APIReturns,
			APILibraries: res.APILibraries,
		},
		Events:   rec.Events(),
		Ioctls:   rec.Ioctls(),
		Folded:   rec.Folded(),
		Snapshot: snap,
	}
	if spec.Cred != nil {
		rep.Target.UID = int(spec.Cred.UID)
	}
	if res.Backend == "ptrace" && res.Launched {
		rep.Trace.OwnSeccompFilters = 1 // its SECCOMP_RET_TRACE filter
	}
	if rec.Overflow > 0 {
		// The failing call may be among them: as incomplete as a drop.
		rep.Trace.Complete = false
		rep.Trace.Notes = append(rep.Trace.Notes, fmt.Sprintf("%d events were counted but not stored, past the %d kept: the trace is incomplete", rec.Overflow, len(rec.Events())))
	}
	if rep.Trace.Started.IsZero() {
		rep.Trace.Started = started
	}
	rep.Analysis = annotate.AnalyzeFacts(rep.Events, snap, rep.Facts())
	return rep
}
