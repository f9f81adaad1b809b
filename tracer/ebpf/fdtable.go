package ebpf

import (
	"sync"

	"golang.org/x/sys/unix"
)

// fdTableAhead is the fd table size start-up grows to before the load
// needs it: the parallel load holds ~150 fds at once on a 16-CPU host
// (programs, their BTF, the groups' map clones), ~100 on 2 CPUs.
const fdTableAhead = 512

var fdTableGrown sync.Once

// growFDTableAhead grows this process's fd table in the background, once.
// Growing the table of a multi-threaded process waits for an RCU grace
// period, and every thread that needs a higher fd waits with it: on the
// H200 host the load's own growths (64 → 128 → 256) stopped all nine
// loading groups for 20-33 ms each. Done here, while the kernel's BTF is
// parsed, the wait is off the path to the target's start.
func growFDTableAhead() {
	fdTableGrown.Do(func() { go growFDTable() })
}

// growFDTable makes the table hold fdTableAhead fds. On failure the load
// grows it as it goes.
func growFDTable() {
	ev, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		return
	}
	defer func() { _ = unix.Close(ev) }()
	// The lowest free fd at or above the argument: never one in use.
	// Refused under a low RLIMIT_NOFILE.
	if fd, err := unix.FcntlInt(uintptr(ev), unix.F_DUPFD_CLOEXEC, fdTableAhead-1); err == nil {
		_ = unix.Close(fd)
	}
}
