package ptrace

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/procfs"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/uprobe"
)

// stopMode is how tracees stop on syscalls.
type stopMode int

const (
	// stopSeccomp: a launched target runs under our SECCOMP_RET_TRACE
	// filter and stops only on traced syscalls.
	stopSeccomp stopMode = iota
	// stopEverySyscall: an attached process cannot be given a filter, so
	// it stops at every syscall entry and exit (PTRACE_SYSCALL).
	stopEverySyscall
)

// task is one traced thread.
type task struct {
	tid, tgid int
	comm      string
	fresh     bool  // auto-attached; its first stop is still to come
	call      *call // traced call awaiting its exit stop: nil or &buf
	buf       call
	listening bool // in group-stop, parked with PTRACE_LISTEN
	detaching bool
	stops     int // stops taken by the current traced call
	// exiting: past its PTRACE_EVENT_EXIT stop. A leader that exits before
	// its other threads stays a zombie, which never stops again and is
	// reported only when the whole group is gone.
	exiting bool
	// inSyscall (attach mode): the last syscall stop was an entry, so the
	// next one is its exit. Lets an untraced exit skip GET_SYSCALL_INFO.
	inSyscall bool
	// filtered (launch mode): the task runs under a seccomp filter besides
	// ours, whose refusals our RET_TRACE never sees; it stops at every
	// syscall entry instead, and a traced call with no seccomp stop after
	// its entry is one that filter answered. sawSeccomp: this call's stop.
	filtered, sawSeccomp bool
	// execing: at an execve from a thread other than the leader, which
	// takes the leader's tid if it succeeds (queue.go).
	execing bool
	// deferred: its exec's stop went back to the end of the queue.
	deferred bool
	served   uint64 // the stop count when it was last served (queue.go)
	// fdDir is an O_PATH descriptor of /proc/TID/fd plus one (0: not open
	// yet). A stat relative to it skips the lookups of /proc and the tid,
	// a third of the cost of the stat every ioctl and open takes.
	fdDir int
}

// fds returns t's /proc/TID/fd descriptor, opened on first use; -1 if the
// task is gone.
func (t *task) fds() int {
	if t.fdDir == 0 {
		fd, err := unix.Open("/proc/"+strconv.Itoa(t.tid)+"/fd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1
		}
		t.fdDir = fd + 1
	}
	return t.fdDir - 1
}

// closeFDs closes the /proc descriptor (the task is gone, or changed tid).
func (t *task) closeFDs() {
	if t.fdDir != 0 {
		_ = unix.Close(t.fdDir - 1) // read-only: a failed close loses nothing
		t.fdDir = 0
	}
}

// Stats count ptrace stops, for tests and benchmarks.
type Stats struct {
	Stops        uint64 // every ptrace stop
	SeccompStops uint64 // PTRACE_EVENT_SECCOMP stops (launch mode)
	SyscallStops uint64 // syscall-entry and -exit stops
	TracedCalls  uint64 // traced syscalls (seccomp stops, or entries of traced numbers)
	// MaxStopsPerCall is the most stops one traced syscall took, from its
	// entry (or seccomp) stop to its completion.
	MaxStopsPerCall int
	// Requests are the resumes, listens and detaches that ended a stop;
	// Stale the stops dropped because their thread was killed while they
	// waited (the invariants above handle: Stops = Requests + Stale).
	Requests, Stale uint64
	// Unread are the seccomp, syscall and exec stops resumed unread (their
	// check failed): a call or an exec may be missing from the trace, which
	// says so (Result.Dropped).
	Unread uint64
}

// session is the state of one Run, owned by the tracer thread.
type session struct {
	mode  stopMode
	rules rules
	sink  tracer.Sink
	start time.Time
	seq   uint64
	tasks map[int]*task
	root  int // launched PID, 0 when attaching
	// rootOptions are set on the root at its first seccomp or exec stop,
	// both before its target's first instruction (launch): the loader is seized
	// without PTRACE_O_TRACECLONE, so the Go runtime's threads in it are
	// never traced (each cost the loader's start-up two stops, and its
	// exec waited for the tracer to resume their exit stops; issue 31).
	// Zero once set.
	rootOptions int
	rootSt      *tracer.ExitStatus
	// firstEvent and rootExit are when they came (--debug's timing).
	firstEvent, rootExit time.Duration
	stats                Stats
	// detachAll is set once the trace ends early: every task is
	// interrupted and detached at its next stop.
	detachAll bool
	detached  int // tasks detached before they exited
	// quiet: a launch's duration passed; the tracees are served on, with
	// nothing read or recorded, until they exit.
	quiet  bool
	exited chan<- *tracer.ExitStatus // set with quiet: where the exit goes
	// zombieLeaders are attached processes whose leader had exited already:
	// the last thread's exit is the process's.
	zombieLeaders map[int]bool
	// sigsysRollback are the processes one of whose calls a seccomp filter
	// rolled back for SIGSYS (KILL_PROCESS, TRAP, or KILL_THREAD on the
	// last thread): their threads then die of SIGSYS with the process, not
	// each killed in its own call. Cleared at the process's exit.
	sigsysRollback map[int]bool
	// unannounced are tids met through their own stop or exit before
	// their creator's fork/clone event named them. wait4 prefers the
	// newest tracee, so a child can stop, run and exit (or be detached)
	// before its parent's event is read: that event must not register the
	// tid again, or the loop waits forever for a task that is gone.
	unannounced map[int]bool
	self        int // the tracer thread's tid, as /proc shows a tracee's TracerPid
	waker       *waker
	debug       bool
	// api records CUDA's return codes (api.go); nil where it could not
	// load. apiErr is a failure to say in the result.
	api    uprobe.API
	apiErr string
	// apiLoading (launch): the probes loading in the background, or soon
	// to; the loop installs them at the first stop after they are ready,
	// and waits for them only at a library's open (nothing can call into
	// one before).
	apiLoading *apiLaunch
	apiRes     *tracer.Result
	// awaited (launch): the files the background probing is for, by
	// st_dev and st_ino; each is probed at the exit of its first open,
	// whatever its name, if that comes first (openedAPI).
	awaited map[[2]uint64]bool // where a failed background load is said
	// hold lets the sink read a failing process's view at the exit stop
	// of its failed call, before it can exit (tracer.StopSink).
	hold *tracer.StopHolder
	// queue is the round of stops being served, current the one being
	// handled, execs the execs from threads other than the leader under
	// way (queue.go).
	queue   stopQueue
	current waited
	execs   int
}

func newSession(mode stopMode, spec tracer.Spec, sink tracer.Sink) *session {
	return &session{
		mode:           mode,
		rules:          newRules(spec.DeviceMajors, spec.InbandStatus),
		sink:           sink,
		hold:           tracer.NewStopHolder(sink),
		tasks:          map[int]*task{},
		zombieLeaders:  map[int]bool{},
		sigsysRollback: map[int]bool{},
		unannounced:    map[int]bool{},
		self:           unix.Gettid(),
		debug:          spec.Debug,
	}
}

// drop forgets a task.
func (s *session) drop(t *task) {
	t.closeFDs()
	s.execDone(t)
	if s.tasks[t.tid] == t {
		delete(s.tasks, t.tid)
	}
}

// dropAll forgets every task (the trace is over).
func (s *session) dropAll() {
	for _, t := range s.tasks {
		s.drop(t)
	}
}

func (s *session) emit(t *task, e *tracer.Event) {
	if s.quiet {
		return
	}
	s.seq++
	e.Seq = s.seq
	e.Time = time.Since(s.start)
	if s.seq == 1 {
		s.firstEvent = e.Time
	}
	e.PID, e.TID = t.tgid, t.tid
	if e.Comm == "" {
		e.Comm = t.comm
	}
	s.sink.Event(e)
}

// loop services stops until no tracee is left. shouldStop is checked after
// every wake-up; when it says so, the remaining tasks are detached.
func (s *session) loop(shouldStop func() bool) {
	defer s.dropAll()
	for len(s.tasks) > 0 {
		if !s.detachAll && shouldStop() {
			s.startDetach()
			if len(s.tasks) == 0 {
				break
			}
		}
		w, err := s.next()
		if err != nil {
			// ECHILD: nothing left to wait for (should not happen while
			// tasks remain, but never spin).
			s.debugf("wait4: %v with %d tasks left", err, len(s.tasks))
			return
		}
		if s.waker != nil && s.waker.reaped(w.pid) {
			continue
		}
		s.installAPI(false)
		// What the probes recorded before this stop comes before it.
		s.drainAPI()
		s.current = w
		s.handle(w.pid, w.ws)
	}
}

// The stop-handling invariants. The loop ends only when every task it
// tracks is gone, so each one below is what keeps it from waiting forever
// (or from running a tracee past a stop it never saw):
//
//   - Every stop wait4 reports ends in exactly one request: a resume
//     (PTRACE_CONT or PTRACE_SYSCALL, with the signal a signal-delivery
//     stop was to deliver), PTRACE_LISTEN for a group-stop, or
//     PTRACE_DETACH; or it is dropped, unanswered, because it went stale
//     while queued (below). A handler that returns without one of these
//     leaves its tracee in ptrace_stop for good.
//   - A killed thread's late stops are dropped: SIGKILL (exit_group, an
//     exec's de_thread) wakes a thread out of a stop whose report is still
//     queued, and it stops again at PTRACE_EVENT_EXIT, reported apart. Its
//     queued stop is checked before any request acts on it (the syscall
//     info's op, eventAt for event stops): a request would act on the exit
//     stop, and a stale fork event's message (the exit code) would name a
//     task that never exits. The exit stop itself is always resumed. Only
//     a stop shown to be another one (its syscall info's op) is dropped:
//     one whose check fails is resumed all the same, since under load a
//     live tracee's check failed now and then (cause not found), and
//     dropped, it stayed stopped for good.
//   - Group-stops are parked with PTRACE_LISTEN, not resumed (the process
//     stays stopped, as without a tracer) and not counted as stale; a new
//     task's first stop, PTRACE_EVENT_STOP, is resumed whatever its signal.
//   - An exec from a thread other than the leader changes that thread's
//     tid to the leader's: the old leader vanishes unreported, and the
//     exec stop comes from the leader's tid with the old tid as its event
//     message (execStop moves the record). While it is under way no stop
//     of its process may wait in the queue, since a request meant for the
//     old leader would reach the new program (deferExec, queue.go).
//   - A tid met before its creator's fork/clone event (wait4 reports the
//     newest tracee first) is adopted at once; the event later finds it
//     known, or gone, and registers nothing twice (announce).
func (s *session) handle(pid int, ws unix.WaitStatus) {
	t := s.tasks[pid]
	if t == nil {
		// An auto-attached child whose stop or exit came before its
		// creator's fork event; or a task given up on (an exited leader
		// at detach time).
		s.unannounced[pid] = true
		if !ws.Stopped() {
			s.debugf("exit of untracked tid %d", pid)
			return
		}
		t = s.adopt(pid, 0, "")
	}
	if ws.Exited() || ws.Signaled() {
		s.reap(t, ws)
		return
	}
	if !ws.Stopped() {
		return
	}
	s.stats.Stops++
	t.served = s.stats.Stops
	if t.call != nil {
		t.stops++
	}
	sig := ws.StopSignal()
	event := int(ws>>16) & 0xff
	if s.debug {
		s.debugf("stop tid %d sig %d event %d fresh %v detaching %v call %v", t.tid, sig, event, t.fresh, t.detaching, t.call != nil)
	}
	fresh := t.fresh
	t.fresh, t.listening = false, false
	// Only its filter's stops and the exec come after the release: a stop
	// before it (the runtime's SIGURG) would trace its threads after all.
	if s.rootOptions != 0 && t.tid == s.root && sig == unix.SIGTRAP && (event == unix.PTRACE_EVENT_SECCOMP || event == unix.PTRACE_EVENT_EXEC) {
		if err := setOptions(t.tid, s.rootOptions); err != nil {
			s.debugf("set options of %d: %v", t.tid, err)
		}
		s.rootOptions = 0
	}

	if t.detaching {
		s.detachAt(t, sig, event)
		return
	}
	switch {
	case sig == unix.SIGTRAP|0x80:
		s.stats.SyscallStops++
		s.syscallStop(t)
	case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_SECCOMP:
		s.stats.SeccompStops++
		s.seccompStop(t)
	case sig == unix.SIGTRAP && (event == unix.PTRACE_EVENT_FORK || event == unix.PTRACE_EVENT_VFORK || event == unix.PTRACE_EVENT_CLONE):
		// Resumed even when it looks stale (the invariants above): then
		// the resume meets its exit stop, which is resumed again when it
		// is reported, or fails with ESRCH; its child shows up by its own
		// stops.
		if child, ok := eventAt(t.tid, event); ok {
			s.announce(int(child), event, t.comm)
		} else {
			s.debugf("fork event of %d looks stale; resumed anyway", t.tid)
		}
		s.resume(t, 0)
	case sig == unix.SIGTRAP && event == unix.PTRACE_EVENT_EXEC:
		// The exec stop comes from the new program's tid, after de_thread
		// has ended every other thread: never a killed thread's late stop,
		// it is always resumed (a vfork child once stayed in it for good
		// when its failed check dropped it). Unread, the tid that exec'd
		// is taken to be this one.
		former, ok := eventAt(t.tid, event)
		if !ok {
			s.stats.Unread++
			s.debugf("exec event of %d unread; resumed anyway", t.tid)
			former = uint64(t.tid)
		}
		s.execStop(t, int(former))
	case event == unix.PTRACE_EVENT_STOP:
		if !fresh && isStopSignal(sig) {
			// Group-stop: stay stopped, but let SIGCONT wake us.
			t.listening = true
			s.stats.Requests++
			_ = listen(t.tid) // it may have exited already: the wait loop sees that
			return
		}
		s.resume(t, 0) // first stop of a new task, PTRACE_INTERRUPT, or end of a group-stop
	case event == unix.PTRACE_EVENT_EXIT:
		t.exiting = true
		if msg, err := eventMsg(t.tid); err == nil {
			s.killedInCall(t, unix.WaitStatus(msg))
		}
		s.resume(t, 0)
	case event != 0:
		s.resume(t, 0) // anything newer
	default:
		// Signal-delivery-stop: deliver the signal as if we were not here.
		s.resume(t, int(sig))
	}
}

func isStopSignal(sig unix.Signal) bool {
	return sig == unix.SIGSTOP || sig == unix.SIGTSTP || sig == unix.SIGTTIN || sig == unix.SIGTTOU
}

// resume restarts a tracee: it must stop at this syscall's exit when a call
// is pending (or always, when attached); otherwise it runs until the next
// traced syscall.
func (s *session) resume(t *task, sig int) {
	s.stats.Requests++
	var err error
	if s.mode == stopEverySyscall || t.call != nil || t.filtered {
		err = toSyscall(t.tid, sig)
	} else {
		err = cont(t.tid, sig)
	}
	if err != nil {
		// ESRCH: killed meanwhile (SIGKILL); its exit is still reported.
		s.debugf("resume %d: %v", t.tid, err)
	}
}

// requestFailed answers a seccomp or syscall stop whose syscall info could
// not be read: it is resumed all the same (the invariants above), its call
// unrecorded and counted. Gone (killed), the resume fails with ESRCH too.
func (s *session) requestFailed(t *task, stop string, err error) {
	s.stats.Unread++
	s.debugf("%s stop of %d unread (%v); resumed anyway", stop, t.tid, err)
	t.call, t.inSyscall = nil, false
	s.resume(t, 0)
}

func (s *session) seccompStop(t *task) {
	if s.quiet && s.queue.len() == 0 {
		s.resume(t, 0)
		return
	}
	var si syscallInfo
	if err := getSyscallInfo(t.tid, &si); err != nil {
		s.requestFailed(t, "seccomp", err)
		return
	} else if si.Op != unix.PTRACE_SYSCALL_INFO_SECCOMP {
		s.stats.Stale++
		return // stale (queue.go): killed, it is at its exit stop, reported apart
	}
	if s.deferExec(t, &si, true) {
		return
	}
	if s.quiet {
		s.resume(t, 0)
		return
	}
	if installsFilter(&si) {
		// Whether or not it succeeds, stop at every entry from now on:
		// the new filter applies to this thread (all of them with TSYNC)
		// and to every child it forks.
		for _, o := range s.tasks {
			if o.tgid == t.tgid {
				o.filtered = true
			}
		}
	}
	if t.filtered && t.call != nil && t.inSyscall {
		// Entered at the syscall-entry stop already; this is the same call.
		t.sawSeccomp = true
		s.resume(t, 0)
		return
	}
	s.enter(t, &si)
	t.sawSeccomp = true
	s.resume(t, 0)
}

// installsFilter: seccomp(SECCOMP_SET_MODE_*) or prctl(PR_SET_SECCOMP).
func installsFilter(si *syscallInfo) bool {
	switch si.Nr {
	case unix.SYS_SECCOMP:
		return true
	case unix.SYS_PRCTL:
		return si.Args[0] == unix.PR_SET_SECCOMP
	}
	return false
}

func (s *session) syscallStop(t *task) {
	if s.quiet {
		t.call = nil // a call pending when the trace went quiet
		// An exec under way ends at its exit stop (a failure) if not at
		// its exec stop: nothing else can stop it meanwhile.
		s.execDone(t)
		var si syscallInfo
		if s.queue.len() > 0 && getSyscallInfo(t.tid, &si) == nil &&
			si.Op == unix.PTRACE_SYSCALL_INFO_ENTRY && s.deferExec(t, &si, false) {
			return // the round was collected before the trace went quiet
		}
		s.resume(t, 0)
		return
	}
	if t.inSyscall && t.call == nil {
		// The exit of an untraced syscall: nothing to read.
		t.inSyscall = false
		s.resume(t, 0)
		return
	}
	var si syscallInfo
	if err := getSyscallInfo(t.tid, &si); err != nil {
		s.requestFailed(t, "syscall", err)
		return
	} else if si.Op == unix.PTRACE_SYSCALL_INFO_NONE {
		s.stats.Stale++
		return // stale (queue.go): killed, it is at its exit stop, reported apart
	}
	if si.Op == unix.PTRACE_SYSCALL_INFO_ENTRY && s.deferExec(t, &si, false) {
		return
	}
	t.inSyscall = si.Op == unix.PTRACE_SYSCALL_INFO_ENTRY
	switch si.Op {
	case unix.PTRACE_SYSCALL_INFO_ENTRY:
		t.sawSeccomp = false
		s.enter(t, &si)
	case unix.PTRACE_SYSCALL_INFO_EXIT:
		s.execDone(t) // its execve failed
		if c := t.call; c != nil {
			t.call = nil
			// Launched, a traced call always reaches our filter unless
			// another filter answered it first.
			refused := s.mode == stopSeccomp && t.filtered && !t.sawSeccomp
			if s.rolledBack(t, c, si.rval(), refused) {
				// Rolled back for SIGSYS: rval is a register restored,
				// not a result.
				s.sigsysRollback[t.tgid] = true
				s.finishUnreturned(t, c, true)
			} else {
				s.finishRefused(t, c, si.rval(), refused)
			}
		}
	}
	s.resume(t, 0)
}

// enter handles a syscall entry (seccomp or syscall-entry stop).
func (s *session) enter(t *task, si *syscallInfo) {
	id := lookupSyscall(si.Arch, si.Nr)
	if id == sysNone {
		return
	}
	s.stats.TracedCalls++
	t.stops = 1
	t.call = nil
	if !s.rules.entry(&t.buf, t.tid, t.fds(), id, si.Args) {
		s.noteStops(t)
		return
	}
	t.call = &t.buf
	t.call.nr = si.Nr
	// The comm at entry; a successful execve's is replaced at its exit
	// (execStop) by the new program's, as the eBPF backend reports it.
	t.call.ev.Comm = t.comm
}

func (s *session) finish(t *task, c *call, ret int64) { s.finishRefused(t, c, ret, false) }

// finishRefused completes a call; refused marks one a seccomp filter
// answered before the kernel ran it.
func (s *session) finishRefused(t *task, c *call, ret int64, refused bool) {
	s.noteStops(t)
	e := s.rules.exit(t.tid, t.fds(), c, ret)
	s.openedAPI(t, c, ret) // after exit, which reads the opened file's id
	if e != nil {
		e.NoEntry = refused && e.Failed()
		s.emit(t, e)
		if !s.quiet {
			s.hold.Hold(e) // t is stopped at the call's exit
		}
	}
}

// rolledBack is whether a call's exit stop shows a seccomp KILL or TRAP's
// rollback: the value is the register syscall_rollback restores, and a
// filter other than ours answered the call (launched), or the thread runs
// under one (attached, where we have none).
func (s *session) rolledBack(t *task, c *call, ret int64, refused bool) bool {
	if ret != rollbackValue(c) {
		return false
	}
	if s.mode == stopSeccomp {
		return refused
	}
	v, ok := procStatusField(t.tid, "Seccomp")
	return ok && v == "2"
}

// finishUnreturned reports a call that never returned to the program;
// refused: a seccomp filter answered it before the kernel ran it.
func (s *session) finishUnreturned(t *task, c *call, refused bool) {
	s.noteStops(t)
	if e := s.rules.unreturned(c); e != nil {
		e.NoEntry = refused
		s.emit(t, e)
	}
}

// killedInCall: t is ending with status ws (at its exit stop, or reaped
// where it had none). Dying of SIGSYS inside a call it entered is seccomp's
// KILL_THREAD on a thread not its process's last: the kernel ends it in
// do_exit, with no syscall exit (the other actions roll the call back and
// exit through it). The call never returned. A leader's reaping comes only
// after its other threads, with the process's status: its exit stop is
// where its own death shows.
func (s *session) killedInCall(t *task, ws unix.WaitStatus) {
	c := t.call
	if c == nil || c.id == sysExecve || c.id == sysExecveat || !ws.Signaled() || ws.Signal() != unix.SIGSYS || s.sigsysRollback[t.tgid] {
		return
	}
	t.call = nil
	s.noteStops(t)
	if e := s.rules.unreturned(c); e != nil {
		e.ThreadKilled = true
		s.emit(t, e)
	}
}

func (s *session) noteStops(t *task) {
	if t.stops > s.stats.MaxStopsPerCall {
		s.stats.MaxStopsPerCall = t.stops
	}
	t.stops = 0
}

// execStop: a successful execve. A thread other than the leader that
// execs takes over the leader's tid; the old leader vanishes silently.
// former is the exec stop's event message: the tid that exec'd.
func (s *session) execStop(t *task, former int) {
	if former != t.tid {
		if ex := s.tasks[former]; ex != nil {
			s.drop(ex)
			s.drop(t) // the vanished leader
			ex.tid = t.tid
			s.tasks[t.tid] = ex
			t = ex
		}
	}
	// de_thread waits until the other threads are reaped (the old leader
	// released unreported) before the exec stop: t is its process's only
	// thread now, and any other record of it is one that never reports.
	s.forgetOthers(t.tgid, t)
	t.comm = readComm(t.tid)
	if c := t.call; c != nil && (c.id == sysExecve || c.id == sysExecveat) {
		// Named after the program it started, not cudatrace's own loader.
		c.ev.Comm = t.comm
		t.call = nil
		s.finish(t, c, 0)
	}
	s.resume(t, 0)
}

// announce registers child, just named by its creator's event.
func (s *session) announce(child, event int, comm string) {
	if s.unannounced[child] {
		delete(s.unannounced, child)
		if s.tasks[child] != nil {
			return
		}
		// Gone before its creator's event was read. Unless the pid was
		// recycled for a new tracee of ours, which is registered now.
		if tracerOf(child) != s.self {
			return
		}
	}
	s.adopt(child, event, comm)
}

// adopt registers a new task: from a fork/clone event (event != 0, comm
// inherited from the parent) or from a stop of an unknown tid.
func (s *session) adopt(tid, event int, comm string) *task {
	if t := s.tasks[tid]; t != nil {
		return t
	}
	t := &task{tid: tid, tgid: tid, fresh: true, comm: comm, detaching: s.detachAll}
	// A filter besides ours (inherited, or installed by an ancestor).
	t.filtered = s.mode == stopSeccomp && seccompFilters(tid) > 1
	if event != unix.PTRACE_EVENT_FORK && event != unix.PTRACE_EVENT_VFORK {
		// A clone may be a thread or a process; /proc knows.
		if tgid, ok := readTgid(tid); ok {
			t.tgid = tgid
		}
	}
	if t.comm == "" {
		t.comm = readComm(tid)
	}
	s.tasks[tid] = t
	s.traceAPI(t.tgid)
	return t
}

// reap: a task is gone. The process is gone when its leader is reaped (the
// kernel reports a traced leader only after all its threads).
func (s *session) reap(t *task, ws unix.WaitStatus) {
	s.drop(t)
	s.killedInCall(t, ws)
	if t.tid != t.tgid && !(s.zombieLeaders[t.tgid] && s.lastOf(t.tgid)) {
		return
	}
	// A traced leader is reported once its threads are all gone, their
	// exits taken: a record of its process still here is one whose tid
	// will never report (a thread that exec'd and died before its exec
	// stop took the leader's tid, and this exit is its own).
	s.forgetOthers(t.tgid, nil)
	delete(s.sigsysRollback, t.tgid)
	e := &tracer.Event{Kind: tracer.KindExit, Syscall: "exit"}
	if ws.Signaled() {
		e.Signal = int(ws.Signal())
	} else {
		e.ExitCode = ws.ExitStatus()
	}
	if t.call != nil && (t.call.id == sysExecve || t.call.id == sysExecveat) {
		// Killed inside execve: nothing more to report about that call.
		t.call = nil
	}
	s.emit(t, e)
	s.untraceAPI(t.tgid)
	if t.tid == s.root {
		s.rootSt = &tracer.ExitStatus{Code: e.ExitCode, Signal: e.Signal}
		s.rootExit = e.Time
	}
}

// forgetOthers drops every record of process tgid but keep: it has no
// other thread left (an exec stop, its exit), so they cannot report again.
func (s *session) forgetOthers(tgid int, keep *task) {
	for _, o := range s.tasks {
		if o.tgid == tgid && o != keep {
			s.debugf("tid %d of process %d gone unreported; forgotten", o.tid, tgid)
			s.drop(o)
		}
	}
}

// lastOf reports whether no task of tgid is left.
func (s *session) lastOf(tgid int) bool {
	for _, t := range s.tasks {
		if t.tgid == tgid {
			return false
		}
	}
	return true
}

// startDetach interrupts every task; each is detached at its next stop.
func (s *session) startDetach() {
	s.detachAll = true
	for _, t := range s.tasks {
		if t.exiting && t.tid == t.tgid {
			// A zombie leader cannot be detached, and waiting for it could
			// take forever; the kernel releases it when this thread exits.
			s.drop(t)
			continue
		}
		t.detaching = true
		if err := interrupt(t.tid); err != nil {
			// PTRACE_INTERRUPT checks only that we trace the task (a
			// zombie not yet reported still passes): ESRCH means it will
			// never report to us again. Waiting for it would never end.
			s.debugf("interrupt %d: %v; forgotten", t.tid, err)
			if err == unix.ESRCH {
				s.drop(t)
			}
		}
	}
}

// detachAt detaches a task at whatever stop it reported, passing on a
// signal it was about to receive.
func (s *session) detachAt(t *task, sig unix.Signal, event int) {
	deliver := 0
	switch {
	case sig == unix.SIGTRAP|0x80:
		// At an exit stop the pending call can still be completed.
		var si syscallInfo
		if c := t.call; c != nil && getSyscallInfo(t.tid, &si) == nil && si.Op == unix.PTRACE_SYSCALL_INFO_EXIT {
			s.finish(t, c, si.rval())
		}
		t.call = nil
	case event == unix.PTRACE_EVENT_FORK || event == unix.PTRACE_EVENT_VFORK || event == unix.PTRACE_EVENT_CLONE:
		// The new task is already attached: detach it too when it stops.
		if child, ok := eventAt(t.tid, event); ok {
			s.announce(int(child), event, t.comm)
		}
	case event == 0:
		deliver = int(sig)
	}
	s.stats.Requests++
	if err := detach(t.tid, deliver); err != nil {
		// ESRCH: it is dying; its exit will be reported and reaped.
		s.debugf("detach %d: %v", t.tid, err)
		return
	}
	s.drop(t)
	s.detached++
}

func (s *session) debugf(format string, args ...any) {
	if s.debug {
		fmt.Fprintf(os.Stderr, "cudatrace: ptrace: "+format+"\n", args...)
	}
}

func readComm(tid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// procStatusField reads one "Name:\tvalue" line of /proc/TID/status.
func procStatusField(tid int, name string) (string, bool) {
	st, err := procfs.ReadStatus(tid)
	v, ok := st[name]
	return v, err == nil && ok
}

func readTgid(tid int) (int, bool) {
	v, ok := procStatusField(tid, "Tgid")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}
