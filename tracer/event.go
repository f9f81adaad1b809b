// Package tracer defines the one event type every backend produces, and the
// interface the backends implement. The backends live in sub-packages
// (tracer/ebpf, tracer/ptrace, tracer/stracelog) so that consumers of events
// (analysis, report) never import BPF or ptrace code.
package tracer

import (
	"fmt"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Kind groups syscalls by what they do to a device node, so that analysis
// does not care whether the target called open or openat2, stat or statx.
type Kind string

const (
	KindOpen    Kind = "open"    // open, openat, openat2
	KindIoctl   Kind = "ioctl"   // ioctl on an NVIDIA character device (or fd -1 after a failed open)
	KindStat    Kind = "stat"    // stat, lstat, newfstatat, statx
	KindAccess  Kind = "access"  // access, faccessat, faccessat2
	KindMknod   Kind = "mknod"   // mknod, mknodat
	KindUnlink  Kind = "unlink"  // unlink, unlinkat
	KindSymlink Kind = "symlink" // symlink, symlinkat
	KindMkdir   Kind = "mkdir"   // mkdir, mkdirat
	KindMemfd   Kind = "memfd"   // memfd_create (seccomp denials show here)
	KindExec    Kind = "exec"    // execve, execveat
	KindExit    Kind = "exit"    // a process (thread group) exited
	// KindSeccomp is a process putting itself under seccomp: seccomp(2)
	// SECCOMP_SET_MODE_FILTER/STRICT or prctl(PR_SET_SECCOMP). Mode is the
	// SECCOMP_MODE_* it set (1 strict, 2 filter: /proc/PID/status
	// "Seccomp:"), Flags the SECCOMP_FILTER_FLAG_* bits (8, NEW_LISTENER: a
	// supervisor answers through SECCOMP_RET_USER_NOTIF), Ret the result
	// (a listener fd, or 0). From then on the kernel may refuse this
	// process's calls, and those of children it forks later, before they
	// reach a driver. Only the strace-log importer produces it so far.
	KindSeccomp Kind = "seccomp"
	// KindAPI is a return from a CUDA driver or NVML entry point (cuInit,
	// nvmlInit_v2, ...), caught by a uretprobe: Func names it, Path is the
	// library, Ret is the CUresult or nvmlReturn_t it returned.
	KindAPI Kind = "api"
	// KindLimit is an mmap, eventfd, pipe or socket call that a resource
	// limit failed (Ret -EMFILE, -ENFILE or -ENOMEM): the fds and the
	// address space libcuda takes besides the device nodes. Syscall and
	// Ret alone. The eBPF backend sees them all (not on the fentry hook,
	// watch where fentry is allowed: a program there would run on every
	// process's mmap), the ptrace backend the fd calls (not mmap: a
	// process makes thousands), and strace logs those they hold.
	KindLimit Kind = "limit"
	// KindEnv is a process's environment block (Env) as the kernel side
	// copied it when a probed CUDA or NVML entry point failed: the
	// environment decides cuInit (CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH),
	// and the process is often gone before /proc/PID/environ can be read.
	// Sent once per process image; the pipeline keeps only the variables a
	// report may carry and never records the event.
	KindEnv Kind = "env"
)

// LimitSyscalls are the calls a KindLimit event can be, and LimitErrnos
// the errnos that make one (bpf/cudatrace.c's enum limit_errno).
var (
	LimitSyscalls = []string{"mmap", "mmap2", "eventfd", "eventfd2", "pipe", "pipe2", "socket", "socketpair"}
	LimitErrnos   = []syscall.Errno{unix.ENOMEM, unix.ENFILE, unix.EMFILE}
)

// Dev is a device number as the kernel sees it.
type Dev struct {
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
}

func (d Dev) String() string { return fmt.Sprintf("%d:%d", d.Major, d.Minor) }

// Event is one traced syscall (or process exit). Every backend, and the
// strace-log importer, produce exactly this type.
type Event struct {
	Seq     uint64        `json:"seq"`     // order of arrival, from 1
	Time    time.Duration `json:"t_ns"`    // since the trace started
	PID     int           `json:"pid"`     // thread group id
	TID     int           `json:"tid"`     // thread id
	Comm    string        `json:"comm"`    // task comm at the time of the call
	Kind    Kind          `json:"kind"`    // what the call does
	Syscall string        `json:"syscall"` // the kernel's name: openat, newfstatat, ...
	Path    string        `json:"path,omitempty"`
	Target  string        `json:"target,omitempty"` // symlink: the link's contents
	Argv    []string      `json:"argv,omitempty"`   // exec: argv as far as it was read
	Flags   uint64        `json:"flags,omitempty"`  // open flags, access mode, AT_* flags
	Mode    uint32        `json:"mode,omitempty"`   // open/mknod/mkdir mode argument; stat: st_mode of the result
	// Dev is the device involved, when known: the node an open returned
	// (read from the new fd's inode), the st_rdev a stat returned, the dev_t
	// a mknod asked for, or the device behind an ioctl's fd.
	Dev     *Dev   `json:"dev,omitempty"`
	FD      int    `json:"fd,omitempty"`      // ioctl: the fd used
	Request uint32 `json:"request,omitempty"` // ioctl: request number
	Arg     []byte `json:"arg,omitempty"`     // ioctl: leading bytes of the params block after the call
	Ret     int64  `json:"ret"`               // return value, -errno on failure; api: the library's return code
	Func    string `json:"func,omitempty"`    // api: the entry point that returned
	// Out is what an api call returned through its out-argument, when
	// read (cuDeviceGetCount: the number of devices).
	Out *int64 `json:"out,omitempty"`
	// Limits (api) are the process's resource limits when the entry point
	// failed, read in the kernel at its return (the uprobes): a target that
	// exits at once has no /proc left to read them from. nil: not read.
	Limits *Limits `json:"limits,omitempty"`
	// Status (ioctl) is the params word that holds the driver's own result
	// (Spec.InbandStatus), read after a successful call: Arg may stop
	// short of it. nil when the request has none or it was unreadable.
	Status *ParamWord `json:"status,omitempty"`
	// NoEntry: the call never reached the kernel's syscall code; something
	// answered it first (a seccomp filter's RET_ERRNO or USER_NOTIF).
	NoEntry bool `json:"no_entry,omitempty"`
	// NoReturn: the call never returned to the program. A seccomp filter's
	// KILL_PROCESS, KILL_THREAD or TRAP rolled it back and sent SIGSYS: the
	// tracers see it come back holding its own syscall number, not a
	// result, and so keep no Ret (0), Arg or Status for it.
	NoReturn bool `json:"no_return,omitempty"`
	// ThreadKilled (with NoReturn): the kernel ended the calling thread
	// inside the call (seccomp KILL_THREAD on a thread not its process's
	// last), and the process went on without it.
	ThreadKilled bool `json:"thread_killed,omitempty"`
	// Unprobed (open of a CUDA/NVML library, host-wide traces): no
	// uretprobe was on the file yet, and the process was not stopped
	// while they were put on, so its first API returns may be missing.
	Unprobed bool `json:"unprobed,omitempty"`
	// CgroupID is the task's cgroup v2 id when the call returned (the
	// inode number of its cgroup2 directory), where the backend records it
	// in the kernel (eBPF): the device policy is found from it once the
	// process is gone. 0: not recorded.
	CgroupID uint64 `json:"cgroup_id,omitempty"`
	// Exit events only.
	ExitCode int `json:"exit_code,omitempty"`
	Signal   int `json:"signal,omitempty"`
	// Env (KindEnv) is the NUL-separated environment block, whole or, when
	// Flags is EnvCut, its first part. Never serialised: it holds secrets.
	Env []byte `json:"-"`
}

// EnvCut in a KindEnv event's Flags: the block was longer than the kernel
// side copies.
const EnvCut = 1

// Copy returns a deep copy of e, for a Sink that keeps it: the backend may
// reuse e and what it points to once the Sink returns.
func (e *Event) Copy() Event {
	c := *e
	c.Arg = slices.Clone(e.Arg)
	c.Env = slices.Clone(e.Env)
	c.Argv = slices.Clone(e.Argv)
	if e.Dev != nil {
		d := *e.Dev
		c.Dev = &d
	}
	if e.Out != nil {
		o := *e.Out
		c.Out = &o
	}
	if e.Status != nil {
		w := *e.Status
		c.Status = &w
	}
	if e.Limits != nil {
		l := *e.Limits
		c.Limits = &l
	}
	return c
}

// ParamWord is a little-endian 32-bit word of an ioctl's params block.
type ParamWord struct {
	Off   uint32 `json:"off"`   // byte offset in the params block
	Value uint32 `json:"value"` // as read after the call
}

// Failed reports whether the call returned an error.
func (e *Event) Failed() bool {
	return e.Kind != KindExit && e.Kind != KindAPI && e.Ret < 0 && e.Ret > -4096
}

// APIFailed reports whether a CUDA or NVML entry point returned an error
// (any code but 0: CUDA_SUCCESS, NVML_SUCCESS).
func (e *Event) APIFailed() bool { return e.Kind == KindAPI && e.Ret != 0 }

// Errno is the error the call failed with, or 0.
func (e *Event) Errno() syscall.Errno {
	if !e.Failed() {
		return 0
	}
	return syscall.Errno(-e.Ret)
}

// ErrnoName is the symbolic name (EPERM), or "" for a successful call.
func (e *Event) ErrnoName() string {
	if !e.Failed() {
		return ""
	}
	if n := unix.ErrnoName(e.Errno()); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", -e.Ret)
}

// Sink receives events as a backend produces them. Backends call it from one
// goroutine, in order. The event and the slices it points to are valid only
// during the call (backends may reuse buffers); a sink that keeps an event
// copies it.
type Sink interface {
	Event(*Event)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(*Event)

func (f SinkFunc) Event(e *Event) { f(e) }

// Limits are resource limits, (soft, hard) each; ^0 is unlimited.
type Limits struct {
	AS      [2]uint64 `json:"as"`      // RLIMIT_AS
	NoFile  [2]uint64 `json:"nofile"`  // RLIMIT_NOFILE
	MemLock [2]uint64 `json:"memlock"` // RLIMIT_MEMLOCK
}
