package ptrace

import (
	"sort"

	"golang.org/x/sys/unix"
)

// seccomp_data offsets (linux/seccomp.h).
const (
	seccompDataNr   = 0
	seccompDataArch = 4
)

// filterWatch are the calls that install a seccomp filter. They stop too: a
// filter of the target's own that refuses a call outranks our
// SECCOMP_RET_TRACE, so from then on its tasks stop at every syscall entry
// (before seccomp runs) to see what it refuses.
var filterWatch = []uint64{unix.SYS_SECCOMP, unix.SYS_PRCTL}

// seccompFilter builds the classic-BPF program installed in a launched
// target: SECCOMP_RET_TRACE for the traced syscalls of the native
// architecture, SECCOMP_RET_ALLOW for everything else. Only traced syscalls
// stop the target; the rest run at full speed.
func seccompFilter() []unix.SockFilter {
	nrs := make([]uint64, 0, len(nativeSyscalls)+len(filterWatch))
	for nr := range nativeSyscalls {
		nrs = append(nrs, nr)
	}
	nrs = append(nrs, filterWatch...)
	sort.Slice(nrs, func(i, j int) bool { return nrs[i] < nrs[j] })
	n := len(nrs)

	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	// Layout: [0] ld arch, [1] arch?, [2] ld nr, [3] x32?, [4..4+n) nr?,
	// [4+n] allow, [5+n] trace.
	allow, trace := 4+n, 5+n
	prog := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataArch),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nativeArch, 0, uint8(allow-2)),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, seccompDataNr),
	}
	if x32SyscallBit != 0 {
		prog = append(prog, jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, x32SyscallBit, uint8(allow-4), 0))
	} else {
		prog = append(prog, jump(unix.BPF_JMP|unix.BPF_JA, 0, 0, 0))
	}
	for i, nr := range nrs {
		prog = append(prog, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, uint32(nr), uint8(trace-(4+i)-1), 0))
	}
	prog = append(prog,
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW),
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_TRACE),
	)
	return prog
}
