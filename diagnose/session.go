package diagnose

import (
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Session is the part of a diagnosis that follows one target's events:
// it records them, takes the failure snapshot the moment a failure
// trigger fires, and builds the report at the end. Trace runs one per
// trace; cudatrace watch runs one per followed process. Event and Folded
// are called from one goroutine; Report once, after the last of them.
type Session struct {
	rec       *record.Recorder
	snapper   *failureSnapshot
	d         deps
	triggered bool
	// read holds the PIDs whose identity was read at their first event
	// (at most maxIdentities).
	read map[int]bool
	libs libraries
}

// SessionOptions configure a Session.
type SessionOptions struct {
	ProcDevicesPath string // the snapshot reads majors from it
	// MaxStored bounds the events stored (0: the recorder's default).
	MaxStored int
	// Identity is what was read of the target before (cudatrace watch:
	// at its first event): a snapshot that finds it gone reads its
	// cgroups' policy from it (snapshot.Options.Identity). The failure
	// trigger reads a fresher one when the process is still there, and
	// each exec another.
	Identity *snapshot.Identity
	// Host shares the host's facts between sessions (cudatrace watch's,
	// one per process): snapshot.HostCache.
	Host *snapshot.HostCache
	// System replaces the live system's reads and the analysis (tests).
	System *System
}

// System is what a session reads of the system, and the analysis: nil
// fields are the live ones.
type System struct {
	Collect         func(snapshot.Options) *snapshot.Snapshot
	TargetEnv       func(pid int) (map[string]string, error)
	TargetContainer func(pid int) (snapshot.Container, bool)
	TargetIdentity  func(pid int) (snapshot.Identity, error)
	InspectLibrary  func(pid int, path string, sameRoot bool) snapshot.LibraryFile
	Analyze         func([]tracer.Event, *snapshot.Snapshot, analysis.Facts) analysis.Result
}

func (s *System) deps() deps {
	d := live
	if s == nil {
		return d
	}
	if s.Collect != nil {
		// The whole snapshot at once: the view part does it all.
		d.collectView = s.Collect
		d.addHost = func(*snapshot.Snapshot, snapshot.Options) {}
	}
	if s.TargetEnv != nil {
		d.targetEnv = s.TargetEnv
	}
	if s.TargetContainer != nil {
		d.targetContainer = s.TargetContainer
	}
	if s.TargetIdentity != nil {
		d.targetIdentity = s.TargetIdentity
	}
	if s.InspectLibrary != nil {
		d.inspectLibrary = s.InspectLibrary
	}
	if s.Analyze != nil {
		d.analyze = s.Analyze
	}
	return d
}

// NewSession starts a session; the kernel log is read from now on.
func NewSession(o SessionOptions) *Session { return newSession(o, o.System.deps()) }

func newSession(o SessionOptions, d deps) *Session {
	if o.Host != nil && d.cgroupPath != nil {
		d.cgroupPath = o.Host.CgroupV2PathByID
	}
	rec := record.New()
	if o.MaxStored > 0 {
		rec = record.NewLimited(o.MaxStored)
	}
	s := &Session{
		rec:     rec,
		snapper: &failureSnapshot{opts: snapshot.Options{ProcDevicesPath: o.ProcDevicesPath, KmsgSince: time.Now(), Host: o.Host}, deps: d},
		d:       d,
		read:    map[int]bool{},
	}
	if o.Identity != nil {
		s.snapper.setIdentity(o.Identity)
		s.read[o.Identity.PID] = true
	}
	return s
}

// Event records e and fires the failure snapshot on the failure triggers.
func (s *Session) Event(e *tracer.Event) {
	if e.Kind == tracer.KindEnv {
		// Kept as a report keeps an environment, never recorded.
		s.snapper.setEnv(e.PID, snapshot.EnvFromBlock(e.Env), e.Flags&tracer.EnvCut != 0)
		return
	}
	s.rec.Event(e)
	s.readIdentity(e)
	if e.Kind == tracer.KindOpen && !e.Failed() && nvfile.IsLibrary(e.Path) {
		id := s.snapper.identity(e.PID)
		s.libs.inspect(s.d.inspectLibrary, e.PID, e.Path, id != nil && id.RootKnown && id.SameRoot)
	}
	// The snapshot is taken while the failing process still exists.
	switch {
	case e.Failed() && e.Kind == tracer.KindOpen && nvfile.IsNode(e.Path):
		s.snapper.triggerAs(e, e.Path, true)
	case e.Kind == tracer.KindOpen && !e.Failed() && e.Dev == nil && nvfile.IsNode(e.Path):
		// The live backends read the new fd's inode: no device number
		// means it is not a device (LXC's placeholder file). Snapshot
		// it in the target's view, which the exit snapshot may lose.
		s.snapper.trigger(e, e.Path)
	case e.APIFailed():
		s.snapper.cudaFailed(e.Ret)
		s.snapper.trigger(e, "")
	case e.Failed() && (e.NoEntry || e.Kind == tracer.KindIoctl):
		s.snapper.trigger(e, "")
	default:
		return
	}
	s.triggered = true
}

// readIdentity reads a process's identity (its cgroups, UID, root) at its
// first event and again at each exec (a runtime or a wrapper moves a
// process into the job's cgroup, then execs the job): three small /proc
// reads, so that a snapshot that finds it gone, reaped before its failure
// was read, still reads the policy of the cgroup it was in.
func (s *Session) readIdentity(e *tracer.Event) {
	if s.d.targetIdentity == nil || e.Kind == tracer.KindExit {
		return
	}
	exec := e.Kind == tracer.KindExec && e.Ret == 0
	// The open of libcuda or NVML is read again: the backends deliver it
	// while the process waits there (eBPF stops a launched target at an
	// unprobed library's open until its uprobes are on; ptrace at the
	// open's exit stop), so its environment, which decides cuInit
	// (CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH), is read while it lives. An
	// exec's read comes after the process ran on, and a short-lived one
	// is often gone by then.
	lib := e.Kind == tracer.KindOpen && !e.Failed() && nvfile.IsLibrary(e.Path)
	if s.read[e.PID] && !exec && !lib || !s.read[e.PID] && len(s.read) >= maxIdentities {
		return
	}
	s.read[e.PID] = true
	if lib && !exec {
		// Only the environment is new at a library's open; the rest of
		// a read now may be a zombie's (no argv, no root): keep the
		// first event's or exec's.
		if old := s.snapper.identity(e.PID); old != nil {
			if id, err := s.d.targetIdentity(e.PID); err == nil && id.Env != nil {
				merged := *old
				merged.Env = id.Env
				s.snapper.setIdentity(&merged)
			}
			return
		}
	}
	if id, err := s.d.targetIdentity(e.PID); err == nil {
		id.PID = e.PID
		s.snapper.setIdentity(&id)
	} else if old := s.snapper.identity(e.PID); exec && old != nil {
		// Gone at its exec: the argv read before is the old image's.
		id := *old
		id.Argv = nil
		s.snapper.setIdentity(&id)
	}
}

// Argv is a process's argv as /proc last showed it (at its first event or
// its last exec), or nil: whole, where an exec event's is cut to what the
// kernel side copies.
func (s *Session) Argv(pid int) []string {
	if id := s.snapper.identity(pid); id != nil {
		return id.Argv
	}
	return nil
}

// Triggered reports whether a failure trigger fired: something failed that
// the analysis must look at.
func (s *Session) Triggered() bool { return s.triggered }

// Seen is how many events the session was given.
func (s *Session) Seen() uint64 { return s.rec.Seen }

// Folded adds the calls the backend counted without delivering.
func (s *Session) Folded(folded []tracer.Folded) { s.rec.AddFolded(folded) }

// Report waits for the failure snapshot (or takes one now when none was
// taken, in the view of the spec's first PID or the first traced process)
// and builds the analysed report.
func (s *Session) Report(spec tracer.Spec, res *tracer.Result, started time.Time, version string) *report.Report {
	snap := s.snapper.wait()
	snapOpts := s.snapper.options()
	snapOpts.PID = firstPID(spec, s.rec.Events())
	snapOpts.Identity = s.snapper.identity(snapOpts.PID)
	snapOpts.ExtraPaths = touchedPaths(s.rec.Events())
	if snap == nil {
		snap = s.d.collect(snapOpts)
	}
	// A snapshot that found its process gone (it failed and exited before
	// the read came) takes the environment read while it lived.
	s.snapper.fillEnv(snap, snapOpts.PID)
	fillCred(snap, spec.Cred)
	snap.Libraries = s.libs.wait()
	return buildReport(spec, res, s.rec, snap, started, version, s.d.analyze)
}
