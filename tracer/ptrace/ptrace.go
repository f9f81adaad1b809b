// Package ptrace is the ptrace backend: it works where eBPF cannot
// (no root, no CAP_BPF, nested containers) and emits the same events.
//
// A launched target runs under a seccomp filter that returns
// SECCOMP_RET_TRACE for the traced syscalls only (strace's --seccomp-bpf
// technique), so it stops at most twice per traced syscall and never on the
// others. A running process cannot be given a filter, so an attached one
// stops at every syscall entry and exit; the tracer filters in user space.
//
// Programs using this backend must call launch.RunLoaderIfRequested first
// thing in main (and TestMain). While a Run is in progress SIGCHLD is set to
// SIG_DFL (discarded): a program that asks for it with signal.Notify misses
// those sent meanwhile (sigchld.go says why), and GOMAXPROCS is at least 2
// (procs.go says why).
package ptrace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

// NoNewPrivsNote is the Result note when the target had to run with
// no_new_privs.
const NoNewPrivsNote = "no_new_privs was set on the target (unprivileged seccomp): setuid helpers such as nvidia-modprobe cannot gain privileges"

const baseOptions = unix.PTRACE_O_TRACESYSGOOD | unix.PTRACE_O_TRACECLONE | unix.PTRACE_O_TRACEFORK |
	unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACEEXEC | unix.PTRACE_O_TRACEEXIT

// Backend traces with ptrace.
type Backend struct {
	mu    sync.Mutex
	stats Stats
	// expiry, when set, stands for spec.Duration's timer: a test ends the
	// duration at the point of the trace it means to test, not after a
	// wall-clock time that a loaded machine may reach first or last.
	expiry <-chan time.Time
}

// New returns the ptrace backend.
func New() tracer.Backend { return &Backend{} }

func (b *Backend) Name() string { return "ptrace" }

// Stats are the stop counts of the last Run.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// Probe reports whether ptrace tracing can work here; its errors wrap
// tracer.ErrUnavailable.
func Probe() error {
	unavailable := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", tracer.ErrUnavailable, fmt.Sprintf(format, args...))
	}
	if nativeArch == 0 {
		return unavailable("the ptrace backend supports amd64 and arm64, not %s", runtime.GOARCH)
	}
	if scope, ok := yamaScope(); ok && scope >= 3 {
		return unavailable("ptrace is disabled: kernel.yama.ptrace_scope=3 (until reboot)")
	}
	// A request on a process we do not trace fails with ESRCH when ptrace
	// itself is allowed; a seccomp profile or LSM answers EPERM or ENOSYS.
	if err := interrupt(os.Getpid()); err != unix.ESRCH {
		return unavailable("ptrace is blocked here (%v): a seccomp profile or security module forbids it", err)
	}
	if !kernelAtLeast(5, 3) {
		return unavailable("the ptrace backend needs Linux 5.3 or later (PTRACE_GET_SYSCALL_INFO)")
	}
	if _, ok := procStatusField(os.Getpid(), "Seccomp"); !ok {
		return unavailable("the kernel has no seccomp support")
	}
	return nil
}

// Run traces spec: it launches spec.Argv or attaches to spec.PIDs.
func (b *Backend) Run(ctx context.Context, spec tracer.Spec, sink tracer.Sink) (*tracer.Result, error) {
	if spec.HostWide {
		return nil, &tracer.UnsupportedError{Reason: "a host-wide trace needs the eBPF backend: ptrace follows only the processes it starts or attaches to"}
	}
	if (len(spec.Argv) == 0) == (len(spec.PIDs) == 0) {
		return nil, errors.New("ptrace: give either a command or PIDs to attach to")
	}
	if err := Probe(); err != nil {
		return nil, err
	}
	restoreSIGCHLD, restoreP := silenceSIGCHLD(), spareP()
	done := make(chan outcome, 1)
	go func() {
		// Every ptrace request must come from the thread that attached.
		// The thread is never unlocked: it exits with this goroutine, and
		// the kernel then detaches anything it still traces.
		runtime.LockOSThread()
		var o outcome
		var s *session
		if len(spec.Argv) > 0 {
			s, o.res, o.err = b.launch(ctx, spec, sink, done)
		} else {
			s, o.res, o.err = b.attach(ctx, spec, sink)
		}
		if s != nil {
			b.mu.Lock()
			b.stats = s.stats
			b.mu.Unlock()
		}
		restoreP()
		restoreSIGCHLD()
		if s != nil && s.exited != nil {
			s.exited <- s.rootSt // the result went out early; Finish waits for this
			return
		}
		done <- o
	}()
	o := <-done
	if o.res != nil && o.res.Finish != nil && !spec.DeferRelease {
		_ = o.res.Finish() // the result is already out; Finish's error has nowhere to go
		o.res.Finish = nil
	}
	return o.res, o.err
}

// outcome is what Run returns.
type outcome struct {
	res *tracer.Result
	err error
}

// watch turns ctx cancellation and spec.Duration into waker requests until
// the returned stop function is called.
func watch(ctx context.Context, d time.Duration, expiry <-chan time.Time, w *waker) (stop func()) {
	quit := make(chan struct{})
	go func() {
		var expire <-chan time.Time
		switch {
		case expiry != nil:
			expire = expiry
		case d > 0:
			t := time.NewTimer(d)
			defer t.Stop()
			expire = t.C
		}
		cancelled := ctx.Done()
		for cancelled != nil || expire != nil {
			select {
			case <-quit:
				return
			case <-cancelled:
				w.request(false)
				cancelled = nil
			case <-expire:
				w.request(true)
				expire = nil
			}
		}
	}()
	return func() { close(quit) }
}

// launch runs spec.Argv traced. When spec.Duration passes first, the
// result so far goes to early, and the tracees are served on, unrecorded,
// until they exit; the result's Finish waits for s.exited and fills in
// Exit. A target cannot be detached instead:
// its SECCOMP_RET_TRACE filter stays, and without a tracer every traced
// syscall fails with ENOSYS.
func (b *Backend) launch(ctx context.Context, spec tracer.Spec, sink tracer.Sink, early chan<- outcome) (*session, *tracer.Result, error) {
	res := &tracer.Result{Backend: b.Name(), Launched: true}
	opts := launch.Options{Argv: spec.Argv, Cred: spec.Cred, Seccomp: seccompFilter()}
	if !hasCapSysAdmin() {
		// seccomp(2) without CAP_SYS_ADMIN requires no_new_privs.
		opts.NoNewPrivs = true
		res.Notes = append(res.Notes, NoNewPrivsNote)
	}
	// The waker starts only when a request could end the loop (lazily,
	// below): a run without --duration needs none until the target has
	// exited, and its start, another loader, stood before the target's.
	w := &waker{pidfd: -1}
	defer w.close()

	t0 := time.Now()
	child, err := launch.Start(opts)
	if err != nil {
		return nil, nil, err
	}
	tStarted := time.Now()
	// Without TRACECLONE until its filter's first stop or its exec
	// (rootOptions). TRACESECCOMP from the start: without it, its filter's
	// traced calls, the exec first, would fail with ENOSYS.
	opt := baseOptions | unix.PTRACE_O_TRACESECCOMP | unix.PTRACE_O_EXITKILL
	if err := seize(child.PID, opt&^unix.PTRACE_O_TRACECLONE); err != nil {
		child.Abort()
		return nil, nil, ptraceRefused(child.PID, err)
	}
	tSeized := time.Now()
	s := newSession(stopSeccomp, spec, sink)
	s.waker = w
	s.root = child.PID
	s.rootOptions = opt
	// Filters the loader has before it installs ours are inherited from
	// cudatrace (run in a container, say): the target's calls may be
	// refused by them.
	s.tasks[child.PID] = &task{tid: child.PID, tgid: child.PID, comm: readComm(child.PID), filtered: seccompFilters(child.PID) > 0}
	s.start = time.Now()
	res.Started = s.start
	// The probes load beside the target's start; its libraries get them in
	// the background, or at an open's exit stop if it comes first.
	s.startAPILaunch(res, child.PID)
	if err := child.Release(); err != nil {
		// The loader sees EOF and exits; reap it through the loop.
		s.debugf("release: %v", err)
	}
	stop := watch(ctx, spec.Duration, b.expiry, w)
	defer stop()
	// ctx cancellation does not end a launch (the caller forwards the
	// signal to the target); it only stops waiting for descendants that
	// outlive the target.
	tReleased := time.Now()
	s.loop(func() bool {
		if spec.Duration > 0 || s.rootSt != nil {
			// Any request from now on kills the waker; one made before
			// it started is in the state read below.
			if err := w.start(); err != nil {
				s.debugf("start helper process: %v", err)
			}
		}
		cancelled, expired := w.state()
		if expired && !s.quiet {
			s.quiet = true
			exited := make(chan *tracer.ExitStatus, 1)
			s.exited = exited
			s.finishResult(res)
			res.Notes = append(res.Notes, fmt.Sprintf("trace stopped after %v with the target still running; cudatrace stays attached, recording nothing, until its processes exit (without a tracer, their seccomp filter would fail the traced calls with ENOSYS)", spec.Duration))
			res.Finish = func() error {
				res.Exit = <-exited
				return nil
			}
			early <- outcome{res: res}
		}
		return cancelled && s.rootSt != nil
	})
	if s.debug {
		s.debugf("timing: loader start %v, seize %v, release %v; first event at +%v, target exit at +%v, loop end at +%v",
			tStarted.Sub(t0).Round(10*time.Microsecond), tSeized.Sub(tStarted).Round(10*time.Microsecond),
			tReleased.Sub(s.start).Round(10*time.Microsecond), s.firstEvent.Round(10*time.Microsecond),
			s.rootExit.Round(10*time.Microsecond), time.Since(s.start).Round(10*time.Microsecond))
	}
	if s.exited != nil {
		return s, nil, nil
	}
	s.finishResult(res)
	return s, res, nil
}

// finishResult fills in what the trace recorded.
func (s *session) finishResult(res *tracer.Result) {
	s.finishAPI(res)
	res.Ended = time.Now()
	res.Events = s.seq
	res.Exit = s.rootSt
	s.noteUnread(res)
	if s.detached > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the trace ended before all of the target's processes did: %d thread(s) were detached and run on under the seccomp filter, where the traced syscalls now fail with ENOSYS", s.detached))
	}
}

// noteUnread marks the trace incomplete by the stops resumed unread.
func (s *session) noteUnread(res *tracer.Result) {
	if n := s.stats.Unread; n > 0 {
		res.Dropped += n
		res.Notes = append(res.Notes, fmt.Sprintf("%d stop(s) could not be read and were resumed unrecorded: a call or an exec may be missing; the trace is incomplete", n))
	}
}

func (b *Backend) attach(ctx context.Context, spec tracer.Spec, sink tracer.Sink) (*session, *tracer.Result, error) {
	res := &tracer.Result{Backend: b.Name()}
	w := &waker{pidfd: -1}
	defer w.close()
	if err := w.start(); err != nil {
		return nil, nil, fmt.Errorf("ptrace: start helper process: %w", err)
	}
	s := newSession(stopEverySyscall, spec, sink)
	s.waker = w
	s.start = time.Now()
	res.Started = s.start
	for _, pid := range spec.PIDs {
		if err := s.seizeProcess(pid); err != nil {
			// Let go of what was already seized, unharmed.
			s.startDetach()
			s.loop(func() bool { return false })
			return s, nil, err
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("attached at %s: calls made before the attach are not in this trace",
		s.start.Format("2006-01-02 15:04:05.000 MST")))
	for _, pid := range spec.PIDs {
		res.Notes = append(res.Notes, s.heldDeviceNotes(pid)...)
	}
	s.startAPI(res, spec.PIDs)
	stop := watch(ctx, spec.Duration, b.expiry, w)
	defer stop()
	s.loop(func() bool {
		cancelled, expired := w.state()
		return cancelled || expired
	})
	s.finishAPI(res)
	s.noteUnread(res)
	res.Ended = time.Now()
	res.Events = s.seq
	return s, res, nil
}

// seizeProcess seizes every thread of pid. Threads may be created while we
// go: those made by an already seized thread are attached by the kernel
// (PTRACE_O_TRACECLONE); the others show up in the next listing, so list
// until a pass finds nothing new.
func (s *session) seizeProcess(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("no such process: %d", pid)
	}
	tgid, ok := readTgid(pid)
	if !ok {
		return fmt.Errorf("no such process: %d", pid)
	}
	if tgid == os.Getpid() {
		return fmt.Errorf("cannot attach to PID %d: it is cudatrace itself", pid)
	}
	if tgid != pid {
		return fmt.Errorf("PID %d is a thread of process %d: attach to %d", pid, tgid, tgid)
	}
	if err := tracer.CheckAttachable(pid); err != nil {
		return err
	}
	for pass := 0; ; pass++ {
		tids, err := listTasks(pid)
		if err != nil {
			return fmt.Errorf("process %d exited during attach", pid)
		}
		added := 0
		for _, tid := range tids {
			if s.tasks[tid] != nil || s.zombieLeaders[tid] {
				continue
			}
			err := seize(tid, baseOptions)
			switch {
			case err == nil:
				_ = interrupt(tid) // it may have exited already: the wait loop sees that
			case err == unix.ESRCH && tid != pid:
				continue // a thread that just exited
			case err == unix.ESRCH:
				return fmt.Errorf("process %d exited during attach", pid)
			case err == unix.EPERM && tid != pid && tracerOf(tid) == s.self:
				// Auto-attached meanwhile by its seized creator, whose
				// clone event is still to come.
				s.unannounced[tid] = true
			case err == unix.EPERM && tid == pid && isZombie(pid) && len(tids) > 1:
				// The leader has exited but other threads run on; they are
				// the process now. Its exit is reported with the last one.
				s.zombieLeaders[pid] = true
				continue
			default:
				return ptraceRefused(pid, err)
			}
			s.tasks[tid] = &task{tid: tid, tgid: pid, comm: readComm(tid), fresh: err != nil}
			added++
		}
		if added == 0 {
			return nil
		}
	}
}

func listTasks(pid int) ([]int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		return nil, err
	}
	if len(ents) == 0 {
		return nil, unix.ESRCH // a zombie
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, n)
		}
	}
	return tids, nil
}

// ptraceRefused explains an error from PTRACE_SEIZE in one line.
func ptraceRefused(pid int, err error) error {
	scope, yama := yamaScope()
	return refusal(pid, err, scope, yama, describeTracer(tracerOf(pid)), os.Geteuid() == 0)
}

// refusal words a PTRACE_SEIZE error; tracedBy describes the tracer
// already attached, if any.
func refusal(pid int, err error, scope int, yama bool, tracedBy string, root bool) error {
	if err != unix.EPERM {
		return fmt.Errorf("ptrace %d: %v", pid, err)
	}
	if tracedBy != "" {
		return fmt.Errorf("ptrace refused: process %d is already traced by %s (a debugger or strace?)", pid, tracedBy)
	}
	if root {
		// CAP_SYS_PTRACE passes Yama's scopes 1 and 2 and every uid check.
		return fmt.Errorf("ptrace refused for process %d: operation not permitted, even as root (a security module or a seccomp profile forbids it)", pid)
	}
	if yama && scope > 0 {
		return fmt.Errorf("ptrace refused: kernel.yama.ptrace_scope=%d; run as root or `sysctl kernel.yama.ptrace_scope=0`", scope)
	}
	return fmt.Errorf("ptrace refused for process %d: operation not permitted (another user's process, or not dumpable; run as root)", pid)
}

// describeTracer names the process (not the thread: TracerPid is a
// thread id) that tid belongs to, with its comm; "" for none.
func describeTracer(tid int) string {
	if tid == 0 {
		return ""
	}
	tgid, ok := readTgid(tid)
	if !ok {
		return fmt.Sprintf("thread %d", tid)
	}
	if comm := readComm(tgid); comm != "" {
		return fmt.Sprintf("process %d (%s)", tgid, strconv.Quote(comm))
	}
	return fmt.Sprintf("process %d", tgid)
}

func isZombie(tid int) bool {
	st, _ := procStatusField(tid, "State")
	return strings.HasPrefix(st, "Z")
}

func tracerOf(tid int) int {
	v, _ := procStatusField(tid, "TracerPid")
	n, _ := strconv.Atoi(v)
	return n
}

func yamaScope() (int, bool) {
	b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// hasCapSysAdmin: installing a seccomp filter without no_new_privs needs it.
func hasCapSysAdmin() bool {
	v, ok := procStatusField(os.Getpid(), "CapEff")
	if !ok {
		return false
	}
	caps, err := strconv.ParseUint(v, 16, 64)
	return err == nil && caps&(1<<unix.CAP_SYS_ADMIN) != 0
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	_, _ = fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi) // an unparsable release leaves 0.0: the conservative path
	return ma > major || (ma == major && mi >= minor)
}
