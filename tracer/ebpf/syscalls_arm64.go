package ebpf

import "golang.org/x/sys/unix"

// syscallNumbers: arm64 has only the *at calls (asm-generic table); -1
// marks a call it lacks.
var syscallNumbers = [...]int{
	bpfSyscallIdSC_OPENAT:       unix.SYS_OPENAT,
	bpfSyscallIdSC_OPENAT2:      unix.SYS_OPENAT2,
	bpfSyscallIdSC_OPEN:         -1,
	bpfSyscallIdSC_CREAT:        -1,
	bpfSyscallIdSC_IOCTL:        unix.SYS_IOCTL,
	bpfSyscallIdSC_MKNODAT:      unix.SYS_MKNODAT,
	bpfSyscallIdSC_MKNOD:        -1,
	bpfSyscallIdSC_UNLINKAT:     unix.SYS_UNLINKAT,
	bpfSyscallIdSC_UNLINK:       -1,
	bpfSyscallIdSC_SYMLINKAT:    unix.SYS_SYMLINKAT,
	bpfSyscallIdSC_SYMLINK:      -1,
	bpfSyscallIdSC_MKDIRAT:      unix.SYS_MKDIRAT,
	bpfSyscallIdSC_MKDIR:        -1,
	bpfSyscallIdSC_NEWFSTATAT:   unix.SYS_NEWFSTATAT,
	bpfSyscallIdSC_STAT:         -1,
	bpfSyscallIdSC_LSTAT:        -1,
	bpfSyscallIdSC_STATX:        unix.SYS_STATX,
	bpfSyscallIdSC_FACCESSAT:    unix.SYS_FACCESSAT,
	bpfSyscallIdSC_FACCESSAT2:   unix.SYS_FACCESSAT2,
	bpfSyscallIdSC_ACCESS:       -1,
	bpfSyscallIdSC_MEMFD_CREATE: unix.SYS_MEMFD_CREATE,
	bpfSyscallIdSC_EXECVE:       unix.SYS_EXECVE,
	bpfSyscallIdSC_EXECVEAT:     unix.SYS_EXECVEAT,
}

// limitSyscallNumbers are the exit-only calls (KIND_LIMIT), keyed by
// their id; arm64 lacks eventfd and pipe (-1).
var limitSyscallNumbers = map[bpfSyscallId]int{
	bpfSyscallIdSC_MMAP:       unix.SYS_MMAP,
	bpfSyscallIdSC_EVENTFD2:   unix.SYS_EVENTFD2,
	bpfSyscallIdSC_EVENTFD:    -1,
	bpfSyscallIdSC_PIPE2:      unix.SYS_PIPE2,
	bpfSyscallIdSC_PIPE:       -1,
	bpfSyscallIdSC_SOCKET:     unix.SYS_SOCKET,
	bpfSyscallIdSC_SOCKETPAIR: unix.SYS_SOCKETPAIR,
}
