package ptrace

import (
	"sync"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer/launch"
)

// waker lets another goroutine interrupt the tracer thread's blocking
// wait4. Only the tracer thread may issue ptrace requests, and Go restarts
// wait4 after every signal, so the tracer thread keeps one idle child (a
// loader that is never released) while a request can end its loop:
// killing it makes wait4 return. The
// alternative, polling wait4 with WNOHANG, would add latency to every stop.
type waker struct {
	mu        sync.Mutex
	child     *launch.Child
	pidfd     int // for a kill that cannot hit a recycled PID
	cancelled bool
	expired   bool
}

// start starts the child unless it runs, or no request is left to come.
// It must run on the tracer thread: the child must be its own.
func (w *waker) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.child != nil || w.cancelled && w.expired {
		return nil
	}
	return w.spawnLocked()
}

func (w *waker) spawnLocked() error {
	c, err := launch.Start(launch.Options{Argv: []string{"cudatrace-ptrace-waker"}})
	if err != nil {
		return err
	}
	fd, err := unix.PidfdOpen(c.PID, 0)
	if err != nil {
		c.Abort()
		return err
	}
	// No request can have come since the last waker died: reaped holds
	// the lock from its death to here. So this one must not be killed at
	// once, or every wake-up would spawn and kill another, forever, while
	// the loop still waits for tracees (the CPU burnt after a detach).
	w.child, w.pidfd = c, fd
	return nil
}

// request records why the trace should end and wakes the tracer thread.
func (w *waker) request(expired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if expired {
		w.expired = true
	} else {
		w.cancelled = true
	}
	if w.pidfd >= 0 {
		_ = unix.PidfdSendSignal(w.pidfd, unix.SIGKILL, nil, 0) // it may have exited already
	}
}

func (w *waker) state() (cancelled, expired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cancelled, w.expired
}

// reaped tells whether wait4's pid was the waker, which then has been
// reaped; it is replaced while a request is still to come (a cancel after
// the duration expired, or the reverse).
func (w *waker) reaped(pid int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.child == nil || pid != w.child.PID {
		return false
	}
	w.dropLocked()
	if !(w.cancelled && w.expired) {
		_ = w.spawnLocked() // on failure, requests can no longer wake us early
	}
	return true
}

func (w *waker) dropLocked() {
	_ = unix.Close(w.pidfd) // best-effort cleanup: nothing to do if it fails
	w.pidfd = -1
	w.child.Abort() // closes its pipe; the process is already reaped
	w.child = nil
}

// close kills and reaps the waker (tracer thread, after the loop).
func (w *waker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.child == nil {
		return
	}
	w.child.Abort()         // kill + wait: nothing else waits for it any more
	_ = unix.Close(w.pidfd) // best-effort cleanup: nothing to do if it fails
	w.pidfd = -1
	w.child = nil
}
