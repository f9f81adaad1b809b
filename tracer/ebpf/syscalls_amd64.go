package ebpf

import "golang.org/x/sys/unix"

// syscallNumbers: x86-64 still has the pre-*at calls.
var syscallNumbers = [...]int{
	bpfSyscallIdSC_OPENAT:       unix.SYS_OPENAT,
	bpfSyscallIdSC_OPENAT2:      unix.SYS_OPENAT2,
	bpfSyscallIdSC_OPEN:         unix.SYS_OPEN,
	bpfSyscallIdSC_CREAT:        unix.SYS_CREAT,
	bpfSyscallIdSC_IOCTL:        unix.SYS_IOCTL,
	bpfSyscallIdSC_MKNODAT:      unix.SYS_MKNODAT,
	bpfSyscallIdSC_MKNOD:        unix.SYS_MKNOD,
	bpfSyscallIdSC_UNLINKAT:     unix.SYS_UNLINKAT,
	bpfSyscallIdSC_UNLINK:       unix.SYS_UNLINK,
	bpfSyscallIdSC_SYMLINKAT:    unix.SYS_SYMLINKAT,
	bpfSyscallIdSC_SYMLINK:      unix.SYS_SYMLINK,
	bpfSyscallIdSC_MKDIRAT:      unix.SYS_MKDIRAT,
	bpfSyscallIdSC_MKDIR:        unix.SYS_MKDIR,
	bpfSyscallIdSC_NEWFSTATAT:   unix.SYS_NEWFSTATAT,
	bpfSyscallIdSC_STAT:         unix.SYS_STAT,
	bpfSyscallIdSC_LSTAT:        unix.SYS_LSTAT,
	bpfSyscallIdSC_STATX:        unix.SYS_STATX,
	bpfSyscallIdSC_FACCESSAT:    unix.SYS_FACCESSAT,
	bpfSyscallIdSC_FACCESSAT2:   unix.SYS_FACCESSAT2,
	bpfSyscallIdSC_ACCESS:       unix.SYS_ACCESS,
	bpfSyscallIdSC_MEMFD_CREATE: unix.SYS_MEMFD_CREATE,
	bpfSyscallIdSC_EXECVE:       unix.SYS_EXECVE,
	bpfSyscallIdSC_EXECVEAT:     unix.SYS_EXECVEAT,
}

// limitSyscallNumbers are the exit-only calls (KIND_LIMIT), keyed by
// their id: what libcuda's fds and address space come from. x86-64 has
// no mmap2 (a 32-bit call, not looked at).
var limitSyscallNumbers = map[bpfSyscallId]int{
	bpfSyscallIdSC_MMAP:       unix.SYS_MMAP,
	bpfSyscallIdSC_EVENTFD2:   unix.SYS_EVENTFD2,
	bpfSyscallIdSC_EVENTFD:    unix.SYS_EVENTFD,
	bpfSyscallIdSC_PIPE2:      unix.SYS_PIPE2,
	bpfSyscallIdSC_PIPE:       unix.SYS_PIPE,
	bpfSyscallIdSC_SOCKET:     unix.SYS_SOCKET,
	bpfSyscallIdSC_SOCKETPAIR: unix.SYS_SOCKETPAIR,
}
