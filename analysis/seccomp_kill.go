package analysis

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// killedCall is the call a seccomp filter killed or trapped: the first one
// that never returned (Event.NoReturn), before CUDA's failure if CUDA
// returned one. -1 when none.
func (a *analyzer) killedCall() int {
	for i := range a.ev {
		if a.ev[i].NoReturn && a.beforeCUDAFailure(i) {
			return i
		}
	}
	return -1
}

// exitOf is the exit event of process pid after index i, or nil.
func (a *analyzer) exitOf(pid, i int) *tracer.Event {
	for j := i + 1; j < len(a.ev); j++ {
		if x := &a.ev[j]; x.Kind == tracer.KindExit && x.PID == pid {
			return x
		}
	}
	return nil
}

// seccompKilled explains a call that never returned: a seccomp filter's
// SECCOMP_RET_KILL_PROCESS, KILL_THREAD or TRAP stopped it before the
// kernel ran it and sent SIGSYS. The call has no result to read.
func (a *analyzer) seccompKilled(i int) {
	e := &a.ev[i]
	thread := nvdev.Caller(e)
	if e.TID != 0 && e.TID != e.PID {
		thread += fmt.Sprintf(" (thread %d)", e.TID)
	}
	d := []string{fmt.Sprintf("`%s` by %s never returned: the kernel rolled it back and sent SIGSYS, so it has no result (the driver never saw it).", nvdev.FormatCall(e), thread),
		"That is a seccomp filter's action on this call: SECCOMP_RET_KILL_PROCESS or KILL_THREAD (the kernel kills the process or thread), or SECCOMP_RET_TRAP (SIGSYS, which kills a process that does not handle it)."}
	if e.ThreadKilled {
		d = []string{fmt.Sprintf("`%s` by %s never returned: the kernel ended that thread inside the call (SIGSYS), so it has no result (the driver never saw it).", nvdev.FormatCall(e), thread),
			"That is a seccomp filter's SECCOMP_RET_KILL_THREAD: the process's other threads went on without it, so a program waiting for CUDA's initialisation hangs rather than dies."}
	}
	died := false
	if x := a.exitOf(e.PID, i); x != nil {
		switch {
		case x.Signal == int(unix.SIGSYS):
			died = true
			d = append(d, fmt.Sprintf("%s then died of SIGSYS (a shell reports exit status %d; nothing is printed by CUDA).", nvdev.Caller(x), 128+int(unix.SIGSYS)))
		case x.Signal != 0:
			d = append(d, fmt.Sprintf("%s then died of %s.", nvdev.Caller(x), unix.SignalName(unix.Signal(x.Signal))))
		default:
			d = append(d, fmt.Sprintf("%s went on and exited %d: a SIGSYS handler took the call (SECCOMP_RET_TRAP), and CUDA did not get what it asked for.", nvdev.Caller(x), x.ExitCode))
		}
	}
	if line, f := a.filterInstalled(i); f != nil {
		d = append(d, line)
	}
	switch n, known := a.targetFilters(); {
	case known && n > 0:
		d = append(d, fmt.Sprintf("The target runs under %d seccomp filter(s) of its own (Seccomp: 2, /proc/PID/status).", n))
	case !known:
		d = append(d, "The target was gone before its seccomp state could be read; `grep Seccomp /proc/PID/status` of the same job while it runs shows the filter (Seccomp: 2).")
	}
	cause := "a seccomp filter killed the process with SIGSYS"
	switch {
	case e.ThreadKilled:
		cause = "a seccomp filter killed the thread (SECCOMP_RET_KILL_THREAD), and the process went on without it"
	case !died:
		cause = "a seccomp filter trapped it with SIGSYS"
	}
	fix := a.seccompFix(e.Syscall)
	if e.Kind == tracer.KindIoctl {
		fix += "\nNVIDIA's requests are ioctl type 'F' (0x46) on /dev/nvidiactl and /dev/nvidiaN, and nvidia-uvm's on /dev/nvidia-uvm: a profile that filters ioctl by request must let them through."
	}
	fix += "\nIn a seccomp profile the action is SCMP_ACT_KILL, SCMP_ACT_KILL_PROCESS or SCMP_ACT_TRAP; systemd's SystemCallFilter= kills unless SystemCallErrorNumber= is set. To confirm, run once unconfined (`--security-opt seccomp=unconfined`)."
	a.add(Finding{ID: "seccomp-killed", Severity: SeverityError,
		Summary: fmt.Sprintf("a seccomp filter killed %s with SIGSYS in %s", nvdev.Caller(e), e.Syscall),
		Detail:  d, Fix: fix, Events: []uint64{e.Seq}}, cause)
}
