package ptrace

import (
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// runFilter interprets the classic-BPF subset seccompFilter emits.
func runFilter(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32) uint32 {
	t.Helper()
	var data [16]byte
	binary.NativeEndian.PutUint32(data[seccompDataNr:], nr)
	binary.NativeEndian.PutUint32(data[seccompDataArch:], arch)
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.NativeEndian.Uint32(data[ins.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == ins.K {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			if acc&ins.K != 0 {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(ins.K)
		case unix.BPF_RET | unix.BPF_K:
			return ins.K
		default:
			t.Fatalf("unexpected instruction %+v at %d", ins, pc)
		}
	}
	t.Fatal("filter fell off its end")
	return 0
}

func TestSeccompFilter(t *testing.T) {
	prog := seccompFilter()
	// Loads of nr and arch only: the kernel's seccomp action cache then
	// proves the untraced syscalls always allowed and skips the filter for
	// them (runFilter refuses any instruction the cache cannot evaluate).
	for pc, ins := range prog {
		if ins.Code == unix.BPF_LD|unix.BPF_W|unix.BPF_ABS && ins.K != seccompDataNr && ins.K != seccompDataArch {
			t.Errorf("instruction %d loads seccomp_data offset %d", pc, ins.K)
		}
	}
	for nr := uint32(0); nr < 600; nr++ {
		want := uint32(unix.SECCOMP_RET_ALLOW)
		if _, traced := nativeSyscalls[uint64(nr)]; traced || slices.Contains(filterWatch, uint64(nr)) {
			want = unix.SECCOMP_RET_TRACE
		}
		if got := runFilter(t, prog, nativeArch, nr); got != want {
			t.Errorf("nr %d: %#x, want %#x", nr, got, want)
		}
		// Another ABI (i386 on x86-64, arm32 on arm64): never traced.
		if got := runFilter(t, prog, 0x40000003, nr); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("foreign arch nr %d: %#x", nr, got)
		}
	}
	if x32SyscallBit != 0 {
		if got := runFilter(t, prog, nativeArch, x32SyscallBit|unix.SYS_OPENAT); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("x32 openat: %#x", got)
		}
	}
	if len(nativeSyscalls) == 0 || runFilter(t, prog, nativeArch, unix.SYS_OPENAT) != unix.SECCOMP_RET_TRACE {
		t.Error("openat is not traced")
	}
	if runFilter(t, prog, nativeArch, unix.SYS_GETPPID) != unix.SECCOMP_RET_ALLOW {
		t.Error("getppid is traced")
	}
}

func TestDevDecoding(t *testing.T) {
	// mknod's dev_t: the kernel's 32-bit encoding.
	for _, d := range []tracer.Dev{{Major: 195}, {Major: 195, Minor: 255}, {Major: 509, Minor: 1}, {Major: 1, Minor: 3}, {Major: 4095, Minor: 0xfffff}} {
		enc := (d.Minor & 0xff) | (d.Major << 8) | ((d.Minor &^ 0xff) << 12)
		if got := kernelDev(enc); got != d {
			t.Errorf("kernelDev(%#x) = %v, want %v", enc, got, d)
		}
		// struct stat's st_rdev: glibc's 64-bit encoding.
		if got := userDev(unix.Mkdev(d.Major, d.Minor)); got != d {
			t.Errorf("userDev(%v) = %v", d, got)
		}
	}
}

func TestPathRules(t *testing.T) {
	for _, c := range []struct {
		path       string
		open, stat bool
	}{
		{"/dev/nvidiactl", true, true},
		{"/dev/nvidia-uvm", true, true},
		{"/dev/char/195:255", true, true},
		{"/proc/driver/nvidia/params", true, false},
		{"/proc/devices", true, false},
		{"/sys/module/nvidia_uvm/parameters/uvm_disable_hmm", true, false},
		{"/usr/lib/x86_64-linux-gnu/libcuda.so.1", true, false},
		{"/opt/compat/libnvidia-ml.so.1", true, false},
		{"libnvidia-ml.so.1", true, false}, // relative, as the kernel filter takes it too
		{"/usr/bin/nvidia-modprobe", false, true},
		{"/dev/null", false, false},
		{"/etc/libcuda.conf", false, false},
		{"nvidiactl", false, false}, // relative: matched by the fd's major instead
	} {
		if got := isInterestingOpen(c.path); got != c.open {
			t.Errorf("open %q: %v", c.path, got)
		}
		if got := isInterestingStat(c.path); got != c.stat {
			t.Errorf("stat %q: %v", c.path, got)
		}
	}
}

func TestIoctlArg(t *testing.T) {
	// Reading our own memory exercises the all-or-nothing read.
	buf := make([]byte, 100)
	for i := range buf {
		buf[i] = byte(i)
	}
	addr := uint64(uintptrOf(buf))
	var arg [64]byte
	if got := ioctlArg(unix.Getpid(), addr, &arg); len(got) != 64 || got[63] != 63 {
		t.Errorf("read %d bytes", len(got))
	}
	if got := ioctlArg(unix.Getpid(), 0, &arg); got != nil {
		t.Errorf("NULL pointer read %v", got)
	}
	if got := ioctlArg(unix.Getpid(), 7, &arg); got != nil {
		t.Errorf("small integer read as a pointer: %v", got)
	}
}

func TestRefusalMessages(t *testing.T) {
	for _, c := range []struct {
		err      error
		scope    int
		yama     bool
		tracedBy string
		root     bool
		want     string
	}{
		{unix.EPERM, 1, true, "", false, "ptrace refused: kernel.yama.ptrace_scope=1; run as root or `sysctl kernel.yama.ptrace_scope=0`"},
		{unix.EPERM, 0, true, `process 77 ("gdb")`, false, `ptrace refused: process 42 is already traced by process 77 ("gdb") (a debugger or strace?)`},
		{unix.EPERM, 0, false, "", false, "ptrace refused for process 42: operation not permitted (another user's process, or not dumpable; run as root)"},
		// As root, neither Yama's scope 1 nor "run as root" is the answer.
		{unix.EPERM, 1, true, "", true, "ptrace refused for process 42: operation not permitted, even as root (a security module or a seccomp profile forbids it)"},
		{unix.ESRCH, 2, true, "", false, "ptrace 42: no such process"},
	} {
		if got := refusal(42, c.err, c.scope, c.yama, c.tracedBy, c.root).Error(); got != c.want {
			t.Errorf("got %q\nwant %q", got, c.want)
		}
	}
}
