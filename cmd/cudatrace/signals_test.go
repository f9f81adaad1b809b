package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/procfs"
)

// signalTarget logs every INT, HUP and TERM it receives; TERM ends it
// with status 7.
const signalTarget = `trap 'echo INT >> "$1"' INT; trap 'echo HUP >> "$1"' HUP; trap 'echo TERM >> "$1"; exit 7' TERM
echo ready >> "$1"
while :; do sleep 0.05; done`

func countLine(path, line string) int {
	b, _ := os.ReadFile(path)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l == line {
			n++
		}
	}
	return n
}

// awaitLine waits for line to be logged (a hang guard, not a timing
// assertion), then a little longer, for a duplicate to show up.
func awaitLine(t *testing.T, log, line string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); countLine(log, line) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the target never logged %s", line)
		}
	}
	time.Sleep(300 * time.Millisecond)
	return countLine(log, line)
}

// Each signal reaches a launched target exactly once, however it was
// sent: Ctrl-C in a real terminal (the kernel signals the whole
// foreground group), kill of cudatrace's process group, or kill of
// cudatrace alone (forwarded); and the target's exit status comes back.
func TestSignalsReachTargetOnce(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	type how struct {
		name      string
		tty       bool
		int, term func(pid int, master *os.File) error
	}
	toPID := func(sig syscall.Signal) func(int, *os.File) error {
		return func(pid int, _ *os.File) error { return syscall.Kill(pid, sig) }
	}
	toGroup := func(sig syscall.Signal) func(int, *os.File) error {
		return func(pid int, _ *os.File) error { return syscall.Kill(-pid, sig) }
	}
	ctrlC := func(_ int, master *os.File) error { _, err := master.Write([]byte{3}); return err }
	hows := []how{
		{"pty-ctrl-c", true, ctrlC, toPID(syscall.SIGTERM)},
		{"pty-kill-pid", true, toPID(syscall.SIGINT), toPID(syscall.SIGTERM)},
		{"kill-pgid", false, toGroup(syscall.SIGINT), toGroup(syscall.SIGTERM)},
		{"kill-pid", false, toPID(syscall.SIGINT), toPID(syscall.SIGTERM)},
	}
	for _, backend := range []string{"ebpf", "ptrace"} {
		for _, h := range hows {
			t.Run(backend+"/"+h.name, func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "log")
				cmd := exec.Command(cudatraceBin, "--backend", backend, "--", "/bin/sh", "-c", signalTarget, "sh", log)
				var out bytes.Buffer
				var master *os.File
				if h.tty {
					m, tty, err := pty.Open()
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					master = m
					cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
					// A session of its own, with the pty as its controlling
					// terminal: cudatrace is its foreground process group.
					cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
					defer tty.Close()
					go io.Copy(&out, m)
				} else {
					cmd.Stdout, cmd.Stderr = &out, &out
					cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				pid := cmd.Process.Pid
				defer syscall.Kill(-pid, syscall.SIGKILL)
				awaitLine(t, log, "ready")
				if err := h.int(pid, master); err != nil {
					t.Fatal(err)
				}
				if n := awaitLine(t, log, "INT"); n != 1 {
					t.Errorf("the target got SIGINT %d times, want once", n)
				}
				if err := h.term(pid, master); err != nil {
					t.Fatal(err)
				}
				err, hung := waitGuarded(cmd)
				if hung {
					t.Fatalf("cudatrace did not exit after SIGTERM\n%s", out.String())
				}
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 7 {
					t.Errorf("cudatrace exited with %v, want the target's 7\n%s", err, out.String())
				}
				if n := countLine(log, "TERM"); n != 1 {
					t.Errorf("the target got SIGTERM %d times, want once", n)
				}
			})
		}
	}
}

// tickTarget appends a line to its log every 20 ms, 60 times, then exits
// with status 5.
const tickTarget = `i=0; while [ $i -lt 60 ]; do echo tick >> "$1"; i=$((i+1)); sleep 0.02; done; exit 5`

// SIGCONT sent to cudatrace alone (kill -CONT, a debugger detaching) finds
// the sentinel still stopped: cudatrace waited for a stop that never came
// and hung after its report. Job control (the group stopped and continued,
// as by Ctrl-Z and fg) stops and continues the target, and the run ends
// with its status.
func TestContinueAndJobControl(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	for _, backend := range []string{"ebpf", "ptrace"} {
		for _, jobControl := range []bool{false, true} {
			name := backend + "/cont-to-cudatrace"
			if jobControl {
				name = backend + "/stop-and-continue-group"
			}
			t.Run(name, func(t *testing.T) {
				log := filepath.Join(t.TempDir(), "log")
				cmd, out := startInGroup(t, "--backend", backend, "-q", "--", "/bin/sh", "-c", tickTarget, "sh", log)
				pid := cmd.Process.Pid
				awaitLine(t, log, "tick")
				if jobControl {
					if err := syscall.Kill(-pid, syscall.SIGTSTP); err != nil {
						t.Fatal(err)
					}
					time.Sleep(200 * time.Millisecond) // a tick in flight lands
					before := countLine(log, "tick")
					time.Sleep(300 * time.Millisecond)
					if after := countLine(log, "tick"); after != before {
						t.Errorf("the target ticked %d times while its group was stopped", after-before)
					}
					if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
						t.Fatal(err)
					}
				} else if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				expectExit(t, cmd, out, 5)
				if n := countLine(log, "tick"); n != 60 {
					t.Errorf("the target ticked %d times, want 60", n)
				}
			})
		}
	}
}

// childTargets lists pid's children other than cudatrace's helpers.
func childTargets(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(n); err != nil || st.PPID != pid {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.HasPrefix(string(cmdline), "cudatrace-loader") {
			continue
		}
		out = append(out, n)
	}
	return out
}

// Once the target has exited, cudatrace follows the processes it left
// (here a daemon in a session of its own, which no Ctrl-C reaches); a
// signal to cudatrace then ends that wait instead of going to nobody, and
// the run ends with the target's status.
func TestSignalEndsTheWaitForDescendants(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid (util-linux) not installed")
	}
	for backend, note := range map[string]string{
		"ebpf":   "trace stopped by a signal; the target had exited, its descendants",
		"ptrace": "were detached and run on under the seccomp filter",
	} {
		t.Run(backend, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "daemon")
			cmd, out := startInGroup(t, "--backend", backend, "--", "/bin/sh", "-c",
				// Its own stdio: holding cudatrace's output pipe, the
				// daemon would keep Wait waiting for the pipe's end.
				`setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > "$1"; exit 4`, "sh", pidFile)
			pid := cmd.Process.Pid
			var daemon int
			for deadline := time.Now().Add(30 * time.Second); daemon == 0 || len(childTargets(pid)) > 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the target did not exit leaving its daemon\n%s", out.String())
				}
				if b, err := os.ReadFile(pidFile); err == nil {
					daemon, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				}
			}
			defer syscall.Kill(daemon, syscall.SIGKILL)
			time.Sleep(200 * time.Millisecond) // cudatrace sees the exit
			if err := syscall.Kill(pid, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			expectExit(t, cmd, out, 4)
			if !strings.Contains(out.String(), note) {
				t.Errorf("report does not say the daemon was left (%q)\n%s", note, out.String())
			}
			if unix.Kill(daemon, 0) != nil {
				t.Errorf("the daemon (pid %d) did not survive the end of the trace", daemon)
			}
		})
	}
}

// A reader gone from cudatrace's output pipe (`cudatrace -- job 2>&1 |
// head`) does not kill it with SIGPIPE: the run ends with the target's
// status. The target still gets SIGPIPE's default action (not ignored).
func TestClosedOutputKeepsTargetStatus(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	status := filepath.Join(t.TempDir(), "status")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	cmd := exec.Command(cudatraceBin, "--", "/bin/sh", "-c", `grep SigIgn /proc/self/status > "$1"; exit 3`, "sh", status)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	expectExit(t, cmd, &bytes.Buffer{}, 3)
	b, err := os.ReadFile(status)
	if err != nil {
		t.Fatal(err)
	}
	var mask uint64
	if _, err := fmt.Sscanf(strings.TrimPrefix(string(b), "SigIgn:"), "%x", &mask); err != nil {
		t.Fatalf("target's %q: %v", b, err)
	}
	if mask&(1<<(uint(syscall.SIGPIPE)-1)) != 0 {
		t.Errorf("the target inherited SIGPIPE ignored (SigIgn %x)", mask)
	}
}

// startInGroup starts cudatrace with args in a process group of its own,
// its output collected; the group is killed when the test ends.
func startInGroup(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(cudatraceBin, args...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	return cmd, out
}

// expectExit waits (hang-guarded) for cudatrace and checks that it ended
// with the target's status code.
func expectExit(t *testing.T, cmd *exec.Cmd, out *bytes.Buffer, code int) {
	t.Helper()
	err, hung := waitGuarded(cmd)
	if hung {
		t.Fatalf("cudatrace did not exit\n%s", out.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != code {
		t.Errorf("cudatrace exited with %v, want the target's %d\n%s", err, code, out.String())
	}
}
