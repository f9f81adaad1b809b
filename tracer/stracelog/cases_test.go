package stracelog

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/tracer"
)

// Small logs for what the recordings and generated logs do not show. Each
// line is in the form strace prints; the forms come from the recordings or
// from strace 6.1 on this machine.

// want describes one expected event; zero fields are not checked, except
// that Ret is always checked.
type want struct {
	kind    tracer.Kind
	syscall string
	path    string
	target  string
	pid     int
	tid     int
	comm    string
	t       time.Duration
	flags   uint64
	mode    uint32
	dev     *tracer.Dev
	fd      int
	request uint32
	ret     int64
	argv    []string
	code    int
	signal  int
}

func checkEvents(t *testing.T, lg *Log, wants []want) {
	t.Helper()
	checkStream(t, lg)
	if len(lg.Events) != len(wants) {
		for _, e := range lg.Events {
			t.Logf("%+v", e)
		}
		t.Fatalf("%d events, want %d", len(lg.Events), len(wants))
	}
	for i, w := range wants {
		e := lg.Events[i]
		bad := e.Kind != w.kind || e.Ret != w.ret ||
			(w.syscall != "" && e.Syscall != w.syscall) ||
			(w.path != "" && e.Path != w.path) ||
			(w.target != "" && e.Target != w.target) ||
			(w.pid != 0 && e.PID != w.pid) ||
			(w.tid != 0 && e.TID != w.tid) ||
			(w.comm != "" && e.Comm != w.comm) ||
			(w.t != 0 && e.Time != w.t) ||
			(w.flags != 0 && e.Flags != w.flags) ||
			(w.mode != 0 && e.Mode != w.mode) ||
			(w.dev != nil && !sameDev(e.Dev, w.dev)) ||
			(w.fd != 0 && e.FD != w.fd) ||
			(w.request != 0 && e.Request != w.request) ||
			(w.argv != nil && strings.Join(e.Argv, "\x00") != strings.Join(w.argv, "\x00")) ||
			e.ExitCode != w.code || e.Signal != w.signal
		if bad {
			t.Errorf("event %d: %+v\nwant %+v", i, e, w)
		}
	}
}

const (
	ebadf  = -int64(syscall.EBADF)
	enoent = -int64(syscall.ENOENT)
	eacces = -int64(syscall.EACCES)
	eperm  = -int64(syscall.EPERM)
	erofs  = -int64(syscall.EROFS)
)

func TestUnfinishedResumed(t *testing.T) {
	// strace -f to stderr: "[pid N]" prefixes; two threads' opens interleaved.
	lg := parseText(t, `[pid   700] 10:00:00.000100 openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC <unfinished ...>
[pid   701] 10:00:00.000150 openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR <unfinished ...>
[pid   700] 10:00:00.000200 <... openat resumed>) = 5
[pid   701] 10:00:00.000250 <... openat resumed>) = -1 EACCES (Permission denied)
[pid   700] 10:00:00.000300 ioctl(5, _IOC(_IOC_NONE, 0, 0x1, 0x3000), 0x7ffd5b542570) = 0
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindOpen, path: "/dev/nvidia-uvm", pid: 700, flags: 0x80002, ret: 5},
		{kind: tracer.KindOpen, path: "/dev/nvidiactl", pid: 701, t: 50 * time.Microsecond, flags: 2, ret: eacces},
		{kind: tracer.KindIoctl, path: "/dev/nvidia-uvm", pid: 700, fd: 5, request: 0x30000001, t: 200 * time.Microsecond},
	})
	if lg.Events[0].Time != 0 || !lg.HasPIDs || !lg.HasTimes || lg.HasFDPaths {
		t.Errorf("%+v", lg)
	}
}

func TestFDTracking(t *testing.T) {
	// No -y: which fds are NVIDIA devices comes from the opens alone.
	lg := parseText(t, `100 execve("/usr/bin/python3", ["python3"], 0x7ffd /* 3 vars */) = 0
100 open("/dev/nvidiactl", O_RDWR) = 3
100 ioctl(3, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xd6, 0x8), 0x7ffd1) = 0
100 close(3) = 0
100 ioctl(3, TCGETS, 0x7ffd2) = -1 ENOTTY (Inappropriate ioctl for device)
100 openat(AT_FDCWD, "/dev/nvidia0", O_RDWR|O_CLOEXEC) = 4
100 dup2(4, 10) = 10
100 ioctl(10, 0xc00446c9, 0x7ffd3) = 0
100 openat(AT_FDCWD, "/etc/passwd", O_RDONLY) = 4
100 ioctl(4, TCGETS, 0x7ffd4) = -1 ENOTTY (Inappropriate ioctl for device)
100 openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = 5
100 openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) = 6
100 fcntl(5, F_DUPFD_CLOEXEC, 0) = 7
100 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f0541cbba10) = 101
101 ioctl(5, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x7ffd5) = 0
101 execve("/usr/bin/nvidia-smi", ["nvidia-smi", "-L"], 0x7ffd /* 3 vars */) = 0
101 ioctl(5, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2b, 0x30), 0x7ffd6) = 0
101 ioctl(6, _IOC(_IOC_NONE, 0, 0x1, 0x3000), 0x7ffd7) = 0
101 ioctl(7, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2b, 0x30), 0x7ffd8) = 0
101 ioctl(10, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xc9, 0x4), 0x7ffd9) = 0
101 exit_group(0) = ?
101 +++ exited with 0 +++
100 --- SIGSEGV {si_signo=SIGSEGV, si_code=SEGV_MAPERR, si_addr=NULL} ---
100 +++ killed by SIGSEGV (core dumped) +++
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindExec, path: "/usr/bin/python3", comm: "python3", argv: []string{"python3"}},
		{kind: tracer.KindOpen, syscall: "open", path: "/dev/nvidiactl", flags: 2, ret: 3},
		{kind: tracer.KindIoctl, path: "/dev/nvidiactl", fd: 3, request: 0xC00846D6},
		// the TCGETS on the closed fd 3 is not an NVIDIA call
		{kind: tracer.KindOpen, path: "/dev/nvidia0", flags: 0x80002, ret: 4},
		{kind: tracer.KindIoctl, path: "/dev/nvidia0", fd: 10, request: 0xC00446C9},
		// fd 4 is /etc/passwd now
		{kind: tracer.KindOpen, path: "/dev/nvidiactl", ret: 5, flags: 2},
		{kind: tracer.KindOpen, path: "/dev/nvidia-uvm", ret: 6, flags: 0x80002},
		// the child inherits the fds and the comm
		{kind: tracer.KindIoctl, path: "/dev/nvidiactl", pid: 101, comm: "python3", fd: 5, request: 0xC020462A},
		{kind: tracer.KindExec, path: "/usr/bin/nvidia-smi", pid: 101, comm: "nvidia-smi", argv: []string{"nvidia-smi", "-L"}},
		{kind: tracer.KindIoctl, path: "/dev/nvidiactl", pid: 101, comm: "nvidia-smi", fd: 5, request: 0xC030462B},
		// fds 6 and 7 were close-on-exec; 10 (from dup2) was not
		{kind: tracer.KindIoctl, path: "/dev/nvidia0", pid: 101, fd: 10, request: 0xC00446C9},
		{kind: tracer.KindExit, pid: 101},
		{kind: tracer.KindExit, pid: 100, signal: 11},
	})
	if lg.Exit == nil || *lg.Exit != (tracer.ExitStatus{Signal: 11}) {
		t.Errorf("Exit = %+v", lg.Exit)
	}
	if lg.HasTimes || !lg.HasPIDs {
		t.Errorf("HasTimes %v HasPIDs %v", lg.HasTimes, lg.HasPIDs)
	}
}

func TestAnnotations(t *testing.T) {
	lg := parseText(t, `200 openat(AT_FDCWD</root>, "/dev/nvidiactl", O_RDWR) = 3</dev/nvidiactl<char 195:255>>
200 ioctl(3</tmp/x.pyc>, TCGETS, 0x1) = -1 ENOTTY (Inappropriate ioctl for device)
200 ioctl(3, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x2) = 0
200 ioctl(7</dev/nvidia0<char 195:0>>, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xd7, 0x230), 0x3) = 0
200 ioctl(9</dev/dri/renderD128<char 226:128>>, _IOC(_IOC_READ|_IOC_WRITE, 0x64, 0x2a, 0x20), 0x4) = 0
200 openat(3</dev>, "nvidia-uvm", O_RDWR) = 4</dev/nvidia-uvm<char 238:0>>
200 openat(AT_FDCWD</root>, "/run/gpu-link", O_RDWR) = 5</dev/nvidia-uvm<char 238:0>>
200 newfstatat(4</dev/nvidia-uvm<char 238:0>>, "", {st_mode=S_IFCHR|0666, st_rdev=makedev(0xee, 0), ...}, AT_EMPTY_PATH) = 0
200 openat(AT_FDCWD</root>, "/dev/nvidia-uvm-tools", O_RDWR) = 6</dev/nvidia-uvm-tools (deleted)>
200 ioctl(6</dev/nvidia-uvm-tools (deleted)>, _IOC(_IOC_NONE, 0, 0x4b, 0), 0) = 0
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindOpen, path: "/dev/nvidiactl", ret: 3, flags: 2, dev: dev(195, 255)},
		// the annotation says fd 3 is a file now, so the untagged ioctl on
		// fd 3 after it is not an NVIDIA call either
		{kind: tracer.KindIoctl, path: "/dev/nvidia0", fd: 7, request: 0xC23046D7, dev: dev(195, 0)},
		// paths are kept as passed, as the live tracers see them; the
		// returned fds say these opens are NVIDIA ones
		{kind: tracer.KindOpen, path: "nvidia-uvm", ret: 4, dev: dev(238, 0)},
		{kind: tracer.KindOpen, path: "/run/gpu-link", ret: 5, flags: 2, dev: dev(238, 0)},
		// an fstat through newfstatat(fd, "") has no path to match
		{kind: tracer.KindOpen, path: "/dev/nvidia-uvm-tools", ret: 6},
		{kind: tracer.KindIoctl, path: "/dev/nvidia-uvm-tools", fd: 6, request: 0x4b},
	})
	if !lg.HasFDPaths || !lg.HasDevNumbers {
		t.Errorf("HasFDPaths %v HasDevNumbers %v", lg.HasFDPaths, lg.HasDevNumbers)
	}
	if lg.Events[0].Dev == lg.Events[1].Dev {
		t.Error("events share a Dev pointer")
	}
}

func TestSyscallForms(t *testing.T) {
	// No pid prefix, no timestamps: strace -o FILE without -f.
	lg := parseText(t, `execve("/usr/bin/python3", ["python3", "-c", "print(\"a, b)\")"..., "x\\y"], 0x7ffd /* 1 var */) = 0
open("/dev/nvidia-uvm", O_RDWR|O_CREAT, 0666) = -1 EACCES (Permission denied)
creat("/dev/nvidia-foo", 0644) = -1 EROFS (Read-only file system)
openat2(AT_FDCWD, "/dev/nvidiactl", {flags=O_RDWR|O_CLOEXEC, resolve=0, mode=0}, 24) = 3
statx(AT_FDCWD, "/dev/nvidia-uvm", AT_STATX_SYNC_AS_STAT, STATX_ALL, {stx_mask=STATX_BASIC_STATS|STATX_MNT_ID, stx_attributes=0, stx_mode=S_IFCHR|0666, stx_size=0, stx_rdev_major=238, stx_rdev_minor=0, ...}) = 0
lstat("/dev/char/195:255", {st_mode=S_IFLNK|0777, st_size=12, ...}) = 0
stat("/dev/nvidia0", {st_mode=S_IFCHR|S_ISVTX|0660, st_rdev=makedev(195, 0), ...}) = 0
faccessat2(AT_FDCWD, "/dev/nvidiactl", R_OK|W_OK, AT_EACCESS) = 0
access("/sys/module/nvidia/initstate", R_OK) = 0
mknodat(AT_FDCWD, "/dev/nvidia-uvm", S_IFCHR|0666, makedev(0xee, 0)) = 0
mknod("/dev/nvidia-uvm-tools", S_IFCHR|0666, makedev(0xee, 0x1)) = -1 EACCES (Permission denied)
unlinkat(AT_FDCWD, "/dev/nvidia-uvm", 0) = 0
symlinkat("../nvidia-uvm", AT_FDCWD, "/dev/char/238:0") = 0
mkdirat(AT_FDCWD, "/dev/nvidia-caps", 0755) = 0
memfd_create("cuda\"q", MFD_CLOEXEC|MFD_ALLOW_SEALING) = -1 EPERM (Operation not permitted)
mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, -1, 0) = 0x7f0541cbb000
openat(AT_FDCWD, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", O_RDONLY|O_CLOEXEC) = 4
openat(AT_FDCWD, "/usr/lib/x86_64-linux-gnu/libcudart.so.12", O_RDONLY|O_CLOEXEC) = 5
openat(AT_FDCWD, "/proc/driver/nvidia/gpus/0000:00:06.0/information", O_RDONLY) = 6
openat(AT_FDCWD, "/sys/module/nvidia_uvm/initstate", O_RDONLY) = 7
openat(AT_FDCWD, "/proc/devices", O_RDONLY) = 8
stat("/usr/sbin/nvidia-modprobe", 0x7ffd) = -1 ENOENT (No such file or directory)
stat("/etc/passwd", {st_mode=S_IFREG|0644, st_size=1, ...}) = 0
openat(AT_FDCWD, "/dev/nvidia0", O_RDONLY) = ?
execveat(3</usr/bin>, "nvidia-smi", ["nvidia-smi", "-L"], 0x7ffd /* 1 var */, AT_SYMLINK_NOFOLLOW) = -1 ENOENT (No such file or directory)
exit_group(1) = ?
+++ exited with 1 +++
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindExec, path: "/usr/bin/python3", comm: "python3", argv: []string{"python3", "-c", `print("a, b)")`, `x\y`}},
		{kind: tracer.KindOpen, syscall: "open", path: "/dev/nvidia-uvm", flags: 0x42, mode: 0o666, ret: eacces},
		{kind: tracer.KindOpen, syscall: "creat", path: "/dev/nvidia-foo", flags: 0x241, mode: 0o644, ret: erofs},
		{kind: tracer.KindOpen, syscall: "openat2", path: "/dev/nvidiactl", flags: 0x80002, ret: 3},
		{kind: tracer.KindStat, syscall: "statx", path: "/dev/nvidia-uvm", mode: 0o20666, dev: dev(238, 0)},
		{kind: tracer.KindStat, syscall: "lstat", path: "/dev/char/195:255", mode: 0o120777},
		{kind: tracer.KindStat, syscall: "stat", path: "/dev/nvidia0", mode: 0o21660, dev: dev(195, 0)},
		{kind: tracer.KindAccess, syscall: "faccessat2", path: "/dev/nvidiactl", flags: 6 | 0x200},
		{kind: tracer.KindMknod, syscall: "mknodat", path: "/dev/nvidia-uvm", mode: 0o20666, dev: dev(238, 0)},
		{kind: tracer.KindMknod, syscall: "mknod", path: "/dev/nvidia-uvm-tools", mode: 0o20666, dev: dev(238, 1), ret: eacces},
		{kind: tracer.KindUnlink, syscall: "unlinkat", path: "/dev/nvidia-uvm"},
		{kind: tracer.KindSymlink, syscall: "symlinkat", path: "/dev/char/238:0", target: "../nvidia-uvm"},
		{kind: tracer.KindMkdir, syscall: "mkdirat", path: "/dev/nvidia-caps", mode: 0o755},
		{kind: tracer.KindMemfd, path: `cuda"q`, flags: 3, ret: eperm},
		{kind: tracer.KindOpen, path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", ret: 4, flags: 0x80000},
		{kind: tracer.KindOpen, path: "/proc/driver/nvidia/gpus/0000:00:06.0/information", ret: 6},
		{kind: tracer.KindOpen, path: "/sys/module/nvidia_uvm/initstate", ret: 7},
		{kind: tracer.KindOpen, path: "/proc/devices", ret: 8},
		{kind: tracer.KindStat, path: "/usr/sbin/nvidia-modprobe", ret: enoent},
		// a failed exec leaves the comm as it was
		{kind: tracer.KindExec, syscall: "execveat", path: "nvidia-smi", comm: "python3", flags: 0x100, argv: []string{"nvidia-smi", "-L"}, ret: enoent},
		{kind: tracer.KindExit, code: 1},
	})
	if lg.Events[5].Dev != nil {
		t.Errorf("a symlink's stat has a device number: %+v", lg.Events[5])
	}
	if lg.HasPIDs || lg.HasTimes || lg.Events[0].PID != 0 {
		t.Errorf("HasPIDs %v HasTimes %v pid %d", lg.HasPIDs, lg.HasTimes, lg.Events[0].PID)
	}
	if lg.Unfinished != 1 || lg.Skipped != 0 {
		t.Errorf("Unfinished %d Skipped %d, want 1 0", lg.Unfinished, lg.Skipped)
	}
	if lg.Exit == nil || lg.Exit.Code != 1 {
		t.Errorf("Exit = %+v", lg.Exit)
	}
}

func TestTimestamps(t *testing.T) {
	const call = ` openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = -1 ENOENT (No such file or directory)` + "\n"
	for _, tc := range []struct {
		name   string
		stamps []string
		want   time.Duration
	}{
		{"-t across midnight", []string{"23:59:59", "00:00:01"}, 2 * time.Second},
		{"-tt", []string{"14:58:43.866763", "14:58:43.981226"}, 114463 * time.Microsecond},
		{"-ttt", []string{"1700000000.000100", "1700000001.000200"}, 1000100 * time.Microsecond},
		{"-ttt nanoseconds", []string{"1700000000.000000001", "1700000000.000000010"}, 9},
		{"-r", []string{"     0.000000", "     0.000250"}, 250 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := ""
			for _, s := range tc.stamps {
				text += "42 " + s + call
			}
			lg := parseText(t, text)
			if len(lg.Events) != 2 || lg.Events[0].Time != 0 || lg.Events[1].Time != tc.want || !lg.HasTimes {
				t.Errorf("%+v, want second at %v", lg.Events, tc.want)
			}
		})
	}
}

func TestIncomplete(t *testing.T) {
	lg := parseText(t, `300 10:00:00.000100 <... ioctl resumed>, 0x7ffd) = 0
300 10:00:00.000200 openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR <unfinished ...>
301 10:00:00.000250 openat(AT_FDCWD, "/etc/hosts", O_RDONLY <unfinished ...>
300 10:00:00.000300 +++ killed by SIGKILL +++
`)
	checkEvents(t, lg, []want{{kind: tracer.KindExit, pid: 300, signal: 9, t: 200 * time.Microsecond}})
	// The first line's start is not in the log; the uvm open never
	// finished; the /etc/hosts one does not matter.
	if lg.Skipped != 1 || lg.Unfinished != 1 || lg.Lines != 4 {
		t.Errorf("Lines %d Skipped %d Unfinished %d, want 4 1 1", lg.Lines, lg.Skipped, lg.Unfinished)
	}
	if lg.Exit == nil || *lg.Exit != (tracer.ExitStatus{Signal: 9}) {
		t.Errorf("Exit = %+v", lg.Exit)
	}
}

func TestThreads(t *testing.T) {
	// A thread's "+++ exited" is not its process's exit; the thread's
	// calls belong to the process.
	lg := parseText(t, `500 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS|CLONE_PARENT_SETTID|CLONE_CHILD_CLEARTID, child_tid=0x7f9ed7059990, parent_tid=0x7f9ed7059990, exit_signal=0, stack=0x7f9ed6859000, stack_size=0x7fff80, tls=0x7f9ed70596c0} => {parent_tid=[501]}, 88) = 501
501 openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = 3
500 ioctl(3, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x7ffd) = 0
501 exit(0) = ?
501 +++ exited with 0 +++
500 exit_group(2) = ?
500 +++ exited with 2 +++
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindOpen, pid: 500, tid: 501, ret: 3, flags: 2},
		{kind: tracer.KindIoctl, pid: 500, tid: 500, fd: 3, request: 0xC020462A},
		{kind: tracer.KindExit, pid: 500, code: 2},
	})
}

func TestMixedPrefixes(t *testing.T) {
	// strace -f to stderr prints no prefix while it traces one process; a
	// message of its own can land inside a line.
	lg := parseText(t, `execve("/usr/bin/python3", ["python3"], 0x7ffd /* 1 var */) = 0
openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = 3
clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLDstrace: Process 901 attached
, child_tidptr=0x7fb802387a10) = 901
[pid   901] ioctl(3, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x7ffd) = 0
[pid   900] ioctl(3, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x29, 0x10), 0x7ffd) = 0
[pid   901] +++ exited with 0 +++
openat(AT_FDCWD, "/dev/nvidia0", O_RDWR) = 4
exit_group(0) = ?
+++ exited with 0 +++
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindExec, pid: 900, comm: "python3"},
		{kind: tracer.KindOpen, pid: 900, path: "/dev/nvidiactl", ret: 3, flags: 2},
		{kind: tracer.KindIoctl, pid: 901, comm: "python3", fd: 3, request: 0xC020462A},
		{kind: tracer.KindIoctl, pid: 900, fd: 3, request: 0xC0104629},
		{kind: tracer.KindExit, pid: 901},
		{kind: tracer.KindOpen, pid: 900, path: "/dev/nvidia0", ret: 4, flags: 2},
		{kind: tracer.KindExit, pid: 900},
	})
	if lg.Skipped != 0 || lg.Lines != 10 {
		t.Errorf("Lines %d Skipped %d", lg.Lines, lg.Skipped)
	}
}

func TestIoctlRequests(t *testing.T) {
	for in, want := range map[string]uint32{
		"_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20)": 0xC020462A,
		"_IOC(_IOC_NONE, 0, 0x1, 0x3000)":              0x30000001,
		"_IOC(_IOC_NONE, 0, 0x4b, 0)":                  0x4b,
		"_IOC(_IOC_WRITE, 0x46, 0x1, 0x4)":             0x40044601,
		"_IOWR('F', 0x2a, 0x20)":                       0xC020462A,
		"_IO('F', 0x1)":                                0x4601,
		"0xc020462a":                                   0xC020462A,
		"0xc020462a /* NV_ESC_RM_CONTROL */":           0xC020462A,
		"3223340586":                                   0xC020462A,
		"TCGETS":                                       0x5401,
	} {
		if got, ok := parseIoctlRequest(in); !ok || got != want {
			t.Errorf("%s: %#x %v, want %#x", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "NV_UNKNOWN", "_IOC(_IOC_READ, 0x46)", "_IOC(_IOC_READ, 0x46, 0x100, 0)", "_IOC(_IOC_READ, 0x46, 1, 0x4000)"} {
		if got, ok := parseIoctlRequest(in); ok {
			t.Errorf("%q: %#x, want not understood", in, got)
		}
	}
}

func TestNotStrace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(rng.UintN(256))
	}
	for name, in := range map[string]string{
		"empty":   "",
		"blank":   "\n\n   \n",
		"binary":  string(garbage),
		"prose":   "Traceback (most recent call last):\n  File \"train.py\", line 1\nRuntimeError: CUDA unknown error\n",
		"ls -l":   "total 364\n-r--r--r-- 1 root root 12086 Nov 29 15:07 cuinit-deny-195-smi.strace\n",
		"no call": "100 10:00:00.000100 nothing here\n",
	} {
		t.Run(name, func(t *testing.T) {
			lg, err := Parse(strings.NewReader(in))
			if !errors.Is(err, ErrNotStrace) || lg != nil {
				t.Fatalf("got %v, %v; want ErrNotStrace", lg, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		r.n--
		return copy(p, "42 openat(AT_FDCWD, \"/dev/nvidiactl\", O_RDWR) = 3\n"), nil
	}
	return 0, io.ErrUnexpectedEOF
}

func TestBadInput(t *testing.T) {
	t.Run("read error", func(t *testing.T) {
		_, err := Parse(&failingReader{n: 2})
		if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrNotStrace) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("truncated last line", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join(recordings, "cuinit-deny-uvm.strace"))
		if err != nil {
			t.Fatal(err)
		}
		// Cut inside the second EPERM open (line 651).
		cut := strings.Index(string(raw), `639   14:58:43.981266 openat(AT_FDCWD</root>, "/dev/nvidia-uvm", O_RDWR) = -1 EP`)
		if cut < 0 {
			t.Fatal("line 651 not found")
		}
		lg := parseText(t, string(raw[:cut+len(`639   14:58:43.981266 openat(AT_FDCWD</root>, "/dev/nvidia-uvm", O_RDWR) = -1 EP`)]))
		checkStream(t, lg)
		uvm := opensOf(lg, "/dev/nvidia-uvm")
		if len(uvm) != 1 || uvm[0].Errno() != syscall.EPERM || lg.Skipped != 1 || lg.Lines != 651 || lg.Exit != nil {
			t.Errorf("uvm opens %+v, Lines %d Skipped %d Exit %v", uvm, lg.Lines, lg.Skipped, lg.Exit)
		}
	})
	t.Run("line over the limit", func(t *testing.T) {
		long := `42 execve("/bin/x", ["` + strings.Repeat("a", maxLine+10) + `"], 0x1 /* 0 vars */) = 0`
		lg := parseText(t, long+"\n42 openat(AT_FDCWD, \"/dev/nvidiactl\", O_RDWR) = 3\n")
		if lg.Lines != 2 || lg.Skipped != 1 || len(lg.Events) != 1 {
			t.Errorf("Lines %d Skipped %d events %d", lg.Lines, lg.Skipped, len(lg.Events))
		}
	})
	t.Run("CRLF", func(t *testing.T) {
		lg := parseText(t, "42 openat(AT_FDCWD, \"/dev/nvidiactl\", O_RDWR) = -1 EACCES (Permission denied)\r\n")
		checkEvents(t, lg, []want{{kind: tracer.KindOpen, ret: eacces, flags: 2}})
	})
	t.Run("nothing NVIDIA-related", func(t *testing.T) {
		lg := parseFile(t, filepath.Join(synthetic, "true.strace"))
		if lg.NVIDIARelated() || lg.Skipped != 0 || lg.Lines != 31 {
			t.Errorf("NVIDIARelated %v Lines %d Skipped %d", lg.NVIDIARelated(), lg.Lines, lg.Skipped)
		}
		checkEvents(t, lg, []want{{kind: tracer.KindExec, path: "/bin/true", comm: "true"}, {kind: tracer.KindExit}})
		if !parseFile(t, filepath.Join(recordings, "cuinit-ok-root.strace")).NVIDIARelated() {
			t.Error("a cuInit log is not NVIDIA-related")
		}
	})
	t.Run("ParseFiles names", func(t *testing.T) {
		if _, err := ParseFiles([]string{filepath.Join(synthetic, "f-t.strace"), filepath.Join(synthetic, "nof.strace")}); err == nil {
			t.Error("files without a .PID suffix accepted")
		}
		if _, err := ParseFiles([]string{filepath.Join(synthetic, "ff", "calls.1")}); err == nil {
			t.Error("missing file accepted")
		}
		// One plain log is read as Parse would.
		lg, err := ParseFiles([]string{filepath.Join(recordings, "cuinit-deny-uvm.strace")})
		if err != nil || len(opensOf(lg, "/dev/nvidia-uvm")) != 2 {
			t.Errorf("ParseFiles on one log: %v", err)
		}
	})
}

// The calls a resource limit fails (KindLimit, as the eBPF backend sends
// them): an eventfd, pipe or socket EMFILE/ENFILE, an mmap ENOMEM. The same
// calls succeeding, or failing otherwise, are not events.
func TestLimitCalls(t *testing.T) {
	emfile, enfile, enomem := -int64(syscall.EMFILE), -int64(syscall.ENFILE), -int64(syscall.ENOMEM)
	lg := parseText(t, `eventfd2(0, EFD_CLOEXEC) = 5
eventfd2(0, EFD_CLOEXEC|EFD_NONBLOCK) = -1 EMFILE (Too many open files)
pipe2([6, 7], O_CLOEXEC) = 0
pipe2(0x7ffd, O_CLOEXEC) = -1 ENFILE (Too many open files in system)
socket(AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0) = -1 EACCES (Permission denied)
socketpair(AF_UNIX, SOCK_STREAM, 0, 0x7ffd) = -1 EMFILE (Too many open files)
mmap(NULL, 4096, PROT_READ, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0) = 0x7f0541cbb000
mmap(NULL, 34359738368, PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE, -1, 0) = -1 ENOMEM (Cannot allocate memory)
mmap(0x1000, 4096, PROT_READ, MAP_FIXED|MAP_PRIVATE, 3, 0) = -1 EPERM (Operation not permitted)
`)
	checkEvents(t, lg, []want{
		{kind: tracer.KindLimit, syscall: "eventfd2", ret: emfile},
		{kind: tracer.KindLimit, syscall: "pipe2", ret: enfile},
		{kind: tracer.KindLimit, syscall: "socketpair", ret: emfile},
		{kind: tracer.KindLimit, syscall: "mmap", ret: enomem},
	})
}
