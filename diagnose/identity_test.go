package diagnose

import (
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// A trace of a target gone before its view is read: the identity read at
// its failure (its zombie's cgroups) reaches both snapshots, so the
// snapshot can read its cgroup's policy after its exit.
func TestFailureReadsTheIdentity(t *testing.T) {
	privtest.Deadline(t)
	sys := &fakeSystem{gone: map[int]bool{30: true}}
	d := sys.deps()
	d.targetIdentity = func(pid int) (snapshot.Identity, error) {
		return snapshot.Identity{PID: pid, Cgroup: "/scenario", UID: 1000}, nil
	}
	b := &fakeBackend{name: "ebpf", events: []tracer.Event{
		{PID: 30, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1},
	}, res: tracer.Result{Exit: &tracer.ExitStatus{Code: 1}}}
	o, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/true"}})
	o.deps = d
	if _, err := run(); err != nil {
		t.Fatal(err)
	}
	if len(sys.calls) != 2 {
		t.Fatalf("%d snapshots, want the failure's (lost) and the exit's", len(sys.calls))
	}
	for _, c := range sys.calls {
		if c.Identity == nil || c.Identity.PID != 30 || c.Identity.Cgroup != "/scenario" || c.Identity.UID != 1000 {
			t.Errorf("snapshot of %d has identity %+v, want the one read at the failure", c.PID, c.Identity)
		}
	}
}

// cudatrace watch's identity (read at the first event, while the process
// ran) is the fallback; a read at the failure replaces its cgroups and
// UID, and keeps what a zombie no longer shows (argv, its root).
func TestSessionIdentityMerge(t *testing.T) {
	privtest.Deadline(t)
	first := &snapshot.Identity{PID: 40, Cgroup: "/pod/a", Argv: []string{"python3", "train.py"}, UID: 1000, SameRoot: true, RootKnown: true}
	for _, c := range []struct {
		name  string
		fresh func(int) (snapshot.Identity, error)
		want  snapshot.Identity
	}{
		{"reaped", func(int) (snapshot.Identity, error) { return snapshot.Identity{UID: -1}, os.ErrNotExist }, *first},
		{"zombie", func(pid int) (snapshot.Identity, error) {
			return snapshot.Identity{PID: pid, Cgroup: "/pod/b", UID: 0}, nil
		},
			snapshot.Identity{PID: 40, Cgroup: "/pod/b", Argv: first.Argv, UID: 0, SameRoot: true, RootKnown: true}},
		{"alive", func(pid int) (snapshot.Identity, error) {
			return snapshot.Identity{PID: pid, Cgroup: "/pod/c", Argv: []string{"python3"}, UID: 7, RootKnown: true}, nil
		}, snapshot.Identity{PID: 40, Cgroup: "/pod/c", Argv: []string{"python3"}, UID: 7, RootKnown: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := &fakeSystem{gone: map[int]bool{40: true}}
			d := *sys.deps()
			d.targetIdentity = c.fresh
			s := newSession(SessionOptions{Identity: first}, d)
			s.Event(&tracer.Event{Seq: 1, PID: 40, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: -1})
			rep := s.Report(tracer.Spec{PIDs: []int{40}}, &tracer.Result{Backend: "ebpf"}, time.Now(), "v-test")
			if rep.Snapshot == nil || len(sys.calls) != 2 {
				t.Fatalf("%d snapshots", len(sys.calls))
			}
			for _, call := range sys.calls {
				got := call.Identity
				if got == nil || got.PID != c.want.PID || got.Cgroup != c.want.Cgroup || !slices.Equal(got.Argv, c.want.Argv) ||
					got.UID != c.want.UID || got.SameRoot != c.want.SameRoot || got.RootKnown != c.want.RootKnown {
					t.Errorf("identity %+v, want %+v", got, c.want)
				}
			}
		})
	}
}

// A trace reads each process's identity at its first event (and at its
// execs), so a target reaped before its failure is read still has its
// cgroups; past maxIdentities processes no more are read.
func TestTraceReadsIdentitiesAtFirstEvents(t *testing.T) {
	privtest.Deadline(t)
	sys := &fakeSystem{gone: map[int]bool{30: true}}
	d := sys.deps()
	reads := map[int]int{}
	reaped := false
	d.targetIdentity = func(pid int) (snapshot.Identity, error) {
		reads[pid]++
		if reaped && pid == 30 {
			return snapshot.Identity{UID: -1}, os.ErrNotExist
		}
		return snapshot.Identity{PID: pid, Cgroup: "/job", UID: 1000}, nil
	}
	var events []tracer.Event
	for pid := 100; pid < 100+maxIdentities+5; pid++ {
		events = append(events, tracer.Event{PID: pid, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctl})
	}
	events = append([]tracer.Event{
		{PID: 30, Kind: tracer.KindExec, Syscall: "execve", Argv: []string{"/bin/job"}},
		{PID: 30, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: ctl},
	}, events...)
	events = append(events, tracer.Event{PID: 30, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1})
	b := &fakeBackend{name: "ebpf", events: events, res: tracer.Result{Exit: &tracer.ExitStatus{Code: 1}}}
	b.before = func(i int) { reaped = i == len(events)-1 }
	o, run := diagnoseWith(t, sys, b, tracer.Spec{Argv: []string{"/bin/job"}})
	o.deps = d
	if _, err := run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range sys.calls {
		if c.Identity == nil || c.Identity.PID != 30 || c.Identity.Cgroup != "/job" {
			t.Errorf("snapshot of %d: identity %+v, want the one read at its first event", c.PID, c.Identity)
		}
	}
	if reads[30] != 2 {
		t.Errorf("pid 30's identity read %d times, want at its exec and at its failure (its open after the exec is no first event)", reads[30])
	}
	read := 0
	for pid := range reads {
		if pid >= 100 {
			read++
		}
	}
	if read != maxIdentities-1 {
		t.Errorf("%d other processes' identities read, want %d (the cap)", read, maxIdentities-1)
	}
}

// A target gone before any of its /proc could be read (an eBPF event read
// after a fast exit): the cgroup id the kernel recorded at the failing
// call names its cgroup, so both snapshots read that cgroup's policy; an
// identity read earlier keeps its UID and argv, its v2 cgroup replaced by
// the one at the call (a runtime moves a job, then execs it).
func TestFailureNamesTheRecordedCgroup(t *testing.T) {
	privtest.Deadline(t)
	for _, c := range []struct {
		name  string
		first *snapshot.Identity
		want  snapshot.Identity
	}{
		{"never read", nil, snapshot.Identity{PID: 50, Cgroup: "/job/at-call", UID: -1}},
		{"read at its start", &snapshot.Identity{PID: 50, Cgroup: "/job/setup", Argv: []string{"train"}, UID: 1000},
			snapshot.Identity{PID: 50, Cgroup: "/job/at-call", Argv: []string{"train"}, UID: 1000}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := &fakeSystem{gone: map[int]bool{50: true}}
			d := *sys.deps()
			d.targetIdentity = func(int) (snapshot.Identity, error) { return snapshot.Identity{UID: -1}, os.ErrNotExist }
			var asked []uint64
			d.cgroupPath = func(id uint64) (string, error) {
				asked = append(asked, id)
				if id == 4242 {
					return "/job/at-call", nil
				}
				return "", os.ErrNotExist
			}
			s := newSession(SessionOptions{Identity: c.first}, d)
			s.Event(&tracer.Event{Seq: 1, PID: 50, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1, CgroupID: 4242})
			s.Report(tracer.Spec{PIDs: []int{50}}, &tracer.Result{Backend: "ebpf"}, time.Now(), "v-test")
			if !slices.Equal(asked, []uint64{4242}) || len(sys.calls) != 2 {
				t.Fatalf("cgroup ids asked %v, %d snapshots", asked, len(sys.calls))
			}
			for _, call := range sys.calls {
				got := call.Identity
				if got == nil || got.PID != c.want.PID || got.Cgroup != c.want.Cgroup || got.UID != c.want.UID || !slices.Equal(got.Argv, c.want.Argv) {
					t.Errorf("snapshot of %d: identity %+v, want %+v", call.PID, got, c.want)
				}
			}
		})
	}
}

// A process's environment is read again at its open of libcuda, where the
// backends deliver the open while it waits: a failure read after it exited
// (cuInit's code comes from its return probe) takes that environment, and
// the snapshot does not call it unavailable. Before, only the exec's read
// (after the process ran on: here, gone already) was there to fall back on.
func TestEnvReadAtLibraryOpen(t *testing.T) {
	privtest.Deadline(t)
	const pid = 50
	alive := false
	sys := &fakeSystem{gone: map[int]bool{}}
	d := *sys.deps()
	d.collectView = func(o snapshot.Options) *snapshot.Snapshot {
		// The view is read after the exit: gone before the read began.
		return &snapshot.Snapshot{Process: snapshot.Process{PID: o.PID}, Unavailable: []string{"target environment: no such process"}}
	}
	d.targetIdentity = func(p int) (snapshot.Identity, error) {
		if !alive {
			return snapshot.Identity{UID: -1}, os.ErrNotExist
		}
		return snapshot.Identity{PID: p, UID: 0, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "-1"}}, nil
	}
	s := newSession(SessionOptions{}, d)
	s.Event(&tracer.Event{Seq: 1, PID: pid, Kind: tracer.KindExec, Syscall: "execve", Path: "/usr/bin/python3"}) // read: gone
	alive = true                                                                                                 // stopped at the open
	s.Event(&tracer.Event{Seq: 2, PID: pid, Kind: tracer.KindOpen, Syscall: "openat", Path: "/usr/lib/libcuda.so.1", Ret: 3})
	alive = false
	s.Event(&tracer.Event{Seq: 3, PID: pid, Kind: tracer.KindAPI, Func: "cuInit", Ret: 100, Path: "/usr/lib/libcuda.so.1"})
	rep := s.Report(tracer.Spec{Argv: []string{"python3"}}, &tracer.Result{Backend: "ptrace"}, time.Now(), "v-test")
	if v := rep.Snapshot.Env["CUDA_VISIBLE_DEVICES"]; v != "-1" {
		t.Errorf("env %v, want the one read at the library's open", rep.Snapshot.Env)
	}
	if len(rep.Snapshot.Unavailable) != 0 {
		t.Errorf("unavailable %q: the environment was read", rep.Snapshot.Unavailable)
	}
	if !slices.ContainsFunc(rep.Analysis.Findings, func(f analysis.Finding) bool { return f.ID == "cuda-visible-devices-hides-all" }) {
		t.Errorf("findings %v", rep.Analysis.Findings)
	}
}

// The environment the kernel side copied at a failing entry point
// (tracer.KindEnv) is the snapshot's, whatever the reads of /proc found,
// with only the variables a report keeps; the event itself is not recorded.
func TestEnvFromKernelCopy(t *testing.T) {
	privtest.Deadline(t)
	const pid = 60
	sys := &fakeSystem{gone: map[int]bool{pid: true}}
	d := *sys.deps()
	d.targetIdentity = func(int) (snapshot.Identity, error) { return snapshot.Identity{UID: -1}, os.ErrNotExist }
	s := newSession(SessionOptions{}, d)
	s.Event(&tracer.Event{Seq: 1, PID: pid, Kind: tracer.KindExec, Syscall: "execve", Path: "/usr/bin/python3"})
	s.Event(&tracer.Event{Seq: 2, PID: pid, Kind: tracer.KindOpen, Syscall: "openat", Path: "/usr/lib/libcuda.so.1", Ret: 3})
	s.Event(&tracer.Event{Seq: 3, PID: pid, Kind: tracer.KindAPI, Func: "cuInit", Ret: 100, Path: "/usr/lib/libcuda.so.1"})
	s.Event(&tracer.Event{Seq: 4, PID: pid, Kind: tracer.KindEnv, Env: []byte("HOME=/root\x00HF_TOKEN=hf_abcdefghijklmnopqrstuv\x00CUDA_VISIBLE_DEVICES=-1\x00")})
	rep := s.Report(tracer.Spec{Argv: []string{"python3"}}, &tracer.Result{Backend: "ebpf"}, time.Now(), "v-test")
	if !maps.Equal(rep.Snapshot.Env, map[string]string{"CUDA_VISIBLE_DEVICES": "-1"}) {
		t.Errorf("env %v, want only CUDA_VISIBLE_DEVICES=-1", rep.Snapshot.Env)
	}
	for _, e := range rep.Events {
		if e.Kind == tracer.KindEnv || len(e.Env) > 0 {
			t.Errorf("the environment was recorded: %+v", e)
		}
	}
	if !slices.ContainsFunc(rep.Analysis.Findings, func(f analysis.Finding) bool { return f.ID == "cuda-visible-devices-hides-all" }) {
		t.Errorf("findings %v", rep.Analysis.Findings)
	}
}

// A failing process gone before its failure's read still has its container
// named, from the cgroups read at its first event: the LXC payload cgroup
// says which container (TestLXCPlaceholderFile under eBPF found the
// container empty when fakecuda had exited first).
func TestContainerFromIdentityWhenGone(t *testing.T) {
	privtest.Deadline(t)
	const pid = 70
	sys := &fakeSystem{gone: map[int]bool{pid: true}}
	d := *sys.deps()
	alive := true
	d.targetIdentity = func(p int) (snapshot.Identity, error) {
		if !alive {
			return snapshot.Identity{UID: -1}, os.ErrNotExist
		}
		return snapshot.Identity{PID: p, UID: 0}.InCgroupV2("/lxc.payload.gpu1/init.scope"), nil
	}
	d.targetContainer = func(int) (snapshot.Container, bool) { return snapshot.Container{}, false } // gone
	s := newSession(SessionOptions{}, d)
	s.Event(&tracer.Event{Seq: 1, PID: pid, Kind: tracer.KindExec, Syscall: "execve", Path: "/fakecuda"})
	alive = false
	s.Event(&tracer.Event{Seq: 2, PID: pid, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1})
	rep := s.Report(tracer.Spec{Argv: []string{"/fakecuda"}}, &tracer.Result{Backend: "ebpf"}, time.Now(), "v-test")
	if c := rep.Snapshot.Container; c.Runtime != "lxc" || c.ID != "gpu1" {
		t.Errorf("container %+v, want LXC gpu1 from the cgroups read at the exec", c)
	}
}

// The read at a library's open takes only the environment: a process that
// is a zombie by then shows no argv or root, and the first event's read of
// those stays (CI's TestWatchGoneProcess lost the argv and user to it).
func TestLibraryOpenKeepsIdentity(t *testing.T) {
	privtest.Deadline(t)
	const pid = 80
	first := snapshot.Identity{PID: pid, UID: 1000, Argv: []string{"python3", "train.py"}, SameRoot: true, RootKnown: true}
	zombie := false
	sys := &fakeSystem{}
	d := *sys.deps()
	d.targetIdentity = func(int) (snapshot.Identity, error) {
		if zombie {
			return snapshot.Identity{PID: pid, UID: -1, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"}}, nil
		}
		return first, nil
	}
	s := newSession(SessionOptions{}, d)
	s.Event(&tracer.Event{Seq: 1, PID: pid, Kind: tracer.KindExec, Syscall: "execve", Path: "/usr/bin/python3"})
	zombie = true
	s.Event(&tracer.Event{Seq: 2, PID: pid, Kind: tracer.KindOpen, Syscall: "openat", Path: "/usr/lib/libcuda.so.1", Ret: 3})
	id := s.snapper.identity(pid)
	if id == nil || !slices.Equal(id.Argv, first.Argv) || id.UID != 1000 || !id.RootKnown || id.Env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("identity %+v, want the exec's with the library open's environment", id)
	}
}
