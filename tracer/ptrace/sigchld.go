package ptrace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Every tracee stop sends the tracer a SIGCHLD. Go installs a handler for
// every signal, so each stop also cost a signal delivery, usually waking
// another thread of this process to run the handler (the kernel offers a
// process signal to the main thread first): measured, it nearly doubled
// the tracer's CPU time per traced call. Nothing here needs the signal
// (wait4 does the work), so while a Run is in progress SIGCHLD is set to
// SIG_DFL, under which the kernel discards it when sent. SIG_DFL, unlike
// SIG_IGN, leaves wait4 and the reaping of children unchanged. The
// previous action comes back when the last Run ends.
//
// A program that asks for SIGCHLD with signal.Notify misses those sent
// during a Run.

// kernelSigaction is struct sigaction as rt_sigaction(2) takes it on amd64
// and arm64 (both have sa_restorer).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

const sigDFL, sigIGN = 0, 1

var quietChild runSetting

func rtSigaction(sig unix.Signal, act, old *kernelSigaction) error {
	_, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), unsafe.Sizeof(act.mask), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// silenceSIGCHLD sets SIGCHLD to SIG_DFL until the returned function has
// been called as many times as silenceSIGCHLD was. An action other than a
// handler (SIG_DFL or SIG_IGN) is left alone.
func silenceSIGCHLD() (restore func()) {
	return quietChild.hold(func() (undo func()) {
		var cur kernelSigaction
		if rtSigaction(unix.SIGCHLD, nil, &cur) != nil || cur.handler == sigDFL || cur.handler == sigIGN {
			return nil
		}
		dfl := kernelSigaction{}
		if rtSigaction(unix.SIGCHLD, &dfl, nil) != nil {
			return nil
		}
		return func() { _ = rtSigaction(unix.SIGCHLD, &cur, nil) } // restoring the handler we read cannot fail
	})
}
