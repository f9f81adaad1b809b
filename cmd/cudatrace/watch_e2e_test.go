package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
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
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(errPipe)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
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
	return func() (int, []watch.Line, string) {
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
