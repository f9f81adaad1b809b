package ptrace

import "golang.org/x/sys/unix"

const nativeArch = unix.AUDIT_ARCH_AARCH64

const x32SyscallBit = 0 // no such thing on arm64

// arm64 has only the *at variants.
var nativeSyscalls = map[uint64]sysID{
	unix.SYS_OPENAT: sysOpenat, unix.SYS_OPENAT2: sysOpenat2,
	unix.SYS_IOCTL:      sysIoctl,
	unix.SYS_NEWFSTATAT: sysNewfstatat, unix.SYS_STATX: sysStatx,
	unix.SYS_FACCESSAT: sysFaccessat, unix.SYS_FACCESSAT2: sysFaccessat2,
	unix.SYS_MKNODAT:      sysMknodat,
	unix.SYS_UNLINKAT:     sysUnlinkat,
	unix.SYS_SYMLINKAT:    sysSymlinkat,
	unix.SYS_MKDIRAT:      sysMkdirat,
	unix.SYS_MEMFD_CREATE: sysMemfdCreate,
	unix.SYS_EXECVE:       sysExecve, unix.SYS_EXECVEAT: sysExecveat,
	unix.SYS_EVENTFD2: sysEventfd2, unix.SYS_PIPE2: sysPipe2,
	unix.SYS_SOCKET: sysSocket, unix.SYS_SOCKETPAIR: sysSocketpair,
}

// rollbackValue is what a call rolled back by seccomp (KILL, TRAP) holds at
// its exit stop: syscall_rollback restores x0 from orig_x0, its first
// argument.
func rollbackValue(c *call) int64 { return int64(c.args[0]) }
