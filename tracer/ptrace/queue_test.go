package ptrace

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// helperRound: round N M PATH. N threads, released together, each open
// (and close) PATH M times.
func helperRound(args []string) int {
	n, _ := strconv.Atoi(args[0])
	m, _ := strconv.Atoi(args[1])
	path := args[2]
	runtime.LockOSThread() // the workers get threads of their own
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			runtime.LockOSThread()
			defer done.Done()
			ready.Done()
			<-start
			for range m {
				if fd, err := unix.Open(path, unix.O_RDONLY, 0); err == nil {
					unix.Close(fd)
				}
			}
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	return 0
}

// helperSpinExec: spin-exec N PROG ARGS... N threads, the leader among
// them, open /dev/null in a loop (each open a traced stop) while another
// thread execs PROG: the exec from a thread other than the leader meets
// the leader's stops queued.
func helperSpinExec(args []string) int {
	n, _ := strconv.Atoi(args[0])
	argv := args[1:]
	spin := func() {
		for {
			if fd, err := unix.Open("/dev/null", unix.O_RDONLY, 0); err == nil {
				unix.Close(fd)
			}
		}
	}
	runtime.LockOSThread() // the leader spins itself
	for range n - 1 {
		go func() {
			runtime.LockOSThread()
			spin()
		}()
	}
	go func() {
		runtime.LockOSThread()
		time.Sleep(20 * time.Millisecond)
		err := syscall.Exec(argv[0], argv, os.Environ())
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}()
	spin()
	return 0
}

// helperForkExit: fork-exit N MS CODE. N threads fork /bin/true in a loop
// while the leader sleeps MS milliseconds, then exits the process with
// CODE, killing them wherever they are stopped.
func helperForkExit(args []string) int {
	n, _ := strconv.Atoi(args[0])
	ms, _ := strconv.Atoi(args[1])
	code, _ := strconv.Atoi(args[2])
	for range n {
		go func() {
			runtime.LockOSThread()
			for {
				pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
				if err == nil {
					var ws unix.WaitStatus
					unix.Wait4(pid, &ws, 0, nil)
				}
			}
		}()
	}
	time.Sleep(time.Duration(ms) * time.Millisecond)
	unix.Exit(code) // exit_group
	return 0
}

// Threads killed while their stops wait in the queue (the process exits
// meanwhile): each stale stop is dropped. A stale fork event's message is
// the thread's exit code, which was announced as a new thread that never
// exits, and the trace never ended.
func TestStaleStopsOfKilledThreads(t *testing.T) {
	for i := range 10 {
		c := &collector{}
		c.onAdd = func(e *tracer.Event) {
			if e.Kind == tracer.KindExec {
				time.Sleep(2 * time.Millisecond) // long rounds, the forkers stopped in them
			}
		}
		argv := helperArgv("fork-exit", "8", "30", "7")
		res, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: argv}, c)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Exit == nil || res.Exit.Code != 7 {
			t.Fatalf("run %d: exit = %+v, want 7", i, res.Exit)
		}
		root := c.all()[0].PID
		for _, e := range c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExit }) {
			if e.PID < 100 || e.PID == root && e.ExitCode != 7 {
				t.Fatalf("run %d: exit event %+v (the root is %d)", i, e, root)
			}
		}
	}
}

// Threads that stop together are served in rounds, least recently served
// first: none gets ahead of another by more than a few calls while both
// run. wait4 alone reports the newest tracee first, which let one thread
// make nearly all its calls while the others waited.
func TestStopsServedInRounds(t *testing.T) {
	const workers, calls = 4, 100
	b := New().(*Backend)
	c := &collector{}
	// A slow sink makes the tracer the bottleneck, as on a host with a CPU
	// per tracee: every worker is stopped by the time it comes back.
	c.onAdd = func(*tracer.Event) { time.Sleep(time.Millisecond) }
	argv := helperArgv("round", strconv.Itoa(workers), strconv.Itoa(calls), "/dev/null")
	if _, err := b.Run(privtest.Deadline(t), tracer.Spec{Argv: argv, DeviceMajors: []uint32{1}}, c); err != nil {
		t.Fatalf("Run: %v", err)
	}
	opens := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == "/dev/null" })
	count := map[int]int{}
	var order []byte // the workers' calls in the order served, A the first to start
	names := map[int]byte{}
	lead, startLead := 0, -1 // the largest lead of one worker over another while all ran; at the start
	for _, e := range opens {
		count[e.TID]++
		if names[e.TID] == 0 {
			names[e.TID] = byte('A' + len(names))
		}
		order = append(order, names[e.TID])
		lo, hi := calls, 0
		for _, n := range count {
			lo, hi = min(lo, n), max(hi, n)
		}
		if len(count) < workers || hi == calls {
			continue // not all started, or one is done
		}
		if startLead < 0 {
			startLead = hi - lo // the workers are released one after another
		}
		lead = max(lead, hi-lo-startLead)
	}
	if len(count) != workers || len(opens) != workers*calls {
		t.Fatalf("%d opens by %d threads, want %d by %d", len(opens), len(count), workers*calls, workers)
	}
	t.Logf("largest lead %d; served: %s", lead, order)
	// Rounds keep the lead to a few calls (a thread the kernel did not run
	// for a while on a loaded machine can fall behind by some more); wait4
	// alone lets the newest run through nearly all of its calls.
	if lead > calls/4 {
		t.Errorf("one worker got %d calls further ahead of another while both ran (%d each): stops are not served in rounds", lead, calls)
	}
}

// An exec from a thread other than the leader, while the leader and other
// threads keep stopping: the exec waits for its process's queued stops,
// so none of them is served after the new program took the leader's tid.
// Served then, its requests would act on the new program: resume it past
// its exec stop, and the trace would wait forever for the thread that
// exec'd, gone.
func TestExecFromThreadWhileOthersStop(t *testing.T) {
	for i := range 10 {
		c := &collector{}
		// A slow sink: long rounds, every thread stopped in them.
		c.onAdd = func(e *tracer.Event) {
			if e.Path == "/dev/null" {
				time.Sleep(200 * time.Microsecond)
			}
		}
		argv := helperArgv("spin-exec", "4", "/bin/sh", "-c", "exit 5")
		res, err := New().Run(privtest.Deadline(t), tracer.Spec{Argv: argv, DeviceMajors: []uint32{1}}, c)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		evs := c.all()
		if res.Exit == nil || res.Exit.Code != 5 {
			dump(t, evs)
			t.Fatalf("run %d: exit = %+v, want 5", i, res.Exit)
		}
		root := evs[0].PID
		sh := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExec && e.Path == "/bin/sh" })
		if len(sh) != 1 || sh[0].PID != root || sh[0].TID != root || sh[0].Ret != 0 || sh[0].Comm != "sh" {
			dump(t, evs)
			t.Fatalf("run %d: exec of /bin/sh from a thread = %+v", i, sh)
		}
		exits := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExit && e.PID == root })
		if len(exits) != 1 || exits[0].ExitCode != 5 {
			t.Fatalf("run %d: exits of %d: %+v", i, root, exits)
		}
	}
}

// The exec from a thread other than the leader waits while a stop of its
// process is queued (its stop goes to the end, uncounted), and once it
// goes ahead no round is collected until it is over.
func TestExecWaitsForItsProcessStops(t *testing.T) {
	s := newSession(stopSeccomp, tracer.Spec{}, tracer.SinkFunc(func(*tracer.Event) {}))
	leader := &task{tid: 100, tgid: 100}
	thread := &task{tid: 101, tgid: 100}
	other := &task{tid: 200, tgid: 200}
	for _, tk := range []*task{leader, thread, other} {
		s.tasks[tk.tid] = tk
	}
	execve := &syscallInfo{Op: unix.PTRACE_SYSCALL_INFO_SECCOMP, Arch: nativeArch, Nr: unix.SYS_EXECVE}
	seccompStop := unix.WaitStatus(unix.SIGTRAP<<8 | 0x7f | unix.PTRACE_EVENT_SECCOMP<<16)
	s.queue.push(waited{other.tid, seccompStop})
	s.queue.push(waited{leader.tid, seccompStop})
	s.current = waited{thread.tid, seccompStop}
	s.stats.Stops, s.stats.SeccompStops = 3, 3 // the queued stops and this one, counted as handle counts them

	if !s.deferExec(thread, execve, true) {
		t.Fatal("exec went ahead with its leader's stop queued")
	}
	if got := s.queue.buf[s.queue.head:]; len(got) != 3 || got[2] != s.current {
		t.Fatalf("queue after deferring = %v, want the exec's stop last", got)
	}
	if s.stats.Stops != 2 || s.stats.SeccompStops != 2 || s.execs != 0 || thread.execing {
		t.Fatalf("deferred: stats %+v, execs %d: the stop is counted when served", s.stats, s.execs)
	}
	// The leader's stop is served (and the other process's), then the
	// exec's own: now it goes.
	s.queue.pop()
	s.queue.pop()
	s.current, _ = s.queue.pop()
	if s.deferExec(thread, execve, true) {
		t.Fatal("exec deferred with no stop of its process queued")
	}
	if s.execs != 1 || !thread.execing {
		t.Fatalf("exec under way: execs %d, execing %v", s.execs, thread.execing)
	}
	// The leader's own exec kills the other threads but takes no tid.
	if s.deferExec(leader, execve, true) || leader.execing {
		t.Fatal("the leader's exec was deferred or marked")
	}
	s.drop(thread) // its exec stop swaps it in under the leader's tid
	if s.execs != 0 {
		t.Fatalf("execs %d after the exec's thread was dropped", s.execs)
	}

	// Two threads' execs: each waits once at most, or they would wait for
	// each other forever.
	second := &task{tid: 102, tgid: 100}
	s.tasks[thread.tid], s.tasks[second.tid] = thread, second
	s.queue.push(waited{second.tid, seccompStop})
	s.current = waited{thread.tid, seccompStop}
	if !s.deferExec(thread, execve, true) {
		t.Fatal("first exec went ahead with the second's stop queued")
	}
	s.current, _ = s.queue.pop()
	if s.deferExec(second, execve, true) {
		t.Fatal("second exec waits for the first, which waits for it")
	}
	s.current, _ = s.queue.pop()
	if s.deferExec(thread, execve, true) {
		t.Fatal("first exec deferred twice")
	}
	// A thread killed at its exec's entry: its exit, queued behind its
	// stop, must not be served first.
	killed := &task{tid: 103, tgid: 100}
	s.tasks[killed.tid] = killed
	s.queue.push(waited{leader.tid, seccompStop})
	s.queue.push(waited{killed.tid, unix.WaitStatus(unix.SIGKILL)})
	s.current = waited{killed.tid, seccompStop}
	if s.deferExec(killed, execve, true) {
		t.Fatal("a stop deferred behind its own thread's exit")
	}
}

// A process's exit and an exec stop leave no other record of its process:
// the kernel reports a traced leader only once its other threads are
// reaped, and stops an exec only once de_thread has reaped them. A record
// left (a thread that took the leader's tid by its exec and died before
// the exec stop: that exit is the leader's) would never report, and the
// loop would wait for it forever.
func TestNoRecordOutlivesItsProcess(t *testing.T) {
	s := newSession(stopSeccomp, tracer.Spec{}, tracer.SinkFunc(func(*tracer.Event) {}))
	s.root = 100
	leader := &task{tid: 100, tgid: 100}
	execing := &task{tid: 101, tgid: 100, execing: true}
	other := &task{tid: 200, tgid: 200}
	for _, tk := range []*task{leader, execing, other} {
		s.tasks[tk.tid] = tk
	}
	s.execs = 1
	s.handle(100, unix.WaitStatus(9)) // killed by SIGKILL
	if len(s.tasks) != 1 || s.tasks[200] != other || s.execs != 0 {
		t.Fatalf("after the leader's exit: tasks %v, execs %d; want only process 200's", s.tasks, s.execs)
	}
	if s.rootSt == nil || s.rootSt.Signal != 9 {
		t.Errorf("root status %+v", s.rootSt)
	}
}

// Every stop ends in exactly one request (a resume, a listen, a detach)
// or is dropped as stale (its thread killed while it waited), never both
// and never neither: the loop's first invariant, counted, with killed
// threads' late stops (exit_group over forkers), an exec's tid change
// under queued stops, and a group-stop, each with a slow sink (long
// rounds, as on a loaded host).
func TestEveryStopEndsOnce(t *testing.T) {
	for _, w := range []struct {
		name string
		argv []string
		code int
	}{
		{"killed threads", helperArgv("fork-exit", "8", "30", "7"), 7},
		{"exec from a thread", helperArgv("spin-exec", "4", "/bin/sh", "-c", "exit 5"), 5},
		// The child continues the shell ($$ in a subshell too) until it is gone, so the
		// SIGCONT cannot come before the stop for good.
		{"group-stop", []string{"/bin/sh", "-c", `(while kill -CONT $$ 2>/dev/null; do sleep 0.02; done) & kill -STOP $$; exit 3`}, 3},
	} {
		t.Run(w.name, func(t *testing.T) {
			for i := range 5 {
				b := New().(*Backend)
				c := &collector{onAdd: func(*tracer.Event) { time.Sleep(100 * time.Microsecond) }}
				res, err := b.Run(privtest.Deadline(t), tracer.Spec{Argv: w.argv, DeviceMajors: []uint32{1}}, c)
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				if res.Exit == nil || res.Exit.Code != w.code {
					t.Fatalf("run %d: exit %+v, want %d", i, res.Exit, w.code)
				}
				st := b.Stats()
				if st.Stops == 0 || st.Stops != st.Requests+st.Stale {
					t.Fatalf("run %d: %d stops, %d requests, %d stale: each stop must end exactly once", i, st.Stops, st.Requests, st.Stale)
				}
			}
		})
	}
}
