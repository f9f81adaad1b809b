package tracer

import (
	"context"
	"errors"
	"time"
)

// Spec says what to trace: a command to launch, running processes to
// attach to, or (HostWide) the whole host: exactly one of the three.
type Spec struct {
	Argv []string // command to launch; Argv[0] already resolved to a path
	// Credentials for the launched command (-u USER); nil keeps ours.
	Cred *Cred
	PIDs []int // processes to attach to

	// HostWide (cudatrace watch) traces every process on the host that
	// opens an NVIDIA device node or a CUDA/NVML library, from that open
	// on, and the processes it forks later; the tracer's own process is
	// never traced. Run returns when ctx is cancelled (or Duration
	// passes). Only the eBPF backend supports it. Each followed process's
	// events end with its KindExit event; a Sink that implements
	// FoldSink gets the process's folded counts just before it.
	HostWide bool
	// Stats, when set, is called about once a second while a HostWide
	// trace runs, from a goroutine of the backend's.
	Stats func(LiveStats)

	// Duration stops an attach (or a launch) after this long; 0 means until
	// the target exits or ctx is cancelled.
	Duration time.Duration

	// DeviceMajors are the character-device majors whose fds count as NVIDIA
	// devices (ioctl tracing, open results). Filled from /proc/devices by the
	// caller; tests point it at fake nodes.
	DeviceMajors []uint32

	// InbandStatus lists the ioctl requests whose params block holds the
	// driver's own result: NVIDIA's driver returns 0 from ioctl(2) when it
	// failed a request, and puts the NV_STATUS in the params. After each
	// successful call of a listed request a backend reads that word into
	// Event.Status and never folds (FoldIoctlsAfter) a call whose word is
	// not 0 (NV_OK). Filled by the caller from nvdev's
	// tables for the running driver version; tests list their own.
	InbandStatus []StatusWord

	// RingBufferBytes overrides the eBPF ring buffer size (0: default).
	RingBufferBytes int
	Debug           bool

	// FoldIoctlsAfter and FoldCallsAfter let a backend count, rather than
	// deliver, the successful repeats of a call site beyond the first N:
	// ioctls per (process, device, request), other calls but exec per
	// (process, kind, path). Result.Folded has the counts; 0 delivers all.
	// A report keeps that many per site verbatim anyway, so the eBPF
	// backend need not copy the rest through its ring buffer.
	FoldIoctlsAfter int
	FoldCallsAfter  int

	// DeferRelease lets Run return as soon as the trace is complete and
	// release what it holds (BPF links and maps) in the background; the
	// caller must then call Result.Finish before exiting. Detaching may
	// wait for the kernel (a few ms for the BPF links used now), which the
	// report need not wait for.
	DeferRelease bool
}

// StatusWord says where one ioctl request's params keep its result.
type StatusWord struct {
	Request uint32 // the ioctl request number, as the target passes it
	Off     uint32 // byte offset of the 32-bit result word; 0 is success
	// KeepAll: the word alone cannot show success (another field holds a
	// result too, or the driver version that picks the offset is unknown),
	// so no call of the request is folded.
	KeepAll bool
}

// LiveStats are a running HostWide trace's counters.
type LiveStats struct {
	Dropped     uint64 // events lost so far (kernel and tracer)
	Following   int    // processes followed now
	Followed    uint64 // processes followed since the start
	SyscallHook string // as Result.SyscallHook
}

// FoldSink is a Sink that, in a HostWide trace, receives each followed
// process's folded counts (see Spec.FoldIoctlsAfter) just before that
// process's exit event: the report of one process needs only its own.
type FoldSink interface {
	Sink
	Folded(pid int, folded []Folded)
}

// Cred is who the launched command runs as.
type Cred struct {
	UID    uint32
	GID    uint32
	Groups []uint32
	User   string
	Home   string // the passwd entry's home directory: the target's HOME
}

// Result is what a backend knows once tracing has ended. Events themselves
// went to the Sink as they arrived.
type Result struct {
	Backend string
	// SyscallHook is where the eBPF backend's syscall programs run:
	// "raw_tracepoint" (sys_enter/sys_exit, every syscall on the host) or
	// "fentry" (the traced syscalls only). Empty for other backends.
	SyscallHook string
	// KernelVariants are the eBPF programs' variants chosen for this
	// kernel, as "feature=variant" (memlock=raised, scans=bpf_loop, ...).
	KernelVariants []string
	Started        time.Time
	Ended          time.Time
	Events         uint64 // events delivered to the sink
	// Folded are the calls counted but not delivered (Spec.FoldIoctlsAfter).
	Folded   []Folded
	Dropped  uint64 // events the kernel (or the tracer) lost; non-zero means incomplete
	Launched bool
	// APIReturns: the backend saw the return codes of the CUDA and NVML
	// entry points (uprobes); APILibraries are the library files probed.
	APIReturns   bool
	APILibraries []string
	// Exit is the launched target's exit (nil when attaching, or when the
	// target outlived the trace).
	Exit *ExitStatus
	// Notes are facts about the trace itself the report must mention, such
	// as "no_new_privs was set on the target".
	Notes []string

	// Finish, when set (Spec.DeferRelease), blocks until the backend has
	// released everything it holds, and reports a failure to do so. After
	// a ptrace launch that Duration ended, that is until the target's
	// processes exit (it must stay traced: see tracer/ptrace); Exit is set
	// then.
	Finish func() error `json:"-"`
}

// Folded counts the successful repeats of one call site that a backend saw
// but did not deliver: those past the first Spec.Fold*After, which were
// delivered.
type Folded struct {
	PID     int
	Kind    Kind
	Path    string // calls other than ioctls; KindLimit: the syscall
	Errno   int    // KindLimit: the errno its calls failed with
	Dev     Dev    // ioctls
	Request uint32 // ioctls
	Count   uint64
}

// ExitStatus is how the launched target ended.
type ExitStatus struct {
	Code   int `json:"code"`             // exit code, if it exited
	Signal int `json:"signal,omitempty"` // the signal that killed it, if any
}

// ShellCode is the status a shell would report: the exit code, or 128+N for
// death by signal N.
func (s ExitStatus) ShellCode() int {
	if s.Signal != 0 {
		return 128 + s.Signal
	}
	return s.Code
}

// Backend traces a Spec and streams events to a Sink. Run blocks until the
// launched command exits, the attach duration passes, or ctx is cancelled
// (then an attached target is detached and left running).
type Backend interface {
	Name() string
	Run(ctx context.Context, spec Spec, sink Sink) (*Result, error)
}

// ErrUnavailable wraps the reason a backend cannot work on this host (no
// BPF, no privileges, ptrace refused). The "auto" mode falls back on it.
var ErrUnavailable = errors.New("backend unavailable")

// UnsupportedError is a Spec the backend cannot trace at all (not a host
// problem: another backend may).
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return e.Reason }
