// Package diagnose runs one diagnosis: tracer → snapshot → analysis →
// report. It chooses and starts the backend (with auto's fallback), takes
// the system snapshot at the first failure, analyses, and assembles the
// report; commands only parse flags, print, and map errors to exit codes.
package diagnose

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Options are one live diagnosis's inputs.
type Options struct {
	Spec    tracer.Spec
	Backend tracer.Backend // from ChooseBackend
	// Fallback (--backend auto): an eBPF backend that passed its probe but
	// cannot load gives way to ptrace, if nothing was traced yet.
	Fallback        bool
	ProcDevicesPath string // the snapshot reads majors from it
	User            string // -u as given, for the report
	Version         string // the tool's, for the report
	// Progress, when set, watches the trace while it runs (a status line).
	Progress Progress
	// Notice, when set, gets one-line notes for the user, such as why auto
	// fell back to ptrace.
	Notice func(msg string)

	deps *deps // nil: the live system
}

// Progress watches a trace as it runs: Start before the backend starts,
// Event for each event delivered, Stop when the backend returns.
type Progress interface {
	Start()
	Event(e *tracer.Event)
	Stop()
}

// deps is what the pipeline reads of the system, and the analysis; tests
// replace them.
type deps struct {
	// collectView reads the target's own view, addHost the rest
	// (snapshot.CollectView, snapshot.AddHost).
	collectView     func(snapshot.Options) *snapshot.Snapshot
	addHost         func(*snapshot.Snapshot, snapshot.Options)
	targetEnv       func(pid int) (map[string]string, error)
	targetContainer func(pid int) (snapshot.Container, bool)
	targetIdentity  func(pid int) (snapshot.Identity, error)
	// cgroupPath resolves a cgroup v2 id recorded at a call
	// (snapshot.CgroupV2PathByID).
	cgroupPath func(id uint64) (string, error)
	// inspectLibrary reads a libcuda or NVML file a process opened
	// (snapshot.InspectLibrary).
	inspectLibrary func(pid int, path string, sameRoot bool) snapshot.LibraryFile
	analyze        func([]tracer.Event, *snapshot.Snapshot, analysis.Facts) analysis.Result
}

var live = deps{collectView: snapshot.CollectView, addHost: snapshot.AddHost, targetEnv: snapshot.TargetEnv,
	targetContainer: snapshot.TargetContainer, targetIdentity: snapshot.TargetIdentity, cgroupPath: snapshot.CgroupV2PathByID, inspectLibrary: snapshot.InspectLibrary, analyze: analysis.AnalyzeFacts}

// Trace runs the backend on o.Spec and returns the analysed report.
// release (never nil) waits for the backend to let go of what it still
// holds (Spec.DeferRelease): call it once the report is printed. An error
// is the backend's: nothing was traced.
func Trace(ctx context.Context, o Options) (rep *report.Report, release func() error, err error) {
	d := live
	if o.deps != nil {
		d = *o.deps
	}
	notice := o.Notice
	if notice == nil {
		notice = func(string) {}
	}
	spec := o.Spec
	sess := newSession(SessionOptions{ProcDevicesPath: o.ProcDevicesPath}, d)
	sink := &pipelineSink{sess: sess, progress: o.Progress}
	started := time.Now()
	if o.Progress != nil {
		o.Progress.Start()
	}
	res, err := runBackend(ctx, o.Backend, o.Fallback, spec, sink, func() bool { return sess.Seen() == 0 }, notice)
	if o.Progress != nil {
		o.Progress.Stop()
	}
	if err != nil {
		return nil, func() error { return nil }, err
	}
	sess.Folded(res.Folded)
	traced := time.Now()
	rep = sess.Report(spec, res, started, o.Version)
	if spec.Debug {
		notice(fmt.Sprintf("timing: trace %v, snapshot and report %v", traced.Sub(started).Round(100*time.Microsecond), time.Since(traced).Round(100*time.Microsecond)))
	}
	rep.Target.User = o.User
	release = res.Finish
	if release == nil {
		release = func() error { return nil }
	}
	return rep, release, nil
}

// collect takes a whole snapshot.
func (d deps) collect(o snapshot.Options) *snapshot.Snapshot {
	s := d.collectView(o)
	d.addHost(s, o)
	return s
}

// pipelineSink is Trace's sink: each event goes to the session; a backend
// that holds a failing thread stopped (tracer.StopSink) waits there for the
// failure snapshot's read of that process's own view.
type pipelineSink struct {
	sess     *Session
	progress Progress
}

func (p *pipelineSink) Event(e *tracer.Event) {
	if p.progress != nil {
		p.progress.Event(e)
	}
	p.sess.Event(e)
}

func (p *pipelineSink) Stopped(e *tracer.Event, deadline time.Time) { p.sess.snapper.held(e, deadline) }

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

func buildReport(spec tracer.Spec, res *tracer.Result, rec *record.Recorder, snap *snapshot.Snapshot, started time.Time, version string, analyze func([]tracer.Event, *snapshot.Snapshot, analysis.Facts) analysis.Result) *report.Report {
	rep := &report.Report{
		Schema:  report.SchemaVersion,
		Tool:    report.Tool{Name: "cudatrace", Version: version},
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
			Variants:    res.KernelVariants,
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
	report.MaskSecrets(rep) // before the analysis: its failing call quotes an argv
	rep.Analysis = analyze(rep.Events, snap, rep.Facts())
	return rep
}
