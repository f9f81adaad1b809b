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

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/analysis"
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
	// Its programs are attached (a link is open) and target is in its
	// filter, the map named traced.
	fdinfos, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", tracerPid))
	linked, filtered := false, false
	for _, p := range fdinfos {
		b, _ := os.ReadFile(p)
		linked = linked || strings.Contains(string(b), "prog_id:") && strings.Contains(string(b), "link_type:")
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "map_id:"); ok && !filtered {
				id, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
				filtered = inFilter(ebpf.MapID(id), target)
			}
		}
	}
	return linked && filtered
}

// inFilter says whether map id is a tracer's filter of thread groups and
// holds tgid.
func inFilter(id ebpf.MapID, tgid int) bool {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return false // freed meanwhile
	}
	defer m.Close()
	var v uint8
	info, err := m.Info()
	return err == nil && info.Name == "traced" && m.Lookup(uint32(tgid), &v) == nil
}

// startAttach starts cudatrace attached to pid with no end but a signal,
// and returns once pid is in its trace.
func startAttach(t *testing.T, backend string, env *scenario.Env, pid int, out string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(cudatraceBin, "--backend", backend, "--proc-devices", env.ProcDevicesPath(), "-p", strconv.Itoa(pid), "-o", out)
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	for i := 0; i < 1000 && !attachedBy(backend, cmd.Process.Pid, pid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if !attachedBy(backend, cmd.Process.Pid, pid) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("cudatrace never attached to %d; stderr:\n%s", pid, stderr.String())
	}
	return cmd, stderr
}

// interrupt ends an attach as Ctrl-C does and returns cudatrace's exit
// status.
func interrupt(t *testing.T, cmd *exec.Cmd, stderr *strings.Builder) int {
	t.Helper()
	cmd.Process.Signal(syscall.SIGINT)
	err, hung := waitGuarded(cmd)
	if hung {
		t.Fatalf("cudatrace hung after SIGINT; stderr:\n%s", stderr.String())
	}
	noCrash(t, stderr.String())
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return 0
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
				cmd, stderr := startAttach(t, b, env, pid, out)
				// The second line printed after the attach comes from an
				// iteration (spawner: a child) begun after it, whose
				// failing call is then in the trace. Ctrl-C ends the attach.
				n := lines.count()
				if !lines.waitFor(n + 2) {
					t.Fatalf("target stopped printing under the trace (%d lines)", lines.count())
				}
				if code := interrupt(t, cmd, stderr); code != exitFound {
					t.Errorf("exit %d after SIGINT, want %d (a failing call was found); stderr:\n%s", code, exitFound, stderr.String())
				}
				checkAttachReport(t, b, out, pid, tc.spawner)

				// Detached: still running, still printing, no longer traced.
				n = lines.count()
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
	// The open or libcuda's retry of it without O_CLOEXEC: an attach can
	// land between the two, and the first failure traced is then the
	// retry (seen on 6.12 under TCG). Either is the denied call.
	f := rep.Analysis.Failing
	if f == nil || f.Path != "/dev/nvidia-uvm" || f.Errno() != unix.EPERM || f.Flags != openFlags && f.Flags != unix.O_RDWR {
		t.Fatalf("failing call %+v, want openat /dev/nvidia-uvm O_RDWR(|O_CLOEXEC) EPERM", f)
	}
	if finding(rep, "cgroup2-denied") == nil || finding(rep, "cgroup2-denied").Severity != analysis.SeverityError {
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

// A call already blocked when cudatrace attaches (an open of a FIFO named
// like an NVIDIA node, waiting for a writer) ends after the attach, failed
// (the target is killed). Its entry was never seen: the eBPF side took such
// exits for calls a seccomp filter refused before the kernel ran them and
// reported this one so, from its registers at exit. The target has no
// filter: the call is not reported as refused.
func TestAttachCallInFlight(t *testing.T) {
	needBinaries(t)
	t.Parallel()
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			privtest.RequireRoot(t)
			env := standIn()
			env.Prepare(t)
			const fifo = "/dev/nvidia-inflight"
			target, _ := startTarget(t, env, "/bin/sh", "-c", "mkfifo "+fifo+" && echo ready && exec 3<"+fifo)
			pid := target.Process.Pid
			inOpen := func() bool {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
				f := strings.Fields(string(b))
				return len(f) > 0 && f[0] == strconv.Itoa(unix.SYS_OPENAT)
			}
			for i := 0; i < 1000 && !inOpen(); i++ {
				time.Sleep(10 * time.Millisecond)
			}
			if !inOpen() {
				t.Fatalf("target %d never blocked in the open of %s", pid, fifo)
			}
			out := filepath.Join(t.TempDir(), "r.json")
			cmd, stderr := startAttach(t, b, env, pid, out)
			// The open fails with ERESTARTSYS on its way out (the target dies
			// of the signal); the attach ends with the target.
			if err := target.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			_, hung := waitGuarded(cmd)
			if hung {
				t.Fatalf("cudatrace hung after its target died; stderr:\n%s", stderr.String())
			}
			noCrash(t, stderr.String())
			rep, err := report.LoadFile(out)
			if err != nil {
				t.Fatalf("load report: %v; stderr:\n%s", err, stderr.String())
			}
			// ptrace sees its exit with its registers and may record it as
			// an open that failed; eBPF, not having seen it begin, drops it.
			for _, e := range rep.Events {
				if e.NoEntry {
					t.Errorf("call begun before the attach reported as never run: %+v", e)
				}
			}
			if f := finding(rep, "seccomp-denied"); f != nil {
				t.Errorf("reported as refused by seccomp: %+v", f)
			}
		})
	}
}
