package ebpf

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// x86-64 still has the pre-*at open calls; libraries built long ago use them.
const haveLegacyOpen = true

func cpath(s string) uintptr {
	b, _ := unix.BytePtrFromString(s)
	return uintptr(unsafe.Pointer(b))
}

// legacyOpen is open(2) itself, not glibc's openat.
func legacyOpen(path string, flags int) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_OPEN, cpath(path), uintptr(flags), 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func legacyCreat(path string, mode uint32) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_CREAT, cpath(path), uintptr(mode), 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}
