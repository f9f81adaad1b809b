package ptrace

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// A signal the target handles must reach it (re-injected, not swallowed).
func TestSignalsReachTarget(t *testing.T) {
	res, _, _ := runLaunch(t, []string{"/bin/sh", "-c", `trap 'exit 9' USR1; kill -USR1 $$; sleep 30; exit 1`}, nil)
	if res.Exit == nil || res.Exit.Code != 9 {
		t.Fatalf("exit = %+v, want 9 from the USR1 trap", res.Exit)
	}
}

// A target that stops itself stays stopped (group-stop, parked with
// PTRACE_LISTEN) until SIGCONT, and then carries on.
func TestGroupStop(t *testing.T) {
	ctx := privtest.Deadline(t)
	ready := filepath.Join(t.TempDir(), "pid")
	script := fmt.Sprintf(`echo $$ > %s.tmp; mv %s.tmp %s; kill -STOP $$; exit 5`, ready, ready, ready)
	done := make(chan runResult, 1)
	go func() {
		res, err := New().Run(ctx, tracer.Spec{Argv: []string{"/bin/sh", "-c", script}}, &collector{})
		done <- runResult{res, err}
	}()
	pid := waitStopped(t, ctx, ready, done)
	select {
	case r := <-done:
		t.Fatalf("trace ended while the target was stopped: %+v %v", r.res, r.err)
	default:
	}
	// A stopped tracee shows "t" both in the SIGSTOP's signal-delivery-stop
	// and once parked in the group-stop. A SIGCONT sent in the first is
	// spent before the tracer delivers the SIGSTOP, which then stops the
	// target for good, so SIGCONT is sent again while it is still stopped.
	conts := 0
	for {
		unix.Kill(pid, unix.SIGCONT)
		conts++
		select {
		case r := <-done:
			if r.err != nil || r.res.Exit == nil || r.res.Exit.Code != 5 {
				t.Fatalf("after SIGCONT: %+v %v", r.res, r.err)
			}
			if conts > 1 {
				t.Logf("took %d SIGCONTs (the first raced the stop)", conts)
			}
			return
		case <-time.After(time.Second):
		case <-ctx.Done():
			t.Fatalf("trace still running after %d SIGCONTs", conts)
		}
	}
}

type runResult struct {
	res *tracer.Result
	err error
}

// waitStopped reads the target's PID from ready and waits until it is
// stopped: group-stop ("T") or stopped by the tracer ("t").
func waitStopped(t *testing.T, ctx context.Context, ready string, done <-chan runResult) int {
	t.Helper()
	pid := 0
	for {
		select {
		case <-ctx.Done():
			t.Fatal("target never stopped itself")
		case r := <-done:
			t.Fatalf("trace ended before the target stopped: %+v %v", r.res, r.err)
		case <-time.After(5 * time.Millisecond):
		}
		if pid == 0 {
			b, err := os.ReadFile(ready)
			if err != nil {
				continue
			}
			fmt.Sscanf(string(b), "%d", &pid)
		}
		if st, _ := procStatusField(pid, "State"); strings.HasPrefix(st, "T") || strings.HasPrefix(st, "t") {
			return pid
		}
	}
}

// A thread other than the leader execs: its tid becomes the pid. The
// trace must follow the new program, not hang on the vanished leader.
func TestExecFromThread(t *testing.T) {
	missing := "/dev/nvidia-cudatrace-ptest-missing-" + randName()
	// Major 1 as NVIDIA's: sh's opens of /dev/null are events only when the
	// new program's fds are found under its new tid.
	res, c, _ := runLaunch(t, helperArgv("thread-exec", "/bin/sh", "-c", "/bin/cat "+missing+" 2>/dev/null; exec 2>&-; cat "+missing+"; exec 3</dev/null; exit 4"), []uint32{1})
	evs := c.all()
	if res.Exit == nil || res.Exit.Code != 4 {
		dump(t, evs)
		t.Fatalf("exit = %+v, want 4", res.Exit)
	}
	root := evs[0].PID
	var shExec *tracer.Event
	for i := range evs {
		if evs[i].Kind == tracer.KindExec && evs[i].Path == "/bin/sh" {
			shExec = &evs[i]
		}
	}
	if shExec == nil || shExec.PID != root || shExec.TID != root || shExec.Ret != 0 || shExec.Comm != "sh" {
		dump(t, evs)
		t.Fatalf("exec from a thread = %+v", shExec)
	}
	if n := len(c.where(func(e *tracer.Event) bool { return e.Path == missing })); n != 2 {
		dump(t, evs)
		t.Errorf("%d opens of %s, want 2", n, missing)
	}
	null := c.where(func(e *tracer.Event) bool {
		return e.Kind == tracer.KindOpen && e.Path == "/dev/null" && e.PID == root && e.Flags&unix.O_ACCMODE == unix.O_RDONLY
	})
	if len(null) != 1 || !devIs(null[0].Dev, 1, 3) || null[0].TID != root {
		dump(t, evs)
		t.Errorf("sh's open of /dev/null after the exec from a thread: %+v", null)
	}
	exits := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExit && e.PID == root })
	if len(exits) != 1 || exits[0].ExitCode != 4 {
		t.Errorf("exits of %d: %+v", root, exits)
	}
}

// A launch waits for descendants that outlive the target; cancelling ctx
// then ends the trace and says what was left.
func TestLaunchLeftoverDescendant(t *testing.T) {
	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	defer cancel()
	var sleeper int
	rootDone, waiting := false, false
	c := &collector{}
	c.onAdd = func(e *tracer.Event) {
		if e.Kind == tracer.KindExec && e.Path == "/bin/sleep" {
			sleeper = e.PID
		}
		rootDone = rootDone || (e.Kind == tracer.KindExit && e.ExitCode == 6)
		if rootDone && sleeper != 0 && !waiting {
			waiting = true
			// The target is done; its background sleep is not. Cancel
			// once it sleeps: detached while still loading its libraries,
			// its opens would fail with ENOSYS (the note says so).
			pid := sleeper
			go func() {
				for {
					st, ok := procStatusField(pid, "State")
					if !ok || strings.HasPrefix(st, "S") {
						break
					}
					time.Sleep(time.Millisecond)
				}
				cancel()
			}()
		}
	}
	res, err := New().Run(ctx, tracer.Spec{Argv: []string{"/bin/sh", "-c", "/bin/sleep 300 & exit 6"}}, c)
	if sleeper != 0 {
		defer unix.Kill(sleeper, unix.SIGKILL)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit == nil || res.Exit.Code != 6 || sleeper == 0 {
		dump(t, c.all())
		t.Fatalf("result = %+v, sleeper %d", res, sleeper)
	}
	if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "detached") }) {
		t.Errorf("notes = %q", res.Notes)
	}
	assertUntraced(t, sleeper)
}

// Attaching to a stopped process neither resumes it nor leaves it traced.
func TestAttachStoppedProcess(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	unix.Kill(pid, unix.SIGSTOP)
	for st := ""; !strings.HasPrefix(st, "T"); st, _ = procStatusField(pid, "State") {
		time.Sleep(time.Millisecond)
	}
	_, err := New().Run(privtest.Deadline(t), tracer.Spec{PIDs: []int{pid}, Duration: 100 * time.Millisecond, Debug: os.Getenv("PTEST_DEBUG") != ""}, &collector{})
	if err != nil {
		t.Fatal(err)
	}
	// Right after PTRACE_DETACH the task is briefly runnable on its way
	// back into the group-stop; a resumed sleep would sleep ("S").
	st, _ := procStatusField(pid, "State")
	for deadline := time.Now().Add(10 * time.Second); strings.HasPrefix(st, "R") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		st, _ = procStatusField(pid, "State")
	}
	if !strings.HasPrefix(st, "T") || tracerOf(pid) != 0 {
		t.Fatalf("after detach: state %q, tracer %d; want stopped and untraced", st, tracerOf(pid))
	}
	unix.Kill(pid, unix.SIGCONT)
	for st := "T"; strings.HasPrefix(st, "T"); st, _ = procStatusField(pid, "State") {
		time.Sleep(time.Millisecond)
	}
	unix.Kill(pid, unix.SIGTERM)
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Errorf("sleep ended with %v, want SIGTERM", err)
	}
}

// A process whose leader exits before its other threads: the leader stays
// a zombie, which can neither be seized nor detached, until the last
// thread goes. Attaching to such a process, and detaching from one whose
// leader exited during the trace, must both work.
func TestAttachZombieLeader(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: no portable way to make a leader exit alone")
	}
	for _, exitsDuringTrace := range []bool{false, true} {
		t.Run(fmt.Sprintf("during=%v", exitsDuringTrace), func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			delay := "0"
			if exitsDuringTrace {
				delay = "1"
			}
			node := attachNode(t)
			script := `
import ctypes, os, threading, time
held = os.open("` + node + `", os.O_RDONLY)
def spin():
    while True:
        os.close(os.open("/dev/null", os.O_RDONLY))
        with open("` + log + `", "a") as f: f.write("x\n")
        time.sleep(0.02)
threading.Thread(target=spin).start()
time.sleep(` + delay + `)
ctypes.CDLL(None).pthread_exit(None)
`
			cmd := exec.Command(py, "-c", script)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			pid := cmd.Process.Pid
			waitGrowth(t, log, 2)
			if isZombie(pid) == exitsDuringTrace {
				t.Skip("the leader exited at the wrong time for this case")
			}
			// Trace until the leader is a zombie, then detach.
			res, c := attachUntil(t, pid, []uint32{1}, func(e *tracer.Event) bool { return e.Path == "/dev/null" && isZombie(pid) }, 2)
			// Read from a live thread: the zombie leader's table is gone.
			held := " → " + node + " (c 1:3), held before the attach"
			if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.HasSuffix(n, held) }) {
				t.Errorf("notes = %q, want one ending %q", res.Notes, held)
			}
			for _, e := range c.where(func(e *tracer.Event) bool { return e.Path == "/dev/null" }) {
				if e.PID != pid || e.TID == pid || !devIs(e.Dev, 1, 3) {
					t.Errorf("event = %+v", e)
				}
			}
			waitGrowth(t, log, 3)
			tids, _ := listTasks(pid)
			for _, tid := range tids {
				if tid != pid && tracerOf(tid) != 0 {
					t.Errorf("thread %d still traced", tid)
				}
			}
		})
	}
}
