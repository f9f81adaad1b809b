package ptrace

// sysID names a traced syscall independently of the architecture's numbers.
type sysID uint8

const (
	sysNone sysID = iota
	sysOpen
	sysOpenat
	sysOpenat2
	sysCreat
	sysIoctl
	sysStat
	sysLstat
	sysNewfstatat
	sysStatx
	sysAccess
	sysFaccessat
	sysFaccessat2
	sysMknod
	sysMknodat
	sysUnlink
	sysUnlinkat
	sysSymlink
	sysSymlinkat
	sysMkdir
	sysMkdirat
	sysMemfdCreate
	sysExecve
	sysExecveat
	// The fd calls a resource limit fails (tracer.KindLimit), recorded
	// only when one did: libcuda's eventfds, pipes and sockets. Not mmap:
	// a process makes thousands, each two stops here, where eBPF tests
	// the result in the kernel for nothing.
	sysEventfd
	sysEventfd2
	sysPipe
	sysPipe2
	sysSocket
	sysSocketpair
)

// kernelName is what the event's Syscall field says (the kernel's name).
var kernelName = [...]string{
	sysOpen: "open", sysOpenat: "openat", sysOpenat2: "openat2", sysCreat: "creat",
	sysIoctl: "ioctl",
	sysStat:  "stat", sysLstat: "lstat", sysNewfstatat: "newfstatat", sysStatx: "statx",
	sysAccess: "access", sysFaccessat: "faccessat", sysFaccessat2: "faccessat2",
	sysMknod: "mknod", sysMknodat: "mknodat",
	sysUnlink: "unlink", sysUnlinkat: "unlinkat",
	sysSymlink: "symlink", sysSymlinkat: "symlinkat",
	sysMkdir: "mkdir", sysMkdirat: "mkdirat",
	sysMemfdCreate: "memfd_create",
	sysExecve:      "execve", sysExecveat: "execveat",
	sysEventfd: "eventfd", sysEventfd2: "eventfd2", sysPipe: "pipe", sysPipe2: "pipe2",
	sysSocket: "socket", sysSocketpair: "socketpair",
}

func (s sysID) String() string { return kernelName[s] }

// sysTable maps the native architecture's syscall numbers to sysIDs. A
// slice, not a map: in attach mode it is consulted on every syscall.
var sysTable = func() []sysID {
	max := uint64(0)
	for nr := range nativeSyscalls {
		max = maxU64(max, nr)
	}
	t := make([]sysID, max+1)
	for nr, id := range nativeSyscalls {
		t[nr] = id
	}
	return t
}()

func maxU64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// lookupSyscall returns the traced syscall for (arch, nr), or sysNone.
func lookupSyscall(arch uint32, nr uint64) sysID {
	if arch != nativeArch || nr >= uint64(len(sysTable)) {
		return sysNone
	}
	return sysTable[nr]
}
