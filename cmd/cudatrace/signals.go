package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/procfs"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

// Signals and a launched target (README "Signals"): the target stays in
// cudatrace's process group, so job control (Ctrl-Z, fg, bg) works as for
// any command, and a signal sent to the whole group (Ctrl-C from the
// terminal, kill -TERM -PGID) reaches the target from the kernel. A signal
// sent to cudatrace alone is forwarded to the target. Each reaches it once.
//
// Go does not show a signal's sender, and kill(pid) and kill(-pgid) look
// the same anyway, so a sentinel tells them apart: a stopped child in our
// process group, which keeps whatever the group is sent pending. After a
// barrier that makes sure the sender's kill has reached every member (see
// groupBarrier), the signal is pending in the sentinel exactly when it was
// sent to the group.

// forwarded are the signals passed on to a launched target.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// handleSignals keeps cudatrace alive on Ctrl-C so the report still
// prints. A launched target gets each signal once (see above); an attach
// is stopped (detached) instead.
func handleSignals(launched bool, cancel context.CancelFunc) func() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, append(forwarded, syscall.SIGCONT)...)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		// The sentinel dies with the thread that started it
		// (PR_SET_PDEATHSIG): keep this one for as long as it is needed.
		runtime.LockOSThread()
		var sent *sentinel
		if launched {
			sent = startSentinel()
		}
		defer func() { sent.close() }()
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				s := sig.(syscall.Signal)
				if !launched {
					if s != syscall.SIGCONT {
						cancel()
					}
					continue
				}
				if s == syscall.SIGCONT {
					sent.stop() // fg or bg continued the whole group
					continue
				}
				group := sent.got(s)
				if group {
					sent.close() // its pending signal cannot be taken back
					sent = startSentinel()
				}
				for _, pid := range targetPIDs() {
					if group && inOurGroup(pid) {
						continue // the kernel delivered it already
					}
					_ = syscall.Kill(pid, s) // it may have exited already
				}
				// The trace goes on while the target runs; once it has
				// exited, this ends the wait for descendants that outlive
				// it (a daemon in a session of its own never gets the
				// signal, and kept cudatrace waiting).
				cancel()
			}
		}
	}()
	return func() { signal.Stop(ch); close(done); <-exited }
}

// sentinel is a loader never released, kept stopped in our process group.
type sentinel struct {
	child *launch.Child
}

// sentinelArg0 names the sentinel in ps, and lets targetPIDs skip it.
const sentinelArg0 = "cudatrace-signal-sentinel"

// startSentinel returns nil when none can run; every signal is then taken
// as sent to cudatrace alone, and forwarded.
func startSentinel() *sentinel {
	c, err := launch.Start(launch.Options{Argv: []string{sentinelArg0}, DieWithParent: true})
	if err != nil {
		return nil
	}
	s := &sentinel{child: c}
	if !s.stop() {
		c.Abort()
		return nil
	}
	return s
}

// sentinelStopWait bounds the wait for the sentinel's stop: one that never
// comes (the sentinel traced by a debugger) must not stall the signals.
const sentinelStopWait = 10 * time.Second

// stop stops the sentinel and waits until it is stopped. A SIGCONT sent to
// cudatrace alone (kill -CONT, a debugger letting go) leaves the sentinel
// stopped: then there is no new stop to wait for, and waiting for one hung
// cudatrace after its report.
func (s *sentinel) stop() bool {
	if s == nil {
		return false
	}
	if s.stopped() {
		return true
	}
	if syscall.Kill(s.child.PID, syscall.SIGSTOP) != nil {
		return false
	}
	var ws unix.WaitStatus
	for deadline := time.Now().Add(sentinelStopWait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		pid, err := unix.Wait4(s.child.PID, &ws, unix.WUNTRACED|unix.WNOHANG, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return false
		case pid == s.child.PID:
			return ws.Stopped()
		case s.stopped():
			return true // stopped, and the stop reported to nobody else
		}
	}
	return false
}

// stopped reads the sentinel's state: T, stopped by a signal.
func (s *sentinel) stopped() bool {
	st, err := procfs.ReadStat(s.child.PID)
	return err == nil && st.State == 'T'
}

// got reports whether sig was sent to our whole process group.
func (s *sentinel) got(sig syscall.Signal) bool {
	if s == nil {
		return false
	}
	groupBarrier()
	st, err := procfs.ReadStatus(s.child.PID)
	if err != nil {
		return false
	}
	mask, ok := st.Hex("ShdPnd")
	return ok && mask&(1<<(uint(sig)-1)) != 0
}

func (s *sentinel) close() {
	if s != nil {
		s.child.Abort()
	}
}

// groupBarrier returns once every signal being sent to a process group
// has been queued to all its members. The kernel sends to a group (kill
// -PGID, and the terminal's Ctrl-C) under tasklist_lock held for reading,
// and setpgid takes it for writing before it checks anything: a no-op
// setpgid waits for any such send in progress. Its result does not matter.
func groupBarrier() {
	_ = unix.Setpgid(0, unix.Getpgrp()) // best effort: on failure signals still reach the target via forwarding
}

func inOurGroup(pid int) bool {
	pg, err := unix.Getpgid(pid)
	return err == nil && pg == unix.Getpgrp()
}

// targetPIDs lists cudatrace's direct children that are the launched
// target (its loader included), not helpers such as the sentinel or the
// ptrace waker.
func targetPIDs() []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(pid); err != nil || st.PPID != self {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.HasPrefix(string(cmdline), launch.HelperPrefix) {
			continue
		}
		out = append(out, pid)
	}
	return out
}
