package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// openPTY opens a pseudo-terminal pair of the given width.
func openPTY(t *testing.T, cols uint16) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	unlock := 0
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, ptm.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlockpt: %v", e)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: cols}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ptm.Close(); _ = pts.Close() })
	return ptm, pts
}

// runOnTerminal runs cudatrace with stderr on a terminal (stdout piped)
// and returns what the terminal got.
func runOnTerminal(t *testing.T, args ...string) (screen string, stdout string) {
	t.Helper()
	needBinaries(t)
	ptm, pts := openPTY(t, 120)
	cmd := exec.Command(cudatraceBin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, pts
	cmd.Env = append(os.Environ(), "TERM=xterm")
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ptm) // EIO once every writer has closed
		got <- string(b)
	}()
	err, hung := runGuarded(cmd)
	_ = pts.Close()
	if hung {
		t.Fatalf("%v hung", args)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		return s, out.String()
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal never closed")
	}
	return "", ""
}

// On a terminal, a status line is redrawn in place while tracing and
// erased before the report.
func TestStatusLineOnTerminal(t *testing.T) {
	screen, _ := runOnTerminal(t, "--backend", "ptrace", "--", "/bin/sh", "-c", "sleep 0.5")
	i := strings.Index(screen, "\rcudatrace: tracing sh: ")
	if i < 0 {
		t.Fatalf("no status line on the terminal:\n%q", screen)
	}
	erase := strings.Index(screen[i:], "\r\x1b[K")
	report := strings.Index(screen, "Trace: backend: ptrace")
	if erase < 0 || report < i+erase {
		t.Errorf("the status line is not erased before the report:\n%q", screen)
	}
	if strings.Contains(screen[i:i+erase], "\n") {
		t.Errorf("the status line is not redrawn in place:\n%q", screen[i:i+erase])
	}
	if strings.Contains(screen, "Ctrl-C to stop") {
		t.Error("a launched target's status says Ctrl-C to stop")
	}
}

// Attached, the line says how to stop.
func TestStatusLineAttached(t *testing.T) {
	privtest.RequireRoot(t)
	sleeper := exec.Command("/bin/sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	time.Sleep(50 * time.Millisecond)
	screen, stdout := runOnTerminal(t, "--backend", "ptrace", "--duration", "400ms", "-p", strconv.Itoa(sleeper.Process.Pid))
	if !strings.Contains(screen, "cudatrace: tracing sleep["+strconv.Itoa(sleeper.Process.Pid)+"]: 0 NVIDIA calls, 0 failed · Ctrl-C to stop") {
		t.Errorf("no attach status line:\n%q", screen)
	}
	if !strings.Contains(stdout, "Trace:") {
		t.Errorf("attached, the report is not on stdout: %q", stdout)
	}
}

// Not a terminal: no status line at all (the other tests' piped stderr
// would show one).
func TestNoStatusLineWhenPiped(t *testing.T) {
	needBinaries(t)
	r := runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "--", "/bin/sh", "-c", "sleep 0.3"))
	if strings.Contains(r.stderr, "cudatrace: tracing") || strings.Contains(r.stderr, "\r") {
		t.Errorf("status line on a pipe:\n%q", r.stderr)
	}
}

func TestStatusText(t *testing.T) {
	s := &statusLine{width: 40, target: "python3"}
	for range 3 {
		s.count(&tracer.Event{Kind: tracer.KindOpen, Ret: 3})
	}
	s.count(&tracer.Event{Kind: tracer.KindOpen, Ret: -1})
	s.count(&tracer.Event{Kind: tracer.KindAPI, Ret: 999})
	s.count(&tracer.Event{Kind: tracer.KindExit})
	// execs are not NVIDIA calls either, failed or not.
	s.count(&tracer.Event{Kind: tracer.KindExec, Ret: 0})
	s.count(&tracer.Event{Kind: tracer.KindExec, Ret: -2})
	if got, want := s.text(), "cudatrace: tracing python3: 5 NVIDIA c…"; got != want {
		t.Errorf("text() = %q, want %q", got, want)
	}
	s.width = 200
	if got, want := s.text(), "cudatrace: tracing python3: 5 NVIDIA calls, 2 failed"; got != want {
		t.Errorf("text() = %q, want %q", got, want)
	}
	if got := statusTarget([]string{"/tmp/a\x1b]0;x\x07b"}, nil); got != "a?]0;x?b" {
		t.Errorf("statusTarget escapes nothing: %q", got)
	}
}
