package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// lineCounter counts the lines a running target prints and lets a test
// wait for more.
type lineCounter struct {
	mu    sync.Mutex
	cond  *sync.Cond
	lines []string
	done  bool
}

func countLines(r io.Reader) *lineCounter {
	c := &lineCounter{}
	c.cond = sync.NewCond(&c.mu)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.cond.Broadcast()
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.done = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}()
	return c
}

func (c *lineCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lines)
}

// waitFor waits until n lines have arrived; false if the output ended
// first. The target prints a line every 50ms, so this returns soon.
func (c *lineCounter) waitFor(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.lines) < n && !c.done {
		c.cond.Wait()
	}
	return len(c.lines) >= n
}

// startTarget starts argv inside env, with its stdout counted.
func startTarget(t *testing.T, env *scenario.Env, argv ...string) (*exec.Cmd, *lineCounter) {
	t.Helper()
	cmd := env.Command(t, argv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := countLines(out)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if !lines.waitFor(1) {
		t.Fatalf("target printed nothing; stderr:\n%s", stderr.String())
	}
	return cmd, lines
}

// untraced checks the TracerPid of every thread of pid.
func untraced(pid int) error {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if len(tasks) == 0 {
		return fmt.Errorf("process %d is gone", pid)
	}
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // thread exited
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "TracerPid:"); ok && strings.TrimSpace(v) != "0" {
				return fmt.Errorf("%s: TracerPid %s", st, strings.TrimSpace(v))
			}
		}
	}
	return nil
}

// noOrphanPrograms fails if a BPF program of ours is loaded while no
// process holds it (others may be running their own traces meanwhile).
// Freeing takes an RCU grace period, so it polls for a while.
func noOrphanPrograms(t *testing.T) {
	t.Helper()
	var orphans []string
	for range 50 {
		orphans = orphans[:0]
		held := heldPrograms()
		for id, name := range ourPrograms() {
			if !held[id] {
				orphans = append(orphans, fmt.Sprintf("%d (%s)", id, name))
			}
		}
		if len(orphans) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("BPF programs left loaded after cudatrace exited: %v", orphans)
}

// attachedBy reports whether cudatrace (pid tracer) has attached: for
// ptrace the target's TracerPid, for eBPF a program of ours among its fds.
func attachedBy(backend string, tracerPid, target int) bool {
	if backend == "ptrace" {
		// TracerPid is the tracing thread's id, one of cudatrace's threads.
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", target))
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "TracerPid:"); ok {
				tid := strings.TrimSpace(v)
				_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s", tracerPid, tid))
				return tid != "0" && err == nil
			}
		}
		return false
	}
	fdinfos, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", tracerPid))
	for _, p := range fdinfos {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "prog_id:") && strings.Contains(string(b), "link_type:") {
			return true // a tracepoint link: programs are attached
		}
	}
	return false
}

func TestAttach(t *testing.T) {
	needBinaries(t)
	t.Parallel()
	for _, b := range backends {
		for _, tc := range []struct {
			name string
			// target builds the command; spawner says it starts a new
			// fakecuda process per iteration (children after the attach).
			target  func(env *scenario.Env) []string
			spawner bool
		}{
			{"loop", func(env *scenario.Env) []string {
				return fakecuda(env, "--loop", "0", "--interval", "50ms")
			}, false},
			{"spawner", func(env *scenario.Env) []string {
				return []string{"/bin/sh", "-c", `while :; do "$@"; sleep 0.05; done`, "sh", fakecudaBin, "--proc-devices", env.ProcDevicesPath()}
			}, true},
		} {
			t.Run(b+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				privtest.RequireRoot(t) // after Parallel: a paused test's deadline runs
				env := denyUVM()
				env.Prepare(t)
				target, lines := startTarget(t, env, tc.target(env)...)
				pid := target.Process.Pid
				out := filepath.Join(t.TempDir(), "r.json")
				cmd := exec.Command(cudatraceBin, "--backend", b, "--proc-devices", env.ProcDevicesPath(), "-p", strconv.Itoa(pid), "--duration", "1s", "-o", out)
				r := runBinary(t, cmd)
				if r.code != exitFound {
					t.Errorf("exit %d, want %d (a failing call was found); stderr:\n%s", r.code, exitFound, r.stderr)
				}
				checkAttachReport(t, b, out, pid, tc.spawner)

				// Detached: still running, still printing, no longer traced.
				n := lines.count()
				if !lines.waitFor(n + 3) {
					t.Fatalf("target stopped printing after the detach (%d lines)", n)
				}
				if err := unix.Kill(pid, 0); err != nil {
					t.Errorf("target gone after detach: %v", err)
				}
				if err := untraced(pid); err != nil {
					t.Errorf("still traced after detach: %v", err)
				}
				if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
					if f := strings.Fields(string(st)[strings.LastIndexByte(string(st), ')')+1:]); len(f) > 0 && (f[0] == "t" || f[0] == "T") {
						t.Errorf("target left stopped (state %s)", f[0])
					}
				}
				noOrphanPrograms(t)
			})
		}
		// Ctrl-C ends an attach like --duration does.
		t.Run(b+"/sigint", func(t *testing.T) {
			t.Parallel()
			privtest.RequireRoot(t)
			env := denyUVM()
			env.Prepare(t)
			target, lines := startTarget(t, env, fakecuda(env, "--loop", "0", "--interval", "50ms")...)
			pid := target.Process.Pid
			out := filepath.Join(t.TempDir(), "r.json")
			cmd := exec.Command(cudatraceBin, "--backend", b, "--proc-devices", env.ProcDevicesPath(), "-p", strconv.Itoa(pid), "-o", out)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			// Poll for the attach; a cudatrace that failed early is caught
			// by the exit status check below.
			for i := 0; i < 1000 && !attachedBy(b, cmd.Process.Pid, pid); i++ {
				time.Sleep(10 * time.Millisecond)
			}
			// Let a few iterations happen under the trace.
			n := lines.count()
			lines.waitFor(n + 3)
			cmd.Process.Signal(syscall.SIGINT)
			err, hung := waitGuarded(cmd)
			if hung {
				t.Fatalf("cudatrace hung after SIGINT; stderr:\n%s", stderr.String())
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			noCrash(t, stderr.String())
			if code != exitFound {
				t.Errorf("exit %d after SIGINT, want %d; stderr:\n%s", code, exitFound, stderr.String())
			}
			checkAttachReport(t, b, out, pid, false)
			n = lines.count()
			if !lines.waitFor(n + 3) {
				t.Fatal("target stopped printing after the detach")
			}
			if err := untraced(pid); err != nil {
				t.Errorf("still traced after detach: %v", err)
			}
			noOrphanPrograms(t)
		})
	}
}

func checkAttachReport(t *testing.T, backend, path string, pid int, spawner bool) {
	t.Helper()
	rep, err := report.LoadFile(path)
	if err != nil {
		t.Fatalf("load report: %v", err)
	}
	if rep.Trace.Backend != backend || !rep.Target.Attached || len(rep.Target.PIDs) != 1 || rep.Target.PIDs[0] != pid {
		t.Errorf("report: backend %q attached %v pids %v; want %s, attached to %d", rep.Trace.Backend, rep.Target.Attached, rep.Target.PIDs, backend, pid)
	}
	if rep.Target.Exit != nil {
		t.Errorf("attached target reported as exited: %+v", rep.Target.Exit)
	}
	if rep.Trace.Dropped != 0 || !rep.Trace.Complete {
		t.Errorf("%d events dropped", rep.Trace.Dropped)
	}
	if !strings.Contains(strings.Join(rep.Trace.Notes, "\n"), "before the attach") {
		t.Errorf("notes do not say that calls before the attach are missing: %q", rep.Trace.Notes)
	}
	f := rep.Analysis.Failing
	if f == nil || f.Path != "/dev/nvidia-uvm" || f.Errno() != unix.EPERM || f.Flags != openFlags {
		t.Fatalf("failing call %+v, want openat /dev/nvidia-uvm O_RDWR|O_CLOEXEC EPERM", f)
	}
	if finding(rep, "cgroup2-denied") == nil || finding(rep, "cgroup2-denied").Severity != annotate.SeverityError {
		t.Errorf("findings %v, want cgroup2-denied (snapshot of pid %d %q, cgroup v2 %+v, not read: %q)", findingIDs(rep), rep.Snapshot.Process.PID, rep.Snapshot.Process.Comm, rep.Snapshot.CgroupV2, rep.Snapshot.Unavailable)
	}
	if !spawner {
		if f.PID != pid {
			t.Errorf("failing pid %d, want the attached %d", f.PID, pid)
		}
		return
	}
	// The shell's children started after the attach: they are traced,
	// from their exec on, and the failure is theirs.
	var children []int
	for _, e := range rep.Events {
		if e.Kind == tracer.KindExec && e.Ret == 0 && e.PID != pid && (e.Path == fakecudaBin || len(e.Argv) > 0 && e.Argv[0] == fakecudaBin) {
			children = append(children, e.PID)
		}
	}
	if len(children) == 0 {
		t.Fatalf("no exec of fakecuda by a child of %d traced", pid)
	}
	if f.PID == pid {
		t.Errorf("failing pid %d is the shell's; want a child's", f.PID)
	}
	found := false
	for _, c := range children {
		found = found || c == f.PID
	}
	if !found {
		t.Errorf("failing pid %d is not one of the traced children %v", f.PID, children)
	}
}

func TestAttachNoSuchProcess(t *testing.T) {
	needBinaries(t)
	t.Parallel()
	for _, b := range backends {
		r := runBinary(t, exec.Command(cudatraceBin, "--backend", b, "-p", "2147483646", "--duration", "1s"))
		if r.code != exitFailure {
			t.Errorf("%s: exit %d, want 1; stderr:\n%s", b, r.code, r.stderr)
		}
		oneLineError(t, r, "no such process")
	}
}
