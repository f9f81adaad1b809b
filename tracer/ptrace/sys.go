package ptrace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Thin wrappers over ptrace(2). x/sys has most requests, but not LISTEN,
// SEIZE with options, GETEVENTMSG into a typed value or GET_SYSCALL_INFO.

// ptrace requests return at once (the tracee is stopped): RawSyscall6
// spares the scheduler's bookkeeping for a blocking call on every stop.
func ptrace(req int, tid int, addr, data uintptr) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, uintptr(req), uintptr(tid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func seize(tid int, opts int) error { return ptrace(unix.PTRACE_SEIZE, tid, 0, uintptr(opts)) }
func setOptions(tid int, opts int) error {
	return ptrace(unix.PTRACE_SETOPTIONS, tid, 0, uintptr(opts))
}
func interrupt(tid int) error { return ptrace(unix.PTRACE_INTERRUPT, tid, 0, 0) }
func listen(tid int) error    { return ptrace(unix.PTRACE_LISTEN, tid, 0, 0) }
func detach(tid int, sig int) error {
	return ptrace(unix.PTRACE_DETACH, tid, 0, uintptr(sig))
}
func cont(tid int, sig int) error      { return ptrace(unix.PTRACE_CONT, tid, 0, uintptr(sig)) }
func toSyscall(tid int, sig int) error { return ptrace(unix.PTRACE_SYSCALL, tid, 0, uintptr(sig)) }

func eventMsg(tid int) (uint64, error) {
	var msg uint64
	err := ptrace(unix.PTRACE_GETEVENTMSG, tid, 0, uintptr(unsafe.Pointer(&msg)))
	return msg, err
}

// syscallInfo mirrors struct ptrace_syscall_info (linux/ptrace.h). The union
// holds entry/seccomp {nr, args[6], ret_data} or exit {rval, is_error}.
type syscallInfo struct {
	Op     uint8
	_      [3]uint8
	Arch   uint32
	IP     uint64
	SP     uint64
	Nr     uint64 // exit: rval
	Args   [6]uint64
	RetDat uint32
	_      uint32
}

func (s *syscallInfo) rval() int64 { return int64(s.Nr) }

// getSyscallInfo works at seccomp, syscall-entry and syscall-exit stops
// (Linux 5.3+), whatever the tracee's architecture.
func getSyscallInfo(tid int, si *syscallInfo) error {
	return ptrace(unix.PTRACE_GET_SYSCALL_INFO, tid, unsafe.Sizeof(*si), uintptr(unsafe.Pointer(si)))
}

// wait4 waits for any tracee of the calling thread (__WNOTHREAD), so it
// never reaps children that other goroutines started and wait for.
func wait4(ws *unix.WaitStatus) (int, error) {
	for {
		pid, err := unix.Wait4(-1, ws, unix.WALL|unix.WNOTHREAD, nil)
		if err == unix.EINTR {
			continue
		}
		return pid, err
	}
}
