package faults

import "golang.org/x/sys/unix"

const nativeArch = unix.AUDIT_ARCH_AARCH64

// arm64 has no legacy open or mknod.
var syscallNumbers = map[string]uint32{
	"ioctl": unix.SYS_IOCTL, "openat": unix.SYS_OPENAT,
	"memfd_create": unix.SYS_MEMFD_CREATE, "mknodat": unix.SYS_MKNODAT,
}
