package ptrace

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// legacyCalls issues the pre-*at syscalls x86-64 still has.
func legacyCalls(prefix string) {
	p := func(s string) uintptr {
		b, _ := unix.BytePtrFromString(s)
		return uintptr(unsafe.Pointer(b))
	}
	var st unix.Stat_t
	unix.Syscall(unix.SYS_OPEN, p(prefix+"-missing"), unix.O_RDONLY, 0)
	unix.Syscall(unix.SYS_STAT, p(prefix+"-missing"), uintptr(unsafe.Pointer(&st)), 0)
	unix.Syscall(unix.SYS_ACCESS, p(prefix+"-missing"), unix.F_OK, 0)
	if fd, _, e := unix.Syscall(unix.SYS_CREAT, p(prefix+"-creat"), 0o600, 0); e == 0 {
		unix.Close(int(fd))
		unix.Syscall(unix.SYS_UNLINK, p(prefix+"-creat"), 0, 0)
	}
}

const haveLegacy = true
