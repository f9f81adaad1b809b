package faults

import "golang.org/x/sys/unix"

const nativeArch = unix.AUDIT_ARCH_X86_64

var syscallNumbers = map[string]uint32{
	"ioctl": unix.SYS_IOCTL, "openat": unix.SYS_OPENAT, "open": unix.SYS_OPEN,
	"memfd_create": unix.SYS_MEMFD_CREATE, "mknodat": unix.SYS_MKNODAT, "mknod": unix.SYS_MKNOD,
}
