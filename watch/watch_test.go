package watch

import (
	"bytes"
	"golang.org/x/sys/unix"

	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Three processes interleaved: one whose uvm node is missing, one whose
// nvidiactl open is refused, one that starts CUDA fine (with a harmless
// failed ioctl). Each failure gets exactly one line with its own cause
// and identity; the healthy one none; every state is gone at its exit.
func TestInterleavedProcesses(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{10: podCg, 12: "/system.slice/docker-" + ctrID + ".scope", 13: "/user.slice/user-1000.slice/session-2.scope"}}
	events := interleave(
		append(missingUVM(10, "python3"), exitOf(10, 1)),
		append(deniedCtl(12, "trainer"), exitOf(12, 1)),
		append(healthyStart(13, "python3"), exitOf(13, 0)),
	)
	var live []int
	b := &fakeBackend{events: events, before: func(_ int, w *watcher) { live = append(live, len(w.procs)) }}
	w, sum, out := watchWith(t, b, h, nil)
	if !b.spec.HostWide || b.spec.Stats == nil {
		t.Errorf("the backend got HostWide %v, Stats set %v: want a host-wide trace with live stats", b.spec.HostWide, b.spec.Stats != nil)
	}
	lines := byPID(parseLines(t, out))
	if len(lines) != 2 || len(lines[10]) != 1 || len(lines[12]) != 1 {
		t.Fatalf("lines by PID %v, want exactly one for 10 and one for 12:\n%s", lines, out)
	}
	l := lines[10][0]
	if l.Cause != "node-missing" || !slices.Contains(l.Findings, "node-missing") || l.Fix == "" {
		t.Errorf("pid 10: cause %q findings %v fix %q, want node-missing with its fix", l.Cause, l.Findings, l.Fix)
	}
	if l.Comm != "python3" || l.Cgroup != podCg || l.Runtime != "kubernetes" || l.ContainerID != ctrID || l.PodUID != podUID {
		t.Errorf("pid 10 identity: comm %q cgroup %q runtime %q container %q pod %q", l.Comm, l.Cgroup, l.Runtime, l.ContainerID, l.PodUID)
	}
	if l.UID != 1000 || l.User != "alice" || l.Host != "gpu-node-7" || !slices.Equal(l.Argv, []string{"python3", "train.py", "10"}) {
		t.Errorf("pid 10: uid %d user %q host %q argv %q", l.UID, l.User, l.Host, l.Argv)
	}
	if l.CUDA == nil || l.CUDA.Func != "cuInit" || l.CUDA.Code != 999 || l.CUDA.Name != "CUDA_ERROR_UNKNOWN" {
		t.Errorf("pid 10 cuda %+v, want cuInit 999 CUDA_ERROR_UNKNOWN", l.CUDA)
	}
	if !strings.Contains(l.Verdict, "/dev/nvidia-uvm") || l.Incomplete {
		t.Errorf("pid 10 verdict %q incomplete %v", l.Verdict, l.Incomplete)
	}
	if k := lines[12][0]; k.Cause != "cgroup-denied-inferred" || k.Runtime != "docker" || k.ContainerID != ctrID || k.PodUID != "" || k.Comm != "trainer" {
		t.Errorf("pid 12: cause %q runtime %q container %q pod %q comm %q", k.Cause, k.Runtime, k.ContainerID, k.PodUID, k.Comm)
	}
	if l.ReportID == lines[12][0].ReportID || !reportName.MatchString(l.ReportID+".json") {
		t.Errorf("report IDs %q and %q: want two distinct report names", l.ReportID, lines[12][0].ReportID)
	}
	if len(w.procs) != 0 || len(w.skip) != 0 {
		t.Errorf("after every exit %d processes and %d left-out ones still held", len(w.procs), len(w.skip))
	}
	if m := slices.Max(live); m != 3 {
		t.Errorf("at most %d processes held at once, want the 3 alive together", m)
	}
	if sum.Processes != 3 || sum.Diagnosed != 2 || sum.Healthy != 1 || sum.Unfinished != 0 {
		t.Errorf("summary %+v, want 3 processes, 2 diagnosed, 1 healthy", *sum)
	}
	// The healthy process's ioctl triggered its snapshot; nothing else
	// was collected (no exit snapshot for a process nobody reports).
	if got := h.snapshotted(); len(got) != 3 {
		t.Errorf("snapshots of %v, want one per process that triggered (10, 12, 13)", got)
	}
}

// Each process's state exists from its first event to its exit: a run of
// short processes one after another never holds more than one.
func TestStateDroppedAtExit(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{}}
	var events []tracer.Event
	for pid := 100; pid < 150; pid++ {
		h.cgroups[pid] = "/"
		events = append(events, healthyStart(pid, "nvidia-smi")...)
		events = append(events, exitOf(pid, 0))
	}
	most := 0
	b := &fakeBackend{events: events, before: func(_ int, w *watcher) { most = max(most, len(w.procs)) }}
	w, sum, out := watchWith(t, b, h, nil)
	if out != "" || most > 1 || len(w.procs) != 0 || sum.Healthy != 50 {
		t.Errorf("out %q, at most %d held, %d at the end, %d healthy; want no line, 1, 0, 50", out, most, len(w.procs), sum.Healthy)
	}
}

func TestVerbosePrintsHealthy(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{13: "/"}}
	b := &fakeBackend{events: append(healthyStart(13, "python3"), exitOf(13, 0))}
	_, sum, out := watchWith(t, b, h, func(o *Options) { o.Verbose = true })
	lines := parseLines(t, out)
	if len(lines) != 1 || lines[0].PID != 13 || lines[0].Cause != "" || lines[0].Report != "" {
		t.Fatalf("lines %+v, want one for the healthy pid 13 without a cause", lines)
	}
	if !strings.Contains(lines[0].Verdict, "cuInit succeeded") || lines[0].CUDA == nil || lines[0].CUDA.Code != 0 {
		t.Errorf("verdict %q cuda %+v", lines[0].Verdict, lines[0].CUDA)
	}
	if sum.Healthy != 1 || sum.Diagnosed != 0 {
		t.Errorf("summary %+v", *sum)
	}
}

// Past MaxProcesses a new process is refused and counted, never followed
// silently; once one exits there is room again.
func TestLiveProcessCap(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{20: "/", 22: "/", 24: "/", 26: "/", 28: "/"}}
	events := interleave(deniedCtl(20, "a"), deniedCtl(22, "b"), deniedCtl(24, "c"), deniedCtl(26, "d"))
	events = append(events, exitOf(20, 1), exitOf(22, 1), exitOf(24, 1), exitOf(26, 1))
	events = append(events, append(deniedCtl(28, "e"), exitOf(28, 1))...)
	m := NewMetrics("v-test")
	w, sum, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) { o.MaxProcesses = 2; o.Metrics = m })
	lines := byPID(parseLines(t, out))
	if len(lines[20]) != 1 || len(lines[22]) != 1 || len(lines[28]) != 1 || len(lines) != 3 {
		t.Errorf("lines for %v, want 20, 22 (within the cap) and 28 (after they exited)", keys(lines))
	}
	if sum.Refused != 2 {
		t.Errorf("refused %d, want 2 (24 and 26)", sum.Refused)
	}
	if got := counterValue(t, m, "cudatrace_processes_refused_total", nil); got != 2 {
		t.Errorf("cudatrace_processes_refused_total %v, want 2", got)
	}
	if len(w.skip) != 0 {
		t.Errorf("%d refused processes still remembered after their exits", len(w.skip))
	}
}

// Drops while a process runs mark its line incomplete; a process that
// started after them is complete.
func TestDropsMarkIncomplete(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{30: "/", 32: "/"}}
	first := append(deniedCtl(30, "early"), exitOf(30, 1))
	events := append(first, append(deniedCtl(32, "late"), exitOf(32, 1))...)
	b := &fakeBackend{events: events, stats: map[int]tracer.LiveStats{
		1:          {Dropped: 5, Following: 1, Followed: 1, SyscallHook: "raw_tracepoint"},
		len(first): {Dropped: 5, Following: 0, Followed: 1, SyscallHook: "raw_tracepoint"},
	}}
	_, sum, out := watchWith(t, b, h, nil)
	lines := byPID(parseLines(t, out))
	if len(lines[30]) != 1 || !lines[30][0].Incomplete {
		t.Errorf("pid 30 (events lost while it ran): %+v, want one incomplete line", lines[30])
	}
	if len(lines[32]) != 1 || lines[32][0].Incomplete {
		t.Errorf("pid 32 (after the loss): %+v, want one complete line", lines[32])
	}
	if sum.Dropped != 5 {
		t.Errorf("summary dropped %d, want 5", sum.Dropped)
	}
}

// SIGTERM (ctx cancelled): the backend stops, the processes that already
// failed and still run are diagnosed, the others counted, and Run returns.
func TestCancelDrains(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{40: "/", 41: "/"}}
	fine := healthyStart(41, "fine")
	fine = slices.Delete(fine, 2, 3) // nothing failed in it: no snapshot, no report
	b := &fakeBackend{events: interleave(deniedCtl(40, "stuck"), fine), block: true}
	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	var out strings.Builder
	w := newWatcher(Options{Backend: b, Out: &out, JSON: true, System: h.system(), identity: h.identity})
	done := make(chan struct{})
	var sum *Summary
	var err error
	go func() {
		defer close(done)
		sum, err = w.run(ctx)
	}()
	time.Sleep(50 * time.Millisecond) // the backend waits for the signal
	select {
	case <-done:
		t.Fatal("Run returned before it was stopped")
	default:
	}
	cancel()
	select {
	case <-done:
	case <-time.After(privtest.Timeout):
		t.Fatal("Run did not return after cancel")
	}
	if err != nil {
		t.Fatal(err)
	}
	lines := parseLines(t, out.String())
	if len(lines) != 1 || lines[0].PID != 40 || lines[0].Cause != "cgroup-denied-inferred" {
		t.Errorf("lines %+v, want one for the failed, still running pid 40", lines)
	}
	if sum.Unfinished != 1 || sum.Diagnosed != 1 || len(w.procs) != 0 {
		t.Errorf("summary %+v, %d held: want 41 unfinished, 40 diagnosed, nothing held", *sum, len(w.procs))
	}
}

func TestFilters(t *testing.T) {
	other := "8b7e2c1d0f9b8a7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
	h := &fakeHost{cgroups: map[int]string{
		50: podCg,
		52: "/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/" + other,
		54: "/kubepodsx/job",
		56: "/system.slice/job.service",
	}}
	events := interleave(
		append(deniedCtl(50, "python3"), exitOf(50, 1)),
		append(deniedCtl(52, "python3"), exitOf(52, 1)),
		append(deniedCtl(54, "python3"), exitOf(54, 1)),
		append(deniedCtl(56, "other"), exitOf(56, 1)),
		append(deniedCtl(58, "python3"), exitOf(58, 1)), // gone before its identity was read
	)
	for _, tt := range []struct {
		name string
		f    Filter
		want []int
	}{
		{"none", Filter{}, []int{50, 52, 54, 56, 58}},
		{"cgroup prefix by component", Filter{CgroupPrefix: "/kubepods"}, []int{52}},
		{"cgroup prefix slice", Filter{CgroupPrefix: "/kubepods.slice/"}, []int{50}},
		{"container prefix", Filter{Container: ctrID[:12]}, []int{50}},
		{"pod", Filter{PodUID: "11111111-2222-3333-4444-555555555555"}, []int{52}},
		{"comm", Filter{Comm: "other"}, []int{56}},
		{"comm and cgroup", Filter{Comm: "python3", CgroupPrefix: "/kubepodsx"}, []int{54}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h.collect = nil
			_, sum, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) { o.Filter = tt.f })
			got := keys(byPID(parseLines(t, out)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("lines for %v, want %v", got, tt.want)
			}
			// Left out before any snapshot work.
			snaps := h.snapshotted()
			slices.Sort(snaps)
			if !slices.Equal(slices.Compact(snaps), tt.want) {
				t.Errorf("snapshots of %v, want only %v", snaps, tt.want)
			}
			if tt.f != (Filter{}) && tt.f.Comm == "" && sum.Filtered != uint64(5-len(tt.want)) {
				t.Errorf("filtered %d, want %d", sum.Filtered, 5-len(tt.want))
			}
		})
	}
}

func TestReportDirKeepsNewest(t *testing.T) {
	privtest.Deadline(t)
	dir := t.TempDir()
	keepMe := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keepMe, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	rd, err := OpenReportDir(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{cgroups: map[int]string{}}
	var events []tracer.Event
	for pid := 60; pid < 65; pid++ {
		h.cgroups[pid] = "/"
		events = append(events, deniedCtl(pid, "job")...)
		events = append(events, exitOf(pid, 1))
	}
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	_, _, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) {
		o.ReportDir = rd
		o.now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(time.Second)
			return clock
		}
	})
	lines := parseLines(t, out)
	slices.SortFunc(lines, func(a, b Line) int { return strings.Compare(a.ReportID, b.ReportID) })
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5", len(lines))
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(names) != 3 {
		t.Fatalf("reports kept %v, want the newest 3", names)
	}
	if _, err := os.Stat(keepMe); err != nil {
		t.Errorf("a file not named as a report was touched: %v", err)
	}
	newest := map[string]bool{}
	for _, l := range lines {
		if l.Report == "" || filepath.Base(l.Report) != l.ReportID+".json" {
			t.Errorf("line's report %q, want DIR/%s.json", l.Report, l.ReportID)
		}
		if _, err := os.Stat(l.Report); err == nil {
			newest[l.ReportID] = true
		}
	}
	for _, l := range lines[2:] {
		if !newest[l.ReportID] {
			t.Errorf("report %s (among the newest 3) was removed", l.ReportID)
		}
	}
	// cudatrace report can render it: it loads and re-analyses the same.
	rep, err := report.LoadFile(lines[4].Report)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Analysis.Findings) == 0 || rep.Analysis.Findings[0].ID != lines[4].Cause || rep.Target.PIDs[0] != lines[4].PID {
		t.Errorf("saved report: findings %v pids %v, want %s for pid %d", rep.Analysis.Findings, rep.Target.PIDs, lines[4].Cause, lines[4].PID)
	}
	// A restart counts what is there: one more report keeps it at 3.
	rd2, err := OpenReportDir(dir, 3)
	if err != nil || len(rd2.kept) != 3 {
		t.Fatalf("reopened: %v, %d kept, want 3", err, len(rd2.kept))
	}
}

func TestReportDirRefusesBadDirs(t *testing.T) {
	privtest.Deadline(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ dir, want string }{
		{filepath.Join(dir, "missing"), "no such file"},
		{file, "not a directory"},
	} {
		if _, err := OpenReportDir(tt.dir, 10); err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("OpenReportDir(%s) = %v, want one line saying %q", tt.dir, err, tt.want)
		}
	}
	if _, err := OpenReportDir(dir, 0); err == nil {
		t.Error("--report-keep 0 accepted")
	}
}

// On a terminal the line is readable, and what the target chose (its comm,
// the verdict quoting its paths) cannot reach the terminal raw.
func TestReadableLineEscapes(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{70: "/evil\x1b]0;pwned\x07"}}
	evil := "py\x1b[2Jthon\n"
	b := &fakeBackend{events: append(deniedCtl(70, evil), exitOf(70, 1))}
	_, _, out := watchWith(t, b, h, func(o *Options) { o.JSON = false })
	if strings.ContainsAny(out, "\x1b\x07") || strings.Count(out, "\n") != 1 {
		t.Fatalf("raw control characters or extra lines reached the terminal: %q", out)
	}
	if !strings.Contains(out, `py\x1b[2Jthon\n[70]`) || !strings.Contains(out, "[cgroup-denied-inferred]") || !strings.Contains(out, "Fix: ") {
		t.Errorf("readable line %q", out)
	}
}

func keys(m map[int][]Line) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A library probed only after the process opened it (Unprobed): the report
// must not claim CUDA's return codes were seen.
func TestUnprobedLibraryNoAPIClaim(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{90: "/"}}
	evs := []tracer.Event{
		{PID: 90, TID: 90, Comm: "late", Kind: tracer.KindOpen, Syscall: "openat", Path: "/usr/lib/libcuda.so.1", Ret: 3, Unprobed: true},
		{PID: 90, TID: 90, Comm: "late", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: -1},
		exitOf(90, 1),
	}
	dir := t.TempDir()
	rd, err := OpenReportDir(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	_, _, out := watchWith(t, &fakeBackend{events: evs}, h, func(o *Options) { o.ReportDir = rd })
	lines := parseLines(t, out)
	if len(lines) != 1 {
		t.Fatalf("lines %+v, want one", lines)
	}
	rep, err := report.LoadFile(lines[0].Report)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Trace.APIReturns || (rep.Analysis.CUDA != nil && rep.Analysis.CUDA.Status == "not-called") {
		t.Errorf("api_returns %v, cuda %+v: the report claims return codes it may have missed", rep.Trace.APIReturns, rep.Analysis.CUDA)
	}
}

// A process reaped before the watch reads its failure: the identity read
// at its first event reaches its snapshot, which reads its cgroup's policy
// from it; the line's user is the one its UID names there, its argv the
// one read at the first event.
func TestGoneProcessKeepsItsIdentity(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{50: podCg}}
	reaped := map[int]bool{}
	var got []*snapshot.Identity
	sys := h.system()
	sys.TargetIdentity = func(pid int) (snapshot.Identity, error) {
		if reaped[pid] {
			return snapshot.Identity{UID: -1}, os.ErrNotExist
		}
		return h.identity(pid)
	}
	sys.Collect = func(o snapshot.Options) *snapshot.Snapshot {
		got = append(got, o.Identity)
		// As the collector gives it for a process gone, its identity known.
		return &snapshot.Snapshot{
			Process:     snapshot.Process{PID: o.PID, UID: 1000, User: "alice"},
			TargetLost:  true,
			ProcDevices: []snapshot.DriverMajor{{Major: 195, Name: "nvidia-frontend"}},
			Nodes:       []snapshot.Node{{Path: "/dev/nvidiactl", Exists: true, Type: "c", Major: 195, Minor: 255, Mode: 0o666}},
			CgroupV2:    &snapshot.CgroupV2{Path: o.Identity.Cgroup, ReadAfterExit: true},
		}
	}
	identity := func(pid int) (snapshot.Identity, error) {
		id, err := h.identity(pid)
		id.PID, id.UID = pid, 1000
		reaped[pid] = true // gone right after its first event is read
		return id, err
	}
	events := append(deniedCtl(50, "python3"), exitOf(50, 1))
	_, _, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) { o.System, o.identity = sys, identity })
	lines := parseLines(t, out)
	if len(lines) != 1 {
		t.Fatalf("lines %+v, want one", lines)
	}
	if len(got) == 0 {
		t.Fatal("no snapshot taken")
	}
	for _, id := range got {
		if id == nil || id.PID != 50 || id.Cgroup != podCg || id.UID != 1000 {
			t.Errorf("a snapshot got identity %+v, want the one read at the first event", id)
		}
	}
	l := lines[0]
	if l.UID != 1000 || l.User != "alice" || !slices.Equal(l.Argv, []string{"python3", "train.py", "50"}) || l.Cgroup != podCg {
		t.Errorf("uid %d user %q argv %q cgroup %q", l.UID, l.User, l.Argv, l.Cgroup)
	}
}

// A wrapper moved into the job's cgroup before it execs the job: a
// snapshot that finds the process gone uses the cgroup read at the exec,
// not the one of its first event.
func TestExecRereadsTheIdentity(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{60: "/user.slice/session-1.scope"}}
	var got []*snapshot.Identity
	sys := h.system()
	collect := sys.Collect
	sys.Collect = func(o snapshot.Options) *snapshot.Snapshot {
		got = append(got, o.Identity)
		return collect(o)
	}
	// Reaped by its failure: only the first event's and the exec's reads.
	reaped := false
	sys.TargetIdentity = func(pid int) (snapshot.Identity, error) {
		if reaped {
			return snapshot.Identity{UID: -1}, os.ErrNotExist
		}
		return h.identity(pid)
	}
	events := []tracer.Event{
		{PID: 60, TID: 60, Comm: "sh", Kind: tracer.KindOpen, Syscall: "openat", Path: "/proc/driver/nvidia/params", Ret: 3},
		// The event's argv is cut to what the kernel side copies; /proc
		// has it whole.
		{PID: 60, TID: 60, Comm: "python3", Kind: tracer.KindExec, Syscall: "execve", Argv: []string{"python3", "job.py", "--a-long-arg-cu"}},
	}
	whole := []string{"python3", "job.py", "--a-long-arg-cut-by-the-kernel-side"}
	events = append(append(events, deniedCtl(60, "python3")...), exitOf(60, 1))
	b := &fakeBackend{events: events, before: func(i int, _ *watcher) {
		switch i {
		case 1:
			h.mu.Lock()
			h.cgroups[60] = podCg // moved before its exec
			h.argv = map[int][]string{60: whole}
			h.mu.Unlock()
		case 2:
			reaped = true
		}
	}}
	_, _, out := watchWith(t, b, h, func(o *Options) { o.System = sys })
	lines := parseLines(t, out)
	if len(lines) != 1 || !slices.Equal(lines[0].Argv, whole) {
		t.Fatalf("lines %+v, want one with the exec's whole argv, as /proc read it then", lines)
	}
	if len(got) == 0 {
		t.Fatal("no snapshot taken")
	}
	for _, id := range got {
		if id == nil || id.Cgroup != podCg {
			t.Errorf("a snapshot got identity %+v, want the cgroup read at the exec", id)
		}
	}
}

// Reports carry argv, environment and library paths: each is 0600 in a
// directory made 0700, whatever the umask; and a directory swapped for a
// symlink while watch runs is not followed: reports stay in the one first
// opened.
func TestReportDirPrivateAndPinned(t *testing.T) {
	privtest.Deadline(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "reports")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	rd, err := OpenReportDir(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("report directory mode %v (%v), want 0700", st.Mode().Perm(), err)
	}
	elsewhere := filepath.Join(parent, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(parent, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{cgroups: map[int]string{70: "/"}}
	events := append(deniedCtl(70, "job"), exitOf(70, 1))
	_, _, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) { o.ReportDir = rd })
	if lines := parseLines(t, out); len(lines) != 1 || lines[0].ReportID == "" {
		t.Fatalf("lines %v, want one with a report", lines)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("reports written through the swapped-in symlink: %v", ents)
	}
	names, _ := filepath.Glob(filepath.Join(moved, "*.json"))
	if len(names) != 1 {
		t.Fatalf("reports in the directory first opened: %v, want 1", names)
	}
	if st, err := os.Stat(names[0]); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("report mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
}

// A process's --hf-token=... is masked in its JSON line and in its kept
// report, by the rule the environment follows.
func TestArgvSecretsMasked(t *testing.T) {
	privtest.Deadline(t)
	secret := "hf_abcdefghijklmnopqrstuvwxyz"
	argv := []string{"python3", "serve.py", "--hf-token=" + secret, "--password", "hunter2"}
	h := &fakeHost{cgroups: map[int]string{61: "/"}, argv: map[int][]string{61: argv}}
	events := []tracer.Event{{PID: 61, TID: 61, Comm: "python3", Kind: tracer.KindExec, Syscall: "execve", Argv: argv}}
	events = append(append(events, deniedCtl(61, "python3")...), exitOf(61, 1))
	dir := t.TempDir()
	rd, err := OpenReportDir(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	_, _, out := watchWith(t, &fakeBackend{events: events}, h, func(o *Options) { o.ReportDir = rd })
	if strings.Contains(out, secret) || strings.Contains(out, "hunter2") {
		t.Errorf("the JSON line carries the secrets:\n%s", out)
	}
	if lines := parseLines(t, out); len(lines) != 1 || !slices.Contains(lines[0].Argv, "--hf-token=<masked>") {
		t.Errorf("the JSON line does not say the token was masked:\n%s", out)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(names) != 1 {
		t.Fatalf("reports %v, want 1", names)
	}
	b, err := os.ReadFile(names[0])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) || strings.Contains(string(b), "hunter2") {
		t.Errorf("the kept report carries the secrets")
	}
}

// After the watch ends (SIGTERM) the queued diagnoses get DrainTimeout;
// those still queued then are counted as shed, not made, so that watch
// exits within the DaemonSet's grace period however long the backlog.
func TestDrainShedsPastTimeout(t *testing.T) {
	ctx := privtest.Deadline(t)
	h := &fakeHost{cgroups: map[int]string{}}
	var events []tracer.Event
	const failing = 10
	for pid := 100; pid < 100+failing; pid++ {
		h.cgroups[pid] = "/"
		events = append(events, deniedCtl(pid, "job")...)
		events = append(events, exitOf(pid, 1))
	}
	gate := make(chan struct{})
	sys := h.system()
	collect := sys.Collect
	sys.Collect = func(o snapshot.Options) *snapshot.Snapshot {
		<-gate // a slow diagnosis: held until the drain has run out
		return collect(o)
	}
	var out bytes.Buffer
	w := newWatcher(Options{Backend: &fakeBackend{events: events}, Out: &out, JSON: true, Host: "h", Version: "v",
		System: sys, identity: h.identity, DrainTimeout: time.Millisecond})
	go func() {
		for !w.shed.Load() {
			time.Sleep(time.Millisecond)
		}
		close(gate)
	}()
	sum, err := w.run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lines := parseLines(t, out.String())
	if sum.Shed == 0 || sum.Diagnosed+sum.Shed != failing || uint64(len(lines)) != sum.Diagnosed || sum.Diagnosed > workers {
		t.Errorf("diagnosed %d (%d lines), shed %d; want the %d held by the workers diagnosed, the rest of %d shed",
			sum.Diagnosed, len(lines), sum.Shed, workers, failing)
	}
}
