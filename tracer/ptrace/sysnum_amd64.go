package ptrace

import "golang.org/x/sys/unix"

const nativeArch = unix.AUDIT_ARCH_X86_64

// x32 syscalls arrive with the x86-64 audit arch and this bit set in nr;
// the filter lets them through untraced.
const x32SyscallBit = 0x40000000

var nativeSyscalls = map[uint64]sysID{
	unix.SYS_OPEN: sysOpen, unix.SYS_OPENAT: sysOpenat, unix.SYS_OPENAT2: sysOpenat2, unix.SYS_CREAT: sysCreat,
	unix.SYS_IOCTL: sysIoctl,
	unix.SYS_STAT:  sysStat, unix.SYS_LSTAT: sysLstat, unix.SYS_NEWFSTATAT: sysNewfstatat, unix.SYS_STATX: sysStatx,
	unix.SYS_ACCESS: sysAccess, unix.SYS_FACCESSAT: sysFaccessat, unix.SYS_FACCESSAT2: sysFaccessat2,
	unix.SYS_MKNOD: sysMknod, unix.SYS_MKNODAT: sysMknodat,
	unix.SYS_UNLINK: sysUnlink, unix.SYS_UNLINKAT: sysUnlinkat,
	unix.SYS_SYMLINK: sysSymlink, unix.SYS_SYMLINKAT: sysSymlinkat,
	unix.SYS_MKDIR: sysMkdir, unix.SYS_MKDIRAT: sysMkdirat,
	unix.SYS_MEMFD_CREATE: sysMemfdCreate,
	unix.SYS_EXECVE:       sysExecve, unix.SYS_EXECVEAT: sysExecveat,
	unix.SYS_EVENTFD: sysEventfd, unix.SYS_EVENTFD2: sysEventfd2, unix.SYS_PIPE: sysPipe, unix.SYS_PIPE2: sysPipe2,
	unix.SYS_SOCKET: sysSocket, unix.SYS_SOCKETPAIR: sysSocketpair,
}

// rollbackValue is what a call rolled back by seccomp (KILL, TRAP) holds at
// its exit stop: syscall_rollback restores ax from orig_ax, its number.
func rollbackValue(c *call) int64 { return int64(c.nr) }
