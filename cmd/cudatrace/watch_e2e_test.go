package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/watch"
)

// startWatch runs `cudatrace watch --json --report-dir DIR` in the
// background and returns once it says the host is watched; stop sends
// SIGTERM and returns its exit status and the diagnosis lines.
func startWatch(t *testing.T, reportDir string, extra ...string) (stop func() (int, []watch.Line, string)) {
	t.Helper()
	return startWatchRun(t, reportDir, extra...).stop
}

// watchRun is a running watch: stop ends it; followed waits until it
// follows a PID (its --debug line), so a test's process goes on only once
// the watch has read its identity and probed its library, however slow
// the host.
type watchRun struct {
	stop          func() (int, []watch.Line, string)
	followed      func(pid int)
	pause, resume func()
}

// followedLine is watch --debug's line for a process it starts to follow.
var followedLine = regexp.MustCompile(`^cudatrace watch: PID (\d+) \(.*\): followed `)

func startWatchRun(t *testing.T, reportDir string, extra ...string) *watchRun {
	t.Helper()
	needBinaries(t)
	ctx := privtest.Deadline(t)
	pd := filepath.Join(t.TempDir(), "devices")
	if err := os.WriteFile(pd, []byte(scenario.StandInProcDevices), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"watch", "--json", "--report-dir", reportDir, "--proc-devices", pd,
		"--device-major", "1", "--device-major", "7"}, extra...)
	cmd := exec.CommandContext(ctx, cudatraceBin, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	var mu sync.Mutex
	ready := make(chan struct{})
	drained := make(chan struct{})
	follows := map[int]chan struct{}{} // under mu; closed once followed
	followCh := func(pid int) chan struct{} {
		if follows[pid] == nil {
			follows[pid] = make(chan struct{})
		}
		return follows[pid]
	}
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(errPipe)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
			if m := followedLine.FindStringSubmatch(sc.Text()); m != nil {
				pid, _ := strconv.Atoi(m[1])
				if ch := followCh(pid); !isClosed(ch) {
					close(ch)
				}
			}
			mu.Unlock()
			if strings.Contains(sc.Text(), "watching this host") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-drained:
		_ = cmd.Wait()
		t.Fatalf("watch ended before watching:\n%s", stderr.String())
	case <-ctx.Done():
		t.Fatalf("watch did not start:\n%s", stderr.String())
	}
	run := &watchRun{followed: func(pid int) {
		t.Helper()
		mu.Lock()
		ch := followCh(pid)
		mu.Unlock()
		select {
		case <-ch:
		case <-drained:
			t.Fatalf("watch ended before it followed PID %d:\n%s", pid, stderr.String())
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("watch never followed PID %d (its --debug line):\n%s", pid, stderr.String())
		}
	}}
	signal := func(sig syscall.Signal) func() {
		return func() {
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatalf("watch: %v: %v", sig, err)
			}
		}
	}
	run.pause, run.resume = signal(syscall.SIGSTOP), signal(syscall.SIGCONT)
	run.stop = func() (int, []watch.Line, string) {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-drained
		err := cmd.Wait()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		var lines []watch.Line
		for _, s := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			if s == "" {
				continue
			}
			var l watch.Line
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				t.Errorf("not a JSON line: %q: %v", s, err)
				continue
			}
			lines = append(lines, l)
		}
		mu.Lock()
		defer mu.Unlock()
		noCrash(t, stdout.String()+stderr.String())
		return code, lines, stderr.String()
	}
	return run
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestWatchScenarios: watch runs in the background while the suite's
// scenarios start and fail under a real cgroup v2 device program, a missing
// node and a seccomp filter, and one healthy run. Each failure gets exactly
// one line with its cause and identity (the watch sees the whole host, so
// lines for other processes are ignored, matched by PID); the healthy run
// none; SIGTERM ends it with 0; the reports render.
func TestWatchScenarios(t *testing.T) {
	privtest.RequireRoot(t)
	reports := t.TempDir()
	stop := startWatch(t, reports)

	type run struct {
		name  string
		env   *scenario.Env
		argv  func(env *scenario.Env) []string
		cause string // "" for healthy
		pid   int
		out   string
	}
	seccomp := standIn()
	seccomp.SeccompDeny = []string{"ioctl"}
	missing := standIn()
	missing.Nodes = withoutNode(missing.Nodes, "nvidia-uvm")
	asNobody := func(env *scenario.Env) []string {
		// As root fakecuda (as libcuda) recreates the node.
		return append([]string{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"}, fakecuda(env, lingerArgs...)...)
	}
	// The failing runs linger after their first cuInit, so that the
	// failure snapshot sees them alive: host-wide, nobody holds a process
	// for its snapshot, and one reaped before its events are read is
	// diagnosed from cudatrace's own view (the cgroup's rules inferred).
	lingering := func(env *scenario.Env) []string { return fakecuda(env, lingerArgs...) }
	runs := []*run{
		// Nothing fails: a process that opens and reads a (stand-in)
		// NVIDIA node. fakecuda's healthy run is no healthy trace without
		// its CUDA return code: the stand-in uvm driver fails
		// UVM_INITIALIZE with ENOTTY (see TestHealthy).
		{name: "healthy", env: standIn(), argv: func(*scenario.Env) []string { return []string{"head", "-c", "1", "/dev/nvidiactl"} }},
		{name: "cgroup2", env: denyUVM(), argv: lingering, cause: "cgroup2-denied"},
		{name: "node-missing", env: missing, argv: asNobody, cause: "node-missing"},
		{name: "seccomp", env: seccomp, argv: lingering, cause: "seccomp-denied"},
	}
	for _, r := range runs {
		cmd := r.env.Command(t, r.argv(r.env)...)
		res := runBinary(t, cmd)
		r.pid, r.out = cmd.Process.Pid, res.stdout
		if r.cause != "" && !strings.Contains(res.stdout, "cuInit 999") || r.cause == "" && res.code != 0 {
			t.Fatalf("%s: exit %d, printed %q (stderr %q)", r.name, res.code, res.stdout, res.stderr)
		}
	}
	time.Sleep(500 * time.Millisecond) // the last exit's events reach the watch
	code, lines, stderr := stop()
	if code != 0 {
		t.Errorf("watch exited %d after SIGTERM, want 0\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "processes watched") {
		t.Errorf("no summary on stderr:\n%s", stderr)
	}
	for _, r := range runs {
		var mine []watch.Line
		for _, l := range lines {
			if l.PID == r.pid {
				mine = append(mine, l)
			}
		}
		if r.cause == "" {
			if len(mine) != 0 {
				t.Errorf("%s (pid %d): %d lines for a healthy run: %+v", r.name, r.pid, len(mine), mine)
			}
			continue
		}
		if len(mine) != 1 {
			t.Errorf("%s (pid %d): %d lines, want exactly 1\nall lines: %+v\nstderr:\n%s", r.name, r.pid, len(mine), lines, stderr)
			continue
		}
		l := mine[0]
		if l.Cause != r.cause || l.Comm != "fakecuda" || l.Verdict == "" || l.Fix == "" {
			t.Errorf("%s: cause %q comm %q verdict %q fix %q, want cause %s by fakecuda", r.name, l.Cause, l.Comm, l.Verdict, l.Fix, r.cause)
		}
		if cg := strings.TrimPrefix(r.env.CgroupV2Path(), scenario.CgroupV2Root()); cg != "" && l.Cgroup != cg {
			t.Errorf("%s: cgroup %q, want the scenario's %q", r.name, l.Cgroup, cg)
		}
		if r.name == "node-missing" && l.UID != 65534 {
			t.Errorf("%s: uid %d, want nobody's 65534", r.name, l.UID)
		}
		if l.Incomplete {
			t.Errorf("%s: marked incomplete on an idle test host", r.name)
		}
		rep, err := report.LoadFile(l.Report)
		if err != nil {
			t.Errorf("%s: report %q: %v", r.name, l.Report, err)
			continue
		}
		if len(rep.Target.PIDs) != 1 || rep.Target.PIDs[0] != r.pid || rep.Analysis.Verdict != l.Verdict {
			t.Errorf("%s: the saved report is of %v with verdict %q, want pid %d, %q", r.name, rep.Target.PIDs, rep.Analysis.Verdict, r.pid, l.Verdict)
		}
		// cudatrace report renders it.
		rr := runBinary(t, exec.Command(cudatraceBin, "report", l.Report))
		if rr.code != exitFound || !strings.Contains(rr.stdout, "["+r.cause+"]") {
			t.Errorf("%s: cudatrace report: exit %d\n%s", r.name, rr.code, rr.stdout)
		}
	}
}

// Filters leave a process out before anything is recorded: a watch for one
// cgroup says nothing of a failure elsewhere.
func TestWatchCgroupFilter(t *testing.T) {
	privtest.RequireRoot(t)
	stop := startWatch(t, t.TempDir(), "--cgroup", "/cudatrace-no-such-cgroup")
	env := denyUVM()
	cmd := env.Command(t, fakecuda(env)...)
	res := runBinary(t, cmd)
	if !strings.Contains(res.stdout, "cuInit 999") {
		t.Fatalf("fakecuda printed %q", res.stdout)
	}
	time.Sleep(500 * time.Millisecond)
	code, lines, stderr := stop()
	for _, l := range lines {
		if l.PID == cmd.Process.Pid || !strings.HasPrefix(l.Cgroup, "/cudatrace-no-such-cgroup") {
			t.Errorf("a line past the --cgroup filter: %+v", l)
		}
	}
	if code != 0 {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}

// --backend ptrace is refused in one line before anything starts.
func TestWatchRefusesPtrace(t *testing.T) {
	needBinaries(t)
	privtest.Deadline(t)
	r := runBinary(t, exec.Command(cudatraceBin, "watch", "--backend", "ptrace"))
	if r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "needs the eBPF backend") {
		t.Errorf("exit %d, stderr %q: want 2 and one line", r.code, r.stderr)
	}
	r = runBinary(t, exec.Command(cudatraceBin, "watch", "--report-dir", "/proc/self/status"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "not a directory") {
		t.Errorf("--report-dir FILE: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A failing process that exits right after its failing open (no
// lingering) and is reaped before the watch reads its failure (the watch
// is stopped meanwhile, as one on a loaded node falls behind): its
// snapshot finds it gone. Its device policy is still read from the cgroup
// it was in (which outlives it, as a crash-looping container's does), so
// the cause is the program read, not inferred; argv and user come from
// what was read at its first event. The CUDA app (testdata/fakelib) loads
// libcuda, the watch's first event of it, and calls cuInit only once the
// watch follows it, as a program's imports come before its cuInit.
// fakecuda's first event is microseconds before its exit, so its identity
// is read from a zombie (the cgroup and UID, no argv) or not at all.
func TestWatchGoneProcess(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	w := startWatchRun(t, t.TempDir(), "--debug")
	stop := w.stop

	env := denyUVM()
	apps := startApps(t, w, env, dir, 2, true)
	for _, a := range apps {
		if !strings.Contains(a.out, "cuInit 999") {
			t.Fatalf("app printed %q", a.out)
		}
	}
	fc := env.Command(t, fakecuda(env)...)
	if res := runBinary(t, fc); !strings.Contains(res.stdout, "cuInit 999") {
		t.Fatalf("fakecuda: exit %d, printed %q (stderr %q)", res.code, res.stdout, res.stderr)
	}
	time.Sleep(500 * time.Millisecond) // the exits' events reach the watch
	code, lines, stderr := stop()
	if code != 0 {
		t.Errorf("watch exited %d after SIGTERM, want 0\n%s", code, stderr)
	}
	// watch takes fentry where the kernel allows it, as the matrix's
	// Debian kernels do.
	if want := "syscall hook: fentry"; os.Getenv("CUDATRACE_REQUIRE_FENTRY") == "1" && !strings.Contains(stderr, want) {
		t.Errorf("watch --debug does not say %q:\n%s", want, stderr)
	}
	mine := func(pid int) watch.Line {
		var out []watch.Line
		for _, l := range lines {
			if l.PID == pid {
				out = append(out, l)
			}
		}
		if len(out) != 1 {
			t.Fatalf("%d lines for pid %d, want exactly 1\nall lines: %+v\nstderr:\n%s", len(out), pid, lines, stderr)
		}
		return out[0]
	}
	cg := strings.TrimPrefix(env.CgroupV2Path(), scenario.CgroupV2Root())
	for _, a := range apps {
		pid := a.pid
		l := mine(pid)
		if l.Cause != "cgroup2-denied" || l.Cgroup != cg {
			t.Errorf("app %d: cause %q cgroup %q, want cgroup2-denied (the program read from %s)\n%+v", pid, l.Cause, l.Cgroup, cg, l)
		}
		if len(l.Argv) == 0 || l.Argv[0] != filepath.Join(dir, "app") || l.User != "root" || l.UID != 0 {
			t.Errorf("app %d: argv %q user %q uid %d, want its argv and root", pid, l.Argv, l.User, l.UID)
		}
		if l.CUDA == nil || l.CUDA.Func != "cuInit" || l.CUDA.Code != 999 {
			t.Errorf("app %d: cuda %+v, want cuInit 999", pid, l.CUDA)
		}
		rep, err := report.LoadFile(l.Report)
		if err != nil {
			t.Fatal(err)
		}
		v2 := rep.Snapshot.CgroupV2
		if v2 == nil || v2.Path != cg || len(v2.Programs) != 1 || v2.Programs[0].ID != env.ProgramIDs()[0] {
			t.Errorf("app %d: the report's cgroup v2 %+v, want program %v of %s", pid, v2, env.ProgramIDs(), cg)
			continue
		}
		if !v2.ReadAfterExit {
			t.Errorf("app %d: its cgroup's policy was read before its exit, yet it was reaped before the watch went on", pid)
			continue
		}
		f := finding(rep, "cgroup2-denied")
		if f == nil || f.Inferred || !strings.Contains(strings.Join(f.Detail, "\n"), "The process had exited before its snapshot") {
			t.Errorf("app %d: finding %+v, want cgroup2-denied, not inferred, saying the process was gone", pid, f)
		}
		if rep.Snapshot.Process.PID != pid || rep.Snapshot.Process.Comm != "" || rep.Snapshot.Process.User != "root" {
			t.Errorf("app %d: snapshot process %+v, want its PID and user, no comm (its status was never read); unavailable %q", pid, rep.Snapshot.Process, rep.Snapshot.Unavailable)
		}
	}

	k := mine(fc.Process.Pid)
	t.Logf("fakecuda: cause %q cgroup %q uid %d argv %q", k.Cause, k.Cgroup, k.UID, k.Argv)
	if k.Cgroup == cg && k.Cause != "cgroup2-denied" {
		t.Errorf("fakecuda: its cgroup %s was read (from its zombie), yet cause %q, want cgroup2-denied", cg, k.Cause)
	}
}

// app is one run of the CUDA app (testdata/fakelib).
type app struct {
	pid int
	out string
}

// startApps runs n CUDA apps (testdata/fakelib) in env at once. Each loads
// libcuda and waits before cuInit until the watch follows it (its identity
// read, its libcuda probed), as a program's imports come before its cuInit.
// With behind set the watch is stopped (SIGSTOP) while they run and exit,
// as a watch on a loaded node falls behind: their events wait in the ring
// and each is read after its process was reaped.
func startApps(t *testing.T, w *watchRun, env *scenario.Env, dir string, n int, behind bool) []app {
	t.Helper()
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	var feeds []*os.File
	for range n {
		cmd := env.Command(t, append([]string{"env", "FAKELIB_WAIT=1"}, libTarget(dir)...)...)
		stdin, feed, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdin, cmd.Stdout = stdin, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_ = stdin.Close() // the child has its copy
		cmds, outs, feeds = append(cmds, cmd), append(outs, &out), append(feeds, feed)
	}
	for _, cmd := range cmds {
		w.followed(cmd.Process.Pid)
	}
	if behind {
		w.pause()
		defer w.resume()
	}
	var apps []app
	for i, cmd := range cmds {
		_, _ = feeds[i].Write([]byte("go\n"))
		_ = feeds[i].Close()
		if err, hung := waitGuarded(cmd); hung || err != nil {
			t.Fatalf("app %v: %v (hung %v)", cmd.Args, err, hung)
		}
		apps = append(apps, app{pid: cmd.Process.Pid, out: outs[i].String()})
	}
	return apps
}

// With -v a healthy CUDA start is printed too: cause "", and cuInit's own
// 0, caught by the host-wide uretprobes.
func TestWatchVerboseHealthyCUDA(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	w := startWatchRun(t, t.TempDir(), "-v", "--debug")
	stop := w.stop
	a := startApps(t, w, standIn(), dir, 1, false)[0]
	pid := a.pid
	if !strings.Contains(a.out, "cuInit 0") {
		t.Fatalf("app printed %q", a.out)
	}
	time.Sleep(500 * time.Millisecond)
	code, lines, stderr := stop()
	var mine []watch.Line
	for _, l := range lines {
		if l.PID == pid {
			mine = append(mine, l)
		}
	}
	if len(mine) != 1 || mine[0].Cause != "" || mine[0].CUDA == nil || mine[0].CUDA.Func != "cuInit" || mine[0].CUDA.Code != 0 || mine[0].Report != "" {
		t.Errorf("lines for the healthy app %+v, want one without a cause, with cuInit 0 and no report\nstderr:\n%s", mine, stderr)
	}
	if code != 0 || !strings.Contains(stderr, "healthy") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}
