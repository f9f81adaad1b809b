package ptrace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/fakelib"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// These tests hold the tracer thread inside the sink (it runs on that
// thread) while the target forks, to force the orders in which wait4
// reports a new child and its creator's fork event. wait4 prefers the
// newest tracee, so the child's stops and exit come first.

func procState(pid int) string {
	st, _ := procStatusField(pid, "State")
	return st
}

// killPending reports whether SIGKILL is pending for pid (or it is gone).
func killPending(pid int) bool {
	for _, field := range []string{"SigPnd", "ShdPnd"} {
		v, ok := procStatusField(pid, field)
		if !ok {
			return true
		}
		mask, _ := strconv.ParseUint(v, 16, 64)
		if mask&(1<<(unix.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

// await polls cond until the deadline, a hang guard and not a timing
// assertion.
func await(deadline time.Time, what string, cond func() bool) error {
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("gave up waiting for " + what)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// childrenOf lists the processes whose parent is pid, and whose argv[0]
// starts with prefix.
func childrenOf(pid int, prefix string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, _ := procStatusField(n, "PPid"); pp != strconv.Itoa(pid) {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.HasPrefix(string(cmd), prefix) {
			out = append(out, n)
		}
	}
	return out
}

type forkRace struct {
	res     *tracer.Result
	err     error
	c       *collector
	held    bool  // the sink held the tracer at the marker
	problem error // from the sink's side of the race
	root    int
}

// runForkRace launches the fork-race helper and, with the tracer held at
// its marker event, lets it fork and calls during with the child's pid and
// the pid of the waker that ran when the trace began. The trace's duration
// ends when expire is closed (during closes it), whatever the clock says.
func runForkRace(t *testing.T, expire <-chan time.Time, during func(child, waker int, deadline time.Time) error) forkRace {
	t.Helper()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	release, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer release.Close()
	marker := "/dev/nvidia-cudatrace-ptest-missing-" + randName()
	// A C target (testdata/fakelib/forkrace.c): plain threads, no runtime
	// that clones or signals by itself while the tracer is held.
	argv := []string{filepath.Join(fakelib.Build(t), "forkrace"), fifo, marker}
	ctx, cancel := context.WithTimeout(privtest.Deadline(t), 60*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()

	var r forkRace
	waker := 0
	r.c = &collector{}
	r.c.onAdd = func(e *tracer.Event) {
		if r.root == 0 {
			r.root = e.PID
			// A zombie's cmdline is empty: find the waker while it runs.
			if w := childrenOf(os.Getpid(), "cudatrace-loader\x00cudatrace-ptrace-waker"); len(w) == 1 {
				waker = w[0]
			}
		}
		if e.Path != marker || r.held {
			return
		}
		r.held = true
		if _, err := release.Write([]byte{1}); err != nil {
			r.problem = err
			return
		}
		var child int
		r.problem = await(deadline, "the target's fork", func() bool {
			kids := childrenOf(e.PID, "")
			if len(kids) == 1 {
				child = kids[0]
			}
			return child != 0
		})
		if r.problem == nil {
			r.problem = during(child, waker, deadline)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Duration only makes the trace one that can expire; expire says when.
		b := &Backend{expiry: expire}
		r.res, r.err = b.Run(ctx, tracer.Spec{Argv: argv, Duration: time.Hour, Debug: os.Getenv("PTEST_DEBUG") != ""}, r.c)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline) + 30*time.Second):
		t.Fatal("Run did not return even after its context was cancelled: the tracer waits for a task that is gone")
	}
	if r.root != 0 && r.res != nil && r.res.Exit == nil {
		// The detached target is this process's child now: reap it.
		unix.Kill(r.root, unix.SIGKILL)
		unix.Wait4(r.root, nil, 0, nil)
	}
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if r.problem != nil {
		t.Fatal(r.problem)
	}
	if ctx.Err() != nil {
		dump(t, r.c.all())
		t.Fatal("the trace ran until its context's deadline: the tracer waited for a task that was gone")
	}
	return r
}

// The trace ends (duration) while a child's first stop and its creator's
// fork event are both pending: the child, met at its stop, is registered
// once, and served (quietly) to its end: its exec works, and the target
// exits 0.
func TestChildDetachedBeforeForkEvent(t *testing.T) {
	expire := make(chan time.Time)
	r := runForkRace(t, expire, func(child, waker int, deadline time.Time) error {
		if err := await(deadline, "the child's first stop", func() bool { return strings.HasPrefix(procState(child), "t") }); err != nil {
			return err
		}
		if waker == 0 {
			return errors.New("no waker process found")
		}
		// The duration ends now, with the child's first stop and its
		// creator's fork event both pending; it has once the waker is dead.
		close(expire)
		return await(deadline, "the trace's duration", func() bool { return strings.HasPrefix(procState(waker), "Z") })
	})
	if !r.held {
		t.Fatal("the marker event never came")
	}
	if r.res.Exit == nil || r.res.Exit.Code != 0 || !strings.Contains(strings.Join(r.res.Notes, "\n"), "stays attached") {
		t.Errorf("result = %+v, want the target served to its exit 0", r.res)
	}
}

// After a wake-up the waker is replaced by one that waits for the next
// request. The replacement used to be killed at once, so every wake-up
// spawned and killed another, forever, while the loop still waited for
// tracees (a detached attach burning CPU for minutes).
func TestWakerReplacementWaits(t *testing.T) {
	runtime.LockOSThread() // the waker is this thread's child
	defer runtime.UnlockOSThread()
	w := &waker{pidfd: -1}
	defer w.close()
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	wake := func(expired bool) {
		t.Helper()
		pid := w.child.PID
		w.request(expired)
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL|unix.WNOTHREAD, nil); err != nil || !ws.Signaled() {
			t.Fatalf("waker %d: %v %v", pid, err, ws)
		}
		if !w.reaped(pid) {
			t.Fatalf("waker %d not recognised", pid)
		}
	}
	wake(true)
	next := w.child
	if next == nil {
		t.Fatal("no waker after the duration expired: a cancel could no longer wake the tracer")
	}
	if st := procState(next.PID); strings.HasPrefix(st, "Z") || killPending(next.PID) {
		t.Fatalf("the replacement waker %d is being killed already (state %q)", next.PID, st)
	}
	wake(false)
	if w.child != nil {
		t.Errorf("a waker was started with both requests made: nothing is left to wake for")
	}
}

// Children that die at once (Go's pidfd probe does this on a program's
// first fork): wait4 prefers the newest tracee, so a child's first stop,
// its exit stop and its exit can all come before its creator's fork
// event. The tracer registered the child again from that late event and
// then waited for it forever (fakecuda --fork-depth 2 under load). The
// race is won most often with the tracer and the target on one CPU, so the
// test re-runs itself pinned to one.
func TestChildGoneBeforeForkEvent(t *testing.T) {
	const n = "3000"
	if os.Getenv("PTEST_PINNED") == "" {
		runtime.LockOSThread() // the child inherits this thread's affinity
		defer runtime.UnlockOSThread()
		var all, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &all); err != nil {
			t.Fatal(err)
		}
		for cpu := 0; cpu < 1024; cpu++ {
			if all.IsSet(cpu) {
				one.Set(cpu)
				break
			}
		}
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Fatal(err)
		}
		self, _ := os.Executable()
		cmd := exec.Command(self, "-test.run", "^TestChildGoneBeforeForkEvent$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "PTEST_PINNED=1")
		out, err := cmd.CombinedOutput()
		unix.SchedSetaffinity(0, &all)
		if err != nil || !strings.Contains(string(out), "--- PASS: TestChildGoneBeforeForkEvent") {
			t.Fatalf("pinned to one CPU: %v\n%s", err, out)
		}
		return
	}
	ctx, cancel := context.WithTimeout(privtest.Deadline(t), 60*time.Second)
	defer cancel()
	var res *tracer.Result
	var err error
	c := &collector{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = New().Run(ctx, tracer.Spec{Argv: helperArgv("short-children", n), Debug: os.Getenv("PTEST_DEBUG") != ""}, c)
	}()
	deadline, _ := ctx.Deadline()
	select {
	case <-done:
	case <-time.After(time.Until(deadline) + 30*time.Second):
		t.Fatal("Run did not return even after its context was cancelled: the tracer waits for a task that is gone")
	}
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the trace ran until its context's deadline: the tracer waited for a child that was gone")
	}
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("exit = %+v, want 0", res.Exit)
	}
	// Every child's exit is reported, once.
	exits := map[int]int{}
	for _, e := range c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExit }) {
		exits[e.PID]++
	}
	if want, _ := strconv.Atoi(n); len(exits) != want+1 {
		t.Errorf("%d processes exited, want %s children and the target", len(exits), n)
	}
	for pid, k := range exits {
		if k != 1 {
			t.Errorf("process %d exited %d times", pid, k)
		}
	}
}

// While a Run is in progress SIGCHLD is discarded (SIG_DFL), sparing a
// signal delivery per stop; the previous action is back afterwards.
func TestSIGCHLDQuietDuringRun(t *testing.T) {
	var before, during, after kernelSigaction
	if err := rtSigaction(unix.SIGCHLD, nil, &before); err != nil {
		t.Fatal(err)
	}
	if before.handler == sigDFL || before.handler == sigIGN {
		t.Fatalf("SIGCHLD action %#x before the run: want the Go runtime's handler", before.handler)
	}
	c := &collector{onAdd: func(*tracer.Event) {
		if during.handler == 0 && during.flags == 0 {
			rtSigaction(unix.SIGCHLD, nil, &during)
		}
	}}
	if _, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: []string{"/bin/true"}}, c); err != nil {
		t.Fatal(err)
	}
	rtSigaction(unix.SIGCHLD, nil, &after)
	if len(c.all()) == 0 || during.handler != sigDFL {
		t.Errorf("SIGCHLD handler %#x during the run (%d events), want SIG_DFL", during.handler, len(c.all()))
	}
	if after != before {
		t.Errorf("SIGCHLD action after the run %+v, want %+v back", after, before)
	}
}
