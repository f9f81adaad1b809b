package ptrace

import (
	"cmp"
	"encoding/binary"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// One tracer thread serves every tracee, and wait4 reports the newest
// tracee first: with many threads stopping at once, the newest were
// served again and again while the oldest waited, so workers finished
// one after another and the last ran on alone, each of its calls paying
// the tracer's whole wake-up latency instead of sharing its time (W4, 8
// threads and 2 processes: the workers' ends spread over 80–95 % of the
// run). The loop now serves stops in rounds, as strace does: once the
// stops collected are handled, it collects every stop reported by then
// (wait4 WNOHANG until none) and serves them least recently served first,
// so no tracee is served twice while another waits. The collecting wait4
// that finds nothing runs after the last tracee was resumed, while it
// runs, so a lone tracee's call waits no longer than before.

// waited is one wait4 report not yet handled.
type waited struct {
	pid int
	ws  unix.WaitStatus
}

// stopQueue holds the stops of the current round, first collected first.
type stopQueue struct {
	buf  []waited
	head int
}

func (q *stopQueue) len() int { return len(q.buf) - q.head }

func (q *stopQueue) push(w waited) { q.buf = append(q.buf, w) }

func (q *stopQueue) pop() (waited, bool) {
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
		return waited{}, false
	}
	w := q.buf[q.head]
	q.head++
	return w, true
}

// waitsFor reports whether t's exec must wait: a stop of another thread
// of its process is queued, one not itself an exec that waits (two would
// wait for each other forever). Never when t itself has another report
// queued (its exit: it was killed): its stop must be served first.
func (q *stopQueue) waitsFor(s *session, t *task) bool {
	wait := false
	for _, w := range q.buf[q.head:] {
		o := s.tasks[w.pid]
		switch {
		case w.pid == t.tid:
			return false
		case o != nil && o.tgid == t.tgid && !o.deferred:
			wait = true
		}
	}
	return wait
}

// maxRound bounds one round's collection; each tracee reports at most a
// stop and an exit, so it is only reached with that many tracees.
const maxRound = 4096

// A queued stop also goes stale when its thread is killed meanwhile
// (exit_group, an exec's de_thread): SIGKILL wakes it, and it stops again
// at its exit event (Linux 6.18) or is gone. That stop is reported apart,
// so the stale one is dropped unserved: a request would act on the exit
// stop. Above all, the event message of a stale fork or clone event is
// the exit code, which was announced as a new thread (tid 0, say) that
// never exits: the loop waited for it forever. Seccomp and syscall stops
// are checked by the syscall info they read anyway (its op, in the same
// request as the values); event stops by eventAt.

// eventAt returns the event message of tid's PTRACE_EVENT_* stop of this
// kind; ok is false when the stop is stale. Two requests, and SIGKILL can
// move the thread from the event stop to its exit stop between them, with
// the exit code as its message: so the message is read first and the
// stop checked after (its siginfo's si_code is SIGTRAP | event<<8). A
// thread's stops only go forward while we do not resume it (event stop,
// then its exit stop, then gone), so one still at the event after the
// read was at it during the read. Checked first, the message could be the
// exit code: a new thread announced that never exits (the loop waited for
// tid 1792, the exit code 7<<8, under load).
func eventAt(tid, event int) (msg uint64, ok bool) {
	msg, err := eventMsg(tid)
	if err != nil {
		return 0, false
	}
	var si [128]byte // siginfo_t; si_code follows si_signo and si_errno
	if ptrace(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&si[0]))) != nil {
		return 0, false
	}
	return msg, int32(binary.NativeEndian.Uint32(si[8:])) == int32(unix.SIGTRAP)|int32(event)<<8
}

// next returns the next stop to handle: the round's next, or after a
// round, the stops reported meanwhile; when there are none, it blocks.
//
// A stop that waits in the queue can go stale in one way that matters: a
// thread other than the leader that execs takes the leader's tid once the
// kernel has killed the other threads, and a request meant for the
// leader's queued stop could then act on the new program: resume it past
// its exec stop, which would go unseen, the thread that exec'd listed
// forever. (Linux 6.18 stops a killed thread at its exit event first, so
// the request meets the old leader there; not every kernel does.) So no
// round is collected while such an exec is under way (s.execs), and the
// exec itself waits until no stop of its process is queued (deferExec):
// the window is the one of handling each stop as wait4 reports it, as
// before rounds.
func (s *session) next() (waited, error) {
	if s.queue.len() == 0 && s.execs == 0 && !s.quiet {
		s.collect()
	}
	if w, ok := s.queue.pop(); ok {
		return w, nil
	}
	var w waited
	pid, err := wait4(&w.ws)
	w.pid = pid
	return w, err
}

// collect queues every stop and exit reported now, without blocking.
func (s *session) collect() {
	for s.queue.len() < maxRound {
		var ws unix.WaitStatus
		// Raw: it never blocks.
		pid, _, e := unix.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&ws)),
			unix.WNOHANG|unix.WALL|unix.WNOTHREAD, 0, 0, 0)
		if e != 0 || pid == 0 {
			break // nothing more now (or ECHILD: the blocking wait4 says so)
		}
		s.queue.push(waited{int(pid), ws})
	}
	// Least recently served first. In wait4's order (newest tracee
	// first) the oldest would always be resumed last, the likeliest to
	// be still running at the next collection: it would miss rounds.
	round := s.queue.buf[s.queue.head:]
	served := func(w waited) uint64 {
		if t := s.tasks[w.pid]; t != nil {
			return t.served
		}
		return 0
	}
	slices.SortStableFunc(round, func(a, b waited) int { return cmp.Compare(served(a), served(b)) })
}

// deferExec: t, not its process's leader, is at the entry of an execve
// while a stop of its process waits in the queue. Its stop goes back to
// the end of the queue, unhandled, once, and is served after those: the
// exec would make them stale. It reports whether it deferred.
func (s *session) deferExec(t *task, si *syscallInfo, seccomp bool) bool {
	if t.tid == t.tgid || t.execing || !isExec(si) {
		return false
	}
	if !t.deferred && s.queue.waitsFor(s, t) {
		t.deferred = true
		s.queue.push(s.current)
		// Counted again when it is served.
		s.stats.Stops--
		if seccomp {
			s.stats.SeccompStops--
		} else {
			s.stats.SyscallStops--
		}
		return true
	}
	t.deferred = false
	if !s.quiet {
		t.execing = true
		s.execs++
	}
	return false
}

func isExec(si *syscallInfo) bool {
	id := lookupSyscall(si.Arch, si.Nr)
	return id == sysExecve || id == sysExecveat
}

// execDone: t's exec from a thread other than the leader is over (done,
// failed, or t is gone).
func (s *session) execDone(t *task) {
	if t.execing {
		t.execing = false
		s.execs--
	}
}
