package diagnose

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// fakeBackend delivers events, then returns res (or err).
type fakeBackend struct {
	name   string
	events []tracer.Event
	res    tracer.Result
	err    error
	before func(i int) // called before events[i] is delivered
}

func (f *fakeBackend) Name() string { return f.name }

func (f *fakeBackend) Run(_ context.Context, _ tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	for i := range f.events {
		if f.before != nil {
			f.before(i)
		}
		e := f.events[i].Copy()
		e.Seq = uint64(i + 1)
		sink.Event(&e)
	}
	if f.err != nil {
		return nil, f.err
	}
	res := f.res
	if res.Backend == "" {
		res.Backend = f.name
	}
	return &res, nil
}

// fakeSystem records what the pipeline asks of the system.
type fakeSystem struct {
	mu    sync.Mutex
	calls []snapshot.Options
	facts []analysis.Facts
	gone  map[int]bool // collect finds these processes gone (no comm, target lost)
	env   map[int]map[string]string
}

func (s *fakeSystem) deps() *deps {
	return &deps{
		addHost: func(*snapshot.Snapshot, snapshot.Options) {},
		collectView: func(o snapshot.Options) *snapshot.Snapshot {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.calls = append(s.calls, o)
			snap := &snapshot.Snapshot{Process: snapshot.Process{PID: o.PID}, TargetLost: s.gone[o.PID]}
			if !s.gone[o.PID] {
				snap.Process.Comm = "target"
			}
			return snap
		},
		targetEnv: func(pid int) (map[string]string, error) {
			if e, ok := s.env[pid]; ok {
				return e, nil
			}
			return nil, os.ErrNotExist
		},
		analyze: func(ev []tracer.Event, snap *snapshot.Snapshot, f analysis.Facts) analysis.Result {
			s.mu.Lock()
			s.facts = append(s.facts, f)
			s.mu.Unlock()
			return analysis.AnalyzeFacts(ev, snap, f)
		},
	}
}

func (s *fakeSystem) pids() []int {
	var out []int
	for _, c := range s.calls {
		out = append(out, c.PID)
	}
	slices.Sort(out)
	return out
}

func diagnoseWith(t *testing.T, sys *fakeSystem, b tracer.Backend, spec tracer.Spec) (*Options, func() (*reportAndRelease, error)) {
	t.Helper()
	o := &Options{Spec: spec, Backend: b, ProcDevicesPath: "/fake/devices", Version: "v-test", deps: sys.deps()}
	return o, func() (*reportAndRelease, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rep, release, err := Trace(ctx, *o)
		return &reportAndRelease{rep, release}, err
	}
}

var ctl = &tracer.Dev{Major: 195, Minor: 255}

func TestFirstFailedNodeOpenTakesTheSnapshot(t *testing.T) {
	sys := &fakeSystem{}
	b := &fakeBackend{name: "ebpf", events: []tracer.Event{
		{PID: 10, Kind: tracer.KindIoctl, Syscall: "ioctl", Dev: ctl, Request: 0x2a, Ret: -22}, // weak: replaced
		{PID: 11, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia0", Ret: -1},     // EPERM: strong
		{PID: 12, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia1", Ret: -1},     // after the strong one: ignored
	}}
	_, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/true"}})
	got, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if pids := sys.pids(); !slices.Equal(pids, []int{10, 11}) {
		t.Fatalf("snapshots of PIDs %v, want 10 (ioctl) and 11 (the failed node open), and no exit snapshot", pids)
	}
	for _, c := range sys.calls {
		if c.PID == 11 && !slices.Equal(c.ExtraPaths, []string{"/dev/nvidia0"}) {
			t.Errorf("failure snapshot paths %v, want the failed node", c.ExtraPaths)
		}
		if c.ProcDevicesPath != "/fake/devices" || c.KmsgSince.IsZero() {
			t.Errorf("snapshot options %+v: want the given /proc/devices and the kernel log from the start", c)
		}
	}
	if s := got.rep.Snapshot; s == nil || s.Process.PID != 11 {
		t.Errorf("report snapshot %+v, want the one taken at PID 11's failed open", s)
	}
}

func TestExitSnapshotWhenNothingFailed(t *testing.T) {
	events := []tracer.Event{
		{PID: 20, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Dev: ctl, Ret: 3},
		{PID: 21, Kind: tracer.KindStat, Syscall: "newfstatat", Path: "/dev/nvidia0", Ret: 0},
		{PID: 20, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Dev: ctl, Ret: 4},
	}
	for name, tc := range map[string]struct {
		pids    []int
		wantPID int
	}{
		"launched": {nil, 20}, // the first traced process
		"attached": {[]int{77}, 77},
	} {
		t.Run(name, func(t *testing.T) {
			sys := &fakeSystem{}
			spec := tracer.Spec{PIDs: tc.pids}
			if tc.pids == nil {
				spec.Argv = []string{"/bin/true"}
			}
			_, run := diagnoseWith(t, sys, &fakeBackend{name: "ebpf", events: events}, spec)
			got, err := run()
			if err != nil {
				t.Fatal(err)
			}
			if len(sys.calls) != 1 {
				t.Fatalf("%d snapshots, want one, at exit", len(sys.calls))
			}
			c := sys.calls[0]
			if c.PID != tc.wantPID || !slices.Equal(c.ExtraPaths, []string{"/dev/nvidiactl", "/dev/nvidia0"}) || c.NvidiaSMI != "" {
				t.Errorf("exit snapshot of PID %d, paths %v, nvidia-smi %q; want %d, the touched nodes once each, none", c.PID, c.ExtraPaths, c.NvidiaSMI, tc.wantPID)
			}
			if got.rep.Target.Attached != (tc.pids != nil) || !slices.Equal(got.rep.Target.PIDs, tc.pids) {
				t.Errorf("target %+v", got.rep.Target)
			}
			if got.rep.Analysis.Failing != nil {
				t.Errorf("failing call %+v in a trace where nothing failed", got.rep.Analysis.Failing)
			}
		})
	}
}

func TestNonDeviceNodeOpenTakesTheSnapshot(t *testing.T) {
	// LXC's placeholder: /dev/nvidia0 opened, but it is no device.
	sys := &fakeSystem{}
	b := &fakeBackend{name: "ebpf", events: []tracer.Event{
		{PID: 5, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia0", Ret: 3},
	}}
	_, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/true"}})
	if _, err := run(); err != nil {
		t.Fatal(err)
	}
	if len(sys.calls) != 1 || sys.calls[0].PID != 5 || !slices.Equal(sys.calls[0].ExtraPaths, []string{"/dev/nvidia0"}) {
		t.Errorf("snapshots %+v, want one of PID 5 describing /dev/nvidia0", sys.calls)
	}
}

func TestLostTargetKeepsItsEnvAndCredentials(t *testing.T) {
	// cuInit returns 46 (compute mode): nvidia-smi is asked; the target is
	// gone before its view is read, so the exit snapshot stands in, with
	// the environment read at the failure and the -u credentials.
	sys := &fakeSystem{gone: map[int]bool{30: true}, env: map[int]map[string]string{30: {"CUDA_VISIBLE_DEVICES": "7"}}}
	b := &fakeBackend{name: "ebpf", events: []tracer.Event{
		{PID: 30, Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/libcuda.so.1", Ret: 46},
	}, res: tracer.Result{APIReturns: true, Exit: &tracer.ExitStatus{Code: 1}}}
	cred := &tracer.Cred{UID: 1000, GID: 1000, Groups: []uint32{44}, User: "alice"}
	o, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/true"}, Cred: cred})
	o.User = "alice"
	got, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if len(sys.calls) != 2 {
		t.Fatalf("%d snapshots, want the failure's (lost) and the exit's", len(sys.calls))
	}
	for _, c := range sys.calls {
		if c.NvidiaSMI != "auto" || c.PID != 30 {
			t.Errorf("snapshot of PID %d asks nvidia-smi %q; want 30, auto (CUDA returned 46)", c.PID, c.NvidiaSMI)
		}
	}
	s := got.rep.Snapshot
	if s.Env["CUDA_VISIBLE_DEVICES"] != "7" {
		t.Errorf("env %v, want the one read at the failure", s.Env)
	}
	if s.Process.UID != 1000 || s.Process.User != "alice" || !slices.Equal(s.Process.Groups, []uint32{44}) {
		t.Errorf("process %+v, want the -u credentials", s.Process)
	}
	if got.rep.Target.UID != 1000 || got.rep.Target.User != "alice" || got.rep.Target.Exit == nil || got.rep.Target.Exit.Code != 1 {
		t.Errorf("target %+v", got.rep.Target)
	}
	if c := got.rep.Analysis.CUDA; c == nil {
		t.Errorf("analysis has no CUDA result for cuInit's 46: %+v", got.rep.Analysis)
	}
}

func TestReportAssemblyAndFacts(t *testing.T) {
	ioctl := tracer.Event{PID: 40, Kind: tracer.KindIoctl, Syscall: "ioctl", Dev: ctl, Request: 0x2a, Ret: 0}
	finishErr := errors.New("detach failed")
	sys := &fakeSystem{}
	b := &fakeBackend{name: "ptrace", events: []tracer.Event{ioctl}, res: tracer.Result{
		Launched: true,
		Dropped:  2,
		Notes:    []string{"no_new_privs was set on the target"},
		Folded:   []tracer.Folded{{PID: 40, Kind: tracer.KindIoctl, Dev: *ctl, Request: 0x2a, Count: 5}},
		Exit:     &tracer.ExitStatus{Code: 3},
		Finish:   func() error { return finishErr },
	}}
	_, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/app", "x"}})
	got, err := run()
	if err != nil {
		t.Fatal(err)
	}
	rep, tr := got.rep, got.rep.Trace
	if tr.Source != "live" || tr.Backend != "ptrace" || tr.Complete || tr.Dropped != 2 || tr.Events != 6 || tr.Stored != 1 || tr.Started.IsZero() {
		t.Errorf("trace %+v: want live, ptrace, incomplete (2 dropped), 6 seen (5 folded), 1 stored, a start time", tr)
	}
	if tr.OwnSeccompFilters != 1 || !slices.Equal(tr.Notes, b.res.Notes) {
		t.Errorf("own filters %d, notes %q; want ptrace's one filter and the backend's notes", tr.OwnSeccompFilters, tr.Notes)
	}
	if rep.Tool.Version != "v-test" || !slices.Equal(rep.Target.Argv, []string{"/bin/app", "x"}) || rep.Target.UID != os.Getuid() {
		t.Errorf("tool %+v, target %+v", rep.Tool, rep.Target)
	}
	if len(sys.facts) != 1 {
		t.Fatalf("analysed %d times, want once", len(sys.facts))
	}
	f := sys.facts[0]
	if f.APIReturns || f.APIWhyNot != "the ptrace backend could not probe the CUDA libraries" || f.OwnSeccompFilters != 1 {
		t.Errorf("facts %+v: want no API returns (ptrace says why) and ptrace's own filter", f)
	}
	var unstored uint64
	for _, u := range f.Unstored {
		unstored += u.Count
	}
	if unstored != 5 {
		t.Errorf("facts' unstored calls %+v, want the 5 folded ioctls", f.Unstored)
	}
	if err := got.release(); !errors.Is(err, finishErr) {
		t.Errorf("release: %v, want the backend's Finish error", err)
	}
}

type recordingProgress struct{ steps []string }

func (p *recordingProgress) Start()              { p.steps = append(p.steps, "start") }
func (p *recordingProgress) Event(*tracer.Event) { p.steps = append(p.steps, "event") }
func (p *recordingProgress) Stop()               { p.steps = append(p.steps, "stop") }

func TestBackendErrorIsReturned(t *testing.T) {
	loadErr := errors.New("load: verifier said no")
	sys := &fakeSystem{}
	b := &fakeBackend{name: "ptrace", err: loadErr, events: []tracer.Event{
		{PID: 1, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Dev: ctl, Ret: 3},
	}}
	o, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/true"}})
	progress := &recordingProgress{}
	o.Progress = progress
	got, err := run()
	if !errors.Is(err, loadErr) || got.rep != nil || got.release == nil || got.release() != nil {
		t.Fatalf("Trace: %v, report %v; want the backend's error, no report, a no-op release", err, got.rep)
	}
	if !slices.Equal(progress.steps, []string{"start", "event", "stop"}) {
		t.Errorf("progress %v, want start, event, stop", progress.steps)
	}
	if len(sys.calls) != 0 || len(sys.facts) != 0 {
		t.Errorf("%d snapshots, %d analyses after a failed trace; want none", len(sys.calls), len(sys.facts))
	}
}

func TestChooseUnknownBackend(t *testing.T) {
	_, err := ChooseBackend("bogus", nil)
	if !errors.Is(err, ErrUnknownBackend) || err.Error() != `unknown backend "bogus": use auto, ebpf or ptrace` {
		t.Errorf("err %v, want ErrUnknownBackend with the choices", err)
	}
}

type reportAndRelease struct {
	rep     *report.Report
	release func() error
}

// The process whose cuInit failed exited before the failure's event came
// (a return probe's event): its environment, read at its exec, still
// reaches the snapshot, and CUDA_VISIBLE_DEVICES explains the 100. Found on
// the H200: a ptrace run of an invalid GPU UUID called it unexplained.
func TestEnvReadAtExecOutlivesTheTarget(t *testing.T) {
	cvd := "GPU-00000000-0000-0000-0000-000000000000"
	for _, tc := range []struct {
		name   string
		events []tracer.Event
	}{
		{"the launched process", []tracer.Event{
			{PID: 30, Kind: tracer.KindExec, Syscall: "execve", Argv: []string{"python3"}},
			{PID: 30, Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/libcuda.so.1", Ret: 100},
		}},
		// A child of a shell that has no such variable.
		{"a child", []tracer.Event{
			{PID: 29, Kind: tracer.KindExec, Syscall: "execve", Argv: []string{"sh"}},
			{PID: 30, Kind: tracer.KindExec, Syscall: "execve", Argv: []string{"python3"}},
			{PID: 30, Kind: tracer.KindAPI, Func: "cuInit", Path: "/usr/lib/libcuda.so.1", Ret: 100},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := &fakeSystem{gone: map[int]bool{29: true, 30: true}} // no environ to read at the failure
			d := sys.deps()
			reaped := false
			d.targetIdentity = func(pid int) (snapshot.Identity, error) {
				if reaped {
					return snapshot.Identity{UID: -1}, os.ErrNotExist
				}
				env := map[string]string{}
				if pid == 30 {
					env["CUDA_VISIBLE_DEVICES"] = cvd
				}
				return snapshot.Identity{PID: pid, UID: 0, Env: env}, nil
			}
			b := &fakeBackend{name: "ptrace", events: tc.events, res: tracer.Result{APIReturns: true, Exit: &tracer.ExitStatus{Code: 0}}}
			b.before = func(i int) { reaped = i == len(tc.events)-1 } // gone before its failure is read
			o, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"python3"}})
			o.deps = d
			got, err := run()
			if err != nil {
				t.Fatal(err)
			}
			if v := got.rep.Snapshot.Env["CUDA_VISIBLE_DEVICES"]; v != cvd {
				t.Errorf("env %v, want the failing process's, read at its exec", got.rep.Snapshot.Env)
			}
			found := false
			for _, f := range got.rep.Analysis.Findings {
				found = found || f.ID == "cuda-visible-devices-hides-all"
			}
			if !found {
				t.Errorf("findings %+v: CUDA_VISIBLE_DEVICES not named", got.rep.Analysis.Findings)
			}
		})
	}
}
