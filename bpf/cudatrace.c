//go:build ignore

// cudatrace: record the syscalls through which a process tree reaches the
// NVIDIA driver (opens, ioctls, node repairs, stats, execs, exits).
//
// Only thread groups in `traced` are looked at. User space seeds it with the
// launched loader (or the attached PIDs); forks add children, exits remove
// them. The raw sys_enter/sys_exit tracepoints see every syscall; its number,
// looked up in a table user space fills for the running arch, turns away the
// untraced ones before anything else. A recorded call is built at enter in
// its thread's `pending` slot (task storage: no hashing, no locks, freed with
// the thread) and completed and emitted at exit with its return value. A
// record that cannot be kept (ring buffer full, no slot) is counted in
// `drops`, never lost silently.
//
// Two objects are built from this file (tracer/ebpf/gen.go): the main one,
// and with CUDATRACE_FENTRY one of the fentry hook's programs alone, read
// only where that hook is chosen, so a run on the raw tracepoints does not
// parse them. Both hold every map and global, in the same layout (checked
// by TestFentryObjectMatches).
//
// A third, with CUDATRACE_OLD_KERNEL, is the one for kernels without what
// the main one takes for granted (5.10: docs/kernels.md): no task storage
// (5.11), no bpf_get_current_task_btf (5.11), no pointer arguments to
// global functions (5.12), no BPF_PSEUDO_FUNC (5.13) and so no bpf_loop,
// no bpf_task_pt_regs or attach cookies (5.15). There the per-thread slots
// are hash maps keyed by the task's address, dropped at the thread's exit;
// the current task is read through probe reads; the global functions are
// inlined; the scans are bounded loops; and user space loads a copy of
// ct_api_ret per probed entry point, its cookie call made a constant.
// The main object is the same with or without these macros.

#include "vmlinux_min.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#ifdef CUDATRACE_OLD_KERNEL
/* Verified at each call (5.10 refuses pointer arguments to global ones). */
#define GLOBAL_FN static __always_inline
#else
/* Verified once per program, for any arguments. */
#define GLOBAL_FN __attribute__((noinline))
#endif

/* Program names start with ct_: the tests find leftovers by it. */

/* Numbers the Go side shares are enums, so that bpf2go -type emits them
 * (tracer/ebpf/bpf_bpfel.go) and none is copied by hand. */
enum limits {
	PATH_LEN = 256,
	AUX_LEN = 256,
	ARGV_SLOT = 64, /* exec: bytes per argv string in aux */
	ARGV_MAX = 4,
	ARG_LEN = 64,
	NR_TABLE = 512, /* syscall numbers at or above it are not looked at */
};
/* creat(p, m) is open(p, O_CREAT|O_WRONLY|O_TRUNC, m). */
enum open_flags { CREAT_FLAGS = 01 | 0100 | 01000 };
/* struct statx (uapi/linux/stat.h), the same on every arch. */
enum statx_layout {
	STX_MODE_OFF = 0x1c,
	STX_RDEV_MAJOR_OFF = 0x80,
	STX_RDEV_MINOR_OFF = 0x84,
};
const enum limits *unused_limits __attribute__((unused));
const enum open_flags *unused_open_flags __attribute__((unused));
const enum statx_layout *unused_statx_layout __attribute__((unused));

#define S_IFMT 0170000
#define S_IFCHR 0020000
#define S_IFBLK 0060000
#define SIGNAL_GROUP_EXIT 0x00000004
#define SIGSTOP 19
#define SIGSYS 31
/* seccomp's mode once a KILL action ran (5.17+; 5.15 has none: there a
 * KILL_THREAD of one thread of many is not seen). */
#define SECCOMP_MODE_DEAD 3

/* Runtime settings, fixed at load time (the verifier prunes dead branches). */
const volatile bool follow_children = true;
const volatile bool capture_ioctl_args = true;
/* sched_process_exit passes group_dead as a second argument since 6.16. */
const volatile bool exit_tp_has_group_dead = false;
/* Offsets in the user's struct stat: x86-64 24/40, arm64 (generic) 16/32. */
const volatile __u32 stat_mode_off = 24;
const volatile __u32 stat_rdev_off = 40;
/* Successful repeats of one call site beyond the first N are counted here,
 * not sent: the report keeps that many verbatim and counts the rest
 * (report/recorder.go). Ioctls fold per (process, device, request), other
 * calls per (process, kind, path); exec never. 0: send everything. */
const volatile __u32 fold_ioctls_after = 0;
const volatile __u32 fold_calls_after = 0;
/* Stop a traced process whose open of a CUDA/NVML library returns a file
 * no uretprobe is on yet (not in probed_libs): user space attaches the
 * probes, then sends SIGCONT, before the library's code can run. */
const volatile bool hold_unprobed_libs = false;
/* cudatrace watch: an untraced process that opens something NVIDIA's is
 * followed from that open on (watch_follows). Never our own process: its
 * opens of the libraries (to probe them) would follow itself. */
const volatile bool host_wide = false;
const volatile __u32 self_tgid = 0;
/* Wake the reader once this many bytes wait in the ring (user space sets a
 * quarter of it); below that it finds them on its own short timer. */
const volatile __u64 wakeup_bytes = 2 << 20;
/* Syscall number → enum syscall_id (SC_NONE: not traced), filled by user
 * space from golang.org/x/sys/unix for the running arch. */
const volatile __u8 nr_to_sc[NR_TABLE] = {};
/* x86: TS_COMPAT in thread_info.status; arm64: TIF_32BIT in its flags. */
#define X86_TS_COMPAT 0x0002
#define ARM64_TIF_32BIT 22

enum event_kind {
	KIND_OPEN = 1,
	KIND_IOCTL,
	KIND_STAT,
	KIND_ACCESS,
	KIND_MKNOD,
	KIND_UNLINK,
	KIND_SYMLINK,
	KIND_MKDIR,
	KIND_MEMFD,
	KIND_EXEC,
	KIND_EXIT,
	KIND_API, /* a CUDA/NVML entry point returned (uretprobe) */
	/* A call a resource limit failed (EMFILE, ENFILE, ENOMEM): seen at
	 * its exit only, sent with its number and result alone. */
	KIND_LIMIT,
	/* A process's environment block, copied when a probed entry point
	 * failed (send_env): the header, then ENV_MAX bytes at most. */
	KIND_ENV,
};

/* The order is shared with user space through the generated Go twin. */
enum syscall_id {
	SC_NONE = 0,
	SC_OPENAT,
	SC_OPENAT2,
	SC_OPEN,
	SC_CREAT,
	SC_IOCTL,
	SC_MKNODAT,
	SC_MKNOD,
	SC_UNLINKAT,
	SC_UNLINK,
	SC_SYMLINKAT,
	SC_SYMLINK,
	SC_MKDIRAT,
	SC_MKDIR,
	SC_NEWFSTATAT,
	SC_STAT,
	SC_LSTAT,
	SC_STATX,
	SC_FACCESSAT,
	SC_FACCESSAT2,
	SC_ACCESS,
	SC_MEMFD_CREATE,
	SC_EXECVE,
	SC_EXECVEAT,
	SC_EXIT, /* not a syscall: the thread group died */
	SC_API,  /* not a syscall: a library call returned */
	/* Exit-only calls (KIND_LIMIT), from here on: no entry program looks
	 * at them, and no fentry hook is made for them. Their numbers are
	 * in the same table; user space keeps the list (limitSyscallNumbers). */
	SC_MMAP,
	SC_EVENTFD2,
	SC_EVENTFD,
	SC_PIPE2,
	SC_PIPE,
	SC_SOCKET,
	SC_SOCKETPAIR,
	SC_LIMIT_END, /* not a syscall: one past the last */
};

/* Errnos a resource limit gives (asm-generic/errno-base.h). */
enum limit_errno { LIMIT_ENOMEM = 12, LIMIT_ENFILE = 23, LIMIT_EMFILE = 24 };

enum drop_reason {
	DROP_RINGBUF = 0, /* bpf_ringbuf_reserve failed */
	DROP_PENDING = 1, /* no slot to keep the call in until its exit */
	DROP_CHILD = 2,   /* a child could not be added to the filter: its calls are missing */
	DROP_MAX,
};

struct event {
	__u64 ktime;
	__u64 flags;
	__s64 ret;
	__u64 uptr;      /* ioctl arg / stat buffer: read at exit */
	__u64 path_uptr; /* the path argument, re-read at exit if it was paged out */
	/* The task's cgroup v2 id when the call returned (the inode number of
	 * its cgroup2 directory): the device policy that judged the call is
	 * found from it after the process is gone (a target that fails and
	 * exits at once leaves no /proc/PID/cgroup to read). */
	__u64 cgroup_id;
	__u32 tgid;
	__u32 tid;
	__u32 request;
	__s32 fd;
	__u32 mode;
	__u32 dev_major;
	__u32 dev_minor;
	__u32 exit_code; /* exit events: the wait status code */
	__u16 syscall;   /* enum syscall_id */
	__u8 kind;       /* enum event_kind */
	__u8 has_dev;
	__u8 arg_len;    /* valid bytes in arg */
	__u8 argc;       /* exec: argv slots read into aux */
	__u8 matched;    /* the path passed the filter (open: else decided at exit) */
	__u8 retry;      /* the path could not be read at enter (RETRY_*) */
	__u16 path_len;  /* bytes of path read, with its NUL */
	/* The call's entry was never seen: something answered it before the
	 * kernel ran it (a seccomp filter's RET_ERRNO, KILL or USER_NOTIF). */
	__u8 no_entry;
	/* open of a library not yet probed: 1, the process was sent SIGSTOP
	 * (a launch); 2, it was not (host-wide: we stop no one's process) and
	 * its first calls may run unprobed. request and uptr hold the file's
	 * s_dev and i_ino. */
	__u8 held;
	__u8 has_count; /* api: flags holds the count an out-argument returned */
	__u8 has_status; /* ioctl: status holds the params word at status_off */
	__u16 status_off;
	__u32 status;    /* the driver's in-band result (inband_status) */
	char comm[16];
	/* The record sent is cut after what its kind uses: an exit ends
	 * before arg, an ioctl after it, a path call after the path's NUL;
	 * only exec and symlink carry aux. The reader zero-fills the rest. */
	__u8 arg[ARG_LEN];
	char path[PATH_LEN];
	char aux[AUX_LEN]; /* symlink target, or exec argv as ARGV_MAX slots of ARGV_SLOT */
};

struct ioctl_site {
	__u32 tgid;
	__u32 major;
	__u32 minor;
	__u32 request;
};

/* Only paths this short fold (device nodes, /proc/driver/nvidia/...): a
 * shorter key hashes faster; longer paths are sent and folded by user
 * space. */
#define FOLD_PATH_LEN 64

struct call_site {
	__u32 tgid;
	__u32 kind;
	char path[FOLD_PATH_LEN]; /* NUL-padded */
};

/* Where a request's params keep the driver's own result (NVIDIA's RM and
 * UVM ioctls return 0 and put the NV_STATUS there), at the offset for the
 * running driver: user space fills inband_status from annotate's tables. */
struct inband_word {
	__u32 off;     /* of the u32 result: 0 is success (NV_OK) */
	__u8 keep_all; /* the word alone cannot show success: never fold */
	__u8 pad[3];
};

/* A library file, as the kernel names it: the opened file's inode. */
struct lib_id {
	__u64 ino;
	__u32 dev; /* kernel dev_t of its superblock */
	__u32 pad;
};

#define EVENT_HEADER_SIZE __builtin_offsetof(struct event, arg)
#define EVENT_PATH_OFF __builtin_offsetof(struct event, path)

/* Force BTF emission of the enums for bpf2go -type. */
const enum event_kind *unused_kind __attribute__((unused));
const enum syscall_id *unused_syscall __attribute__((unused));
const enum drop_reason *unused_drop __attribute__((unused));
const struct ioctl_site *unused_ioctl_site __attribute__((unused));
const struct call_site *unused_call_site __attribute__((unused));
const struct lib_id *unused_lib_id __attribute__((unused));
const struct inband_word *unused_inband_word __attribute__((unused));

/* Not preallocated: 65536 slots took 8 ms to create at every start, and
 * entries come only from forks. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);  /* tgid */
	__type(value, __u8);
} traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);  /* character-device major */
	__type(value, __u8);
} nvidia_majors SEC(".maps");

/* The call a thread is in, from enter to exit; kind 0: none. Task storage
 * follows the task_struct, so a non-leader thread that execs (and takes the
 * leader's pid) keeps its slot, and a thread killed inside a syscall frees
 * its own. */
#ifdef CUDATRACE_OLD_KERNEL
/* Keyed by the task_struct's address, which a thread keeps for its life
 * (through an exec too); ct_exit drops the thread's slot. A full map is a
 * DROP_PENDING, as a slot task storage could not make. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct event);
} pending SEC(".maps");

/* A zeroed event: what a new slot starts as (task storage's are zeroed). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event);
} pending_zero SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct event);
} pending SEC(".maps");
#endif

/* Calls per site, for folding; user space reads them once the trace ends.
 * A site that finds the map full is sent every time instead. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ioctl_site);
	__type(value, __u64);
} ioctl_sites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct call_site);
	__type(value, __u64);
} call_sites SEC(".maps");

/* Character devices a traced process opened through an NVIDIA path
 * (/dev/nvidia*) although their major is another driver's (a stale node):
 * their ioctls are recorded too, so the ENOTTY that follows is seen. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); /* kernel dev_t */
	__type(value, __u8);
} path_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, __u32); /* ioctl request */
	__type(value, struct inband_word);
} inband_status SEC(".maps");

/* The environment a failing entry point's process ran with is copied to
 * user space once per process image (its mm): cuInit's verdict depends on
 * it (CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH), and a process that fails
 * exits at once, before /proc/PID/environ can be read. A bigger block is
 * cut (flagged in mode): user space then falls back on its own reads. */
#define ENV_MAX (64 << 10)

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* the mm's address */
	__type(value, __u8);
} env_sent SEC(".maps");

/* Library files with uretprobes on them (filled by user space). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct lib_id);
	__type(value, __u8);
} probed_libs SEC(".maps");

/* The files a launched target's loader would pick for libcuda and NVML,
 * while user space has yet to probe them (awaiting_libs: how many, set
 * before the target runs, 0 once the background probing is done): an open
 * of one by any name (a symlink or hard link of another name) is held as
 * an open of libcuda is. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, struct lib_id);
	__type(value, __u8);
} awaited_libs SEC(".maps");

volatile __u32 awaiting_libs = 0;

/* cuDeviceGetCount's int *count, from its entry to its return. */
#ifdef CUDATRACE_OLD_KERNEL
/* Keyed by the task's address; the return deletes its entry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, __u64);
} api_out_arg SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} api_out_arg SEC(".maps");
#endif

/* Host-wide: where an untraced process's open path is read to decide
 * whether to follow it (no slot is made for the opens of processes that
 * are not followed). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event);
} watch_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* sys_exit's tail calls (filled by user space before anything is
 * attached): a call whose entry no program saw is begun by its own
 * program, verified beside ct_sys_exit instead of inside it, which then
 * finishes it as any other. */
enum exit_tail_slot {
	TAIL_UNENTERED = 0, /* ct_sys_exit_unentered */
	TAIL_EXIT = 1,      /* ct_sys_exit */
	TAIL_MAX,
};
const enum exit_tail_slot *unused_exit_tail_slot __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, TAIL_MAX);
	__type(key, __u32);
	__type(value, __u32);
} exit_tail SEC(".maps");

/* The slots' numbers, in .data rather than as constants: with a key the
 * verifier knows, the JIT makes the tail call a direct jump and every
 * update of its slot rewrites kernel text, synchronising every CPU. These
 * tail calls are rare; an indirect one costs them nothing that matters. */
volatile __u32 tail_unentered_key = TAIL_UNENTERED;
volatile __u32 tail_exit_key = TAIL_EXIT;

/* The fentry hook's one shared exit (ct_fexit_common), tail-called by
 * every syscall's fexit: verified once, not once per syscall (each fexit
 * that called finish verified its ~4,900 instructions again). The kernel
 * allows the tail call because every __x64_sys_* has the same prototype. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fexit_tail SEC(".maps");

volatile __u32 fexit_tail_key = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* user space may resize before load */
} events SEC(".maps");

static __always_inline void count_drop(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &reason);
	if (n)
		*n += 1;
}

/* The current thread's slot in pending; with create, made where it has
 * none. NULL: none (or none could be made). */
static __always_inline struct event *pending_slot(bool create)
{
#ifdef CUDATRACE_OLD_KERNEL
	__u64 key = bpf_get_current_task();
	struct event *e = bpf_map_lookup_elem(&pending, &key);
	if (e || !create)
		return e;
	__u32 zero = 0;
	struct event *init = bpf_map_lookup_elem(&pending_zero, &zero);
	if (!init)
		return NULL;
	bpf_map_update_elem(&pending, &key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(&pending, &key);
#else
	return bpf_task_storage_get(&pending, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
#endif
}

static __always_inline bool is_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced, &tgid) != NULL;
}

static __always_inline bool is_nvidia_major(__u32 major)
{
	return bpf_map_lookup_elem(&nvidia_majors, &major) != NULL;
}

#ifndef CUDATRACE_OLD_KERNEL
/* Since 6.2; weak, so that older kernels load the field-by-field reads. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;
#ifndef bpf_ksym_exists
#define bpf_ksym_exists(sym) ({ \
	_Static_assert(!__builtin_constant_p(!!sym), #sym " should be __weak"); \
	!!sym; \
})
#endif
#endif
/* Tests turn the cast off to run the fallback on a kernel that has it. */
const volatile bool use_rdonly_cast = true;

/* task, for reading only. Each load of a pointer field through a trusted
 * task pointer (the current task, a tracepoint's argument) makes the
 * verifier search vmlinux's BTF, type by type, for the field's trust
 * annotations: ~0.65 ms per such load per path it walks (6.18), most of
 * the programs' load time. Through the cast, the loads are plain faulting
 * reads and the search is skipped. Before 6.2 there is no cast, and no
 * search either. */
static __always_inline struct task_struct *untrusted_task(struct task_struct *task)
{
#ifndef CUDATRACE_OLD_KERNEL
	if (use_rdonly_cast && bpf_ksym_exists(bpf_rdonly_cast))
		return bpf_rdonly_cast(task, bpf_core_type_id_kernel(struct task_struct));
#endif
	return task;
}

/* The file behind one of the current task's fds, or NULL. The walk is BTF
 * pointer loads (a faulting one reads 0), not a helper call per field; only
 * the fd array slot needs bpf_probe_read_kernel. */
static __always_inline struct file *fd_file(int fd)
{
#ifdef CUDATRACE_OLD_KERNEL
	/* No BTF-typed current task: a probe read per field. */
	struct task_struct *task = (void *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || (__u32)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
#else
	struct task_struct *task = untrusted_task(bpf_get_current_task_btf());
	struct fdtable *fdt = task->files->fdt;
	if (!fdt || fd < 0 || (__u32)fd >= fdt->max_fds)
		return NULL;
	struct file **fds = fdt->fd;
#endif
	struct file *slot = NULL;
	if (bpf_probe_read_kernel(&slot, sizeof(slot), &fds[fd]))
		return NULL;
	return slot;
}

/* The inode behind one of the current task's fds: fd → file → inode. */
static __always_inline bool fd_inode(int fd, umode_t *mode, dev_t *rdev)
{
	struct file *slot = fd_file(fd);
	if (!slot)
		return false;
	struct inode *ino;
#ifndef CUDATRACE_OLD_KERNEL
	if (use_rdonly_cast && bpf_ksym_exists(bpf_rdonly_cast)) {
		struct file *f = bpf_rdonly_cast(slot, bpf_core_type_id_kernel(struct file));
		ino = f->f_inode;
		if (!ino)
			return false;
		*mode = ino->i_mode;
		*rdev = ino->i_rdev;
		return true;
	}
#endif
	ino = BPF_CORE_READ(slot, f_inode);
	if (!ino)
		return false;
	*mode = BPF_CORE_READ(ino, i_mode);
	*rdev = BPF_CORE_READ(ino, i_rdev);
	return true;
}

/* The identity of the file behind fd (a library just opened). */
static __always_inline bool fd_file_id(int fd, struct lib_id *id)
{
	struct file *slot = fd_file(fd);
	if (!slot)
		return false;
	struct inode *ino = BPF_CORE_READ(slot, f_inode);
	if (!ino)
		return false;
	id->ino = BPF_CORE_READ(ino, i_ino);
	id->dev = BPF_CORE_READ(ino, i_sb, s_dev);
	id->pad = 0;
	return (BPF_CORE_READ(ino, i_mode) & S_IFMT) == 0100000; /* S_IFREG */
}

/* Kernel-internal dev_t: 12-bit major above a 20-bit minor. */
static __always_inline void set_kdev(struct event *e, dev_t rdev)
{
	e->dev_major = rdev >> 20;
	e->dev_minor = rdev & 0xfffff;
	e->has_dev = 1;
}

static __always_inline bool is_dev_mode(__u32 mode)
{
	__u32 t = mode & S_IFMT;
	return t == S_IFCHR || t == S_IFBLK;
}

/* Send without a wake-up unless the ring is filling or the event ends or
 * changes the trace: each wake-up is an IPI (a trap to the hypervisor in a
 * VM) and a reader wake-up, per event. */
static __always_inline __u64 wakeup_flags(bool urgent)
{
	if (urgent || bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* The current task's name, as bpf_get_current_comm gives it, by two loads
 * through the task's BTF pointer instead of that helper's call and
 * byte-wise copy: ~50 ns less per sent call at exit (bpfstats, --no-fold
 * W1, this VM). The kernel keeps comm NUL-padded (__set_task_comm); a
 * rename meanwhile can tear it, as it can the helper's copy. */
static __always_inline void current_comm(char *dst)
{
#ifdef CUDATRACE_OLD_KERNEL
	bpf_get_current_comm(dst, 16);
#else
	struct task_struct *task = bpf_get_current_task_btf();
	const __u64 *src = (const __u64 *)task->comm;
	__u64 w0 = src[0], w1 = src[1];
	__builtin_memcpy(dst, &w0, 8);
	__builtin_memcpy(dst + 8, &w1, 8);
#endif
}

/* Start an event for the current task, whose thread group the dispatcher
 * found traced, in its pending slot; discard() or the exit frees it. */
static __always_inline struct event *begin(__u16 sc, __u8 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct event *e = pending_slot(true);
	if (!e) {
		count_drop(DROP_PENDING);
		return NULL;
	}
	e->flags = 0;
	e->ret = 0;
	e->uptr = 0;
	e->path_uptr = 0;
	e->retry = 0;
	e->path_len = 0;
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->request = 0;
	e->fd = 0;
	e->mode = 0;
	e->dev_major = 0;
	e->dev_minor = 0;
	e->exit_code = 0;
	e->syscall = sc;
	e->kind = kind;
	e->has_dev = 0;
	e->arg_len = 0;
	e->argc = 0;
	e->matched = 0;
	e->no_entry = 0;
	e->held = 0;
	e->path[0] = 0;
	e->aux[0] = 0;
	/* Other kinds take comm once they are sure to be sent (finish): most
	 * repeats fold. An exec's is the name before it. */
	if (kind == KIND_EXEC)
		current_comm(e->comm);
	return e;
}

/* Give the slot back: the call is not one to record. */
static __always_inline void discard(struct event *e)
{
	e->kind = 0;
	e->no_entry = 0;
}

/* Entered, and not one to record: its exit must not take it for a call
 * whose entry was never seen (no_entry 2 is this mark). */
static __always_inline void skip(struct event *e, __u16 sc)
{
	e->kind = 0;
	e->syscall = sc;
	e->no_entry = 2;
}

/* Read the path at e->path_uptr into e; an unreadable one leaves it empty. */
static __always_inline bool load_path(struct event *e)
{
	long n = bpf_probe_read_user_str(e->path, sizeof(e->path), (const void *)e->path_uptr);
	e->path_len = n > 0 ? n : 0;
	if (n < 0) {
		e->path[0] = 0;
		return false;
	}
	return true;
}

/* struct event's retry. RETRY_PATH: a traced call's path, read again at
 * exit; RETRY_WATCH: host-wide, an untraced process's open whose path
 * could not be read at entry, begun so that its exit decides whether the
 * process is followed (watch_follows). */
enum { RETRY_PATH = 1, RETRY_WATCH = 2 };

/* Read the path argument. A tracepoint cannot fault pages in, so a string
 * in a cold page (a literal in a library's .rodata) fails here; the exit
 * handler reads it again once the kernel itself has touched it. */
static __always_inline bool read_path(struct event *e, unsigned long uptr)
{
	e->path_uptr = uptr;
	if (!load_path(e)) {
		e->retry = RETRY_PATH;
		return false;
	}
	return true;
}

#define HAS_PREFIX(buf, lit) has_prefix(buf, lit, sizeof(lit) - 1)

static __always_inline bool has_prefix(const char *buf, const char *lit, int n)
{
#pragma unroll
	for (int i = 0; i < n; i++)
		if (buf[i] != lit[i])
			return false;
	return true;
}

/* Nodes a driver repair or a permission check touches. */
static __always_inline bool is_node_path(const char *p)
{
	return HAS_PREFIX(p, "/dev/nvidia") || HAS_PREFIX(p, "/dev/char/");
}

#define AT(buf, off, lit) match_at(buf, off, lit, sizeof(lit) - 1)

/* Does lit appear at buf[off]? The index is masked so any offset is safe;
 * a NUL in buf simply fails to match. */
static __always_inline bool match_at(const char *buf, int off, const char *lit, int n)
{
#pragma unroll
	for (int i = 0; i < n; i++)
		if (buf[(off + i) & (PATH_LEN - 1)] != lit[i])
			return false;
	return true;
}

/* The scans below run as bpf_loop() callbacks: the verifier checks a
 * callback once, where it walks a bounded loop iteration by iteration (in
 * every program that inlines it, which made loading take most of a second).
 * The index is masked, so any i is a safe offset. Before 5.17 there is no
 * bpf_loop: user space clears use_bpf_loop and the same steps run as
 * bounded loops (slower to verify, the same result); the branch not taken
 * is pruned unverified. */
const volatile bool use_bpf_loop = true;

struct scan {
	const char *p;
	bool found;
	int end; /* lib_step: the index of the path's NUL */
};

static __always_inline bool is_nvidia_lib_name(const char *p, int at)
{
	return AT(p, at, "libcuda.so") || AT(p, at, "libnvidia-ml.so");
}

/* Walks back from the end of the path to its last '/': only the file's
 * own name is looked at, a few steps where a scan from the start took one
 * per byte of every open's path. */
static long lib_step(__u32 i, struct scan *s)
{
	int at = s->end - 1 - (int)i;
	if (at < 0) {
		s->found = is_nvidia_lib_name(s->p, 0); /* a relative name */
		return 1;
	}
	if (s->p[at & (PATH_LEN - 1)] != '/')
		return 0;
	s->found = is_nvidia_lib_name(s->p, at + 1);
	return 1;
}

/* Is the file's name libcuda.so* or libnvidia-ml.so*? path_len counts the
 * path's NUL (load_path). */
static __always_inline bool names_nvidia_lib(const struct event *e, bool scan)
{
	struct scan s = {.p = e->path, .end = e->path_len - 1};
	/* One call site whether or not it scans: a branch around it doubled
	 * the verifier's walk of everything after. */
	__u32 steps = scan && e->path_len >= 2 ? PATH_LEN : 0;
#ifndef CUDATRACE_OLD_KERNEL
	if (use_bpf_loop) {
		bpf_loop(steps, lib_step, &s, 0);
	} else
#endif
	{
		for (__u32 i = 0; i < steps && i < PATH_LEN; i++)
			if (lib_step(i, &s))
				break;
	}
	return s.found;
}

/* Does the path mention nvidia-modprobe (stat/access before running it)? */
static long modprobe_step(__u32 i, struct scan *s)
{
	const char *p = s->p;
	char c = p[i & (PATH_LEN - 1)];
	if (c == 0)
		return 1;
	if (c == 'n' && AT(p, i, "nvidia-modprobe")) {
		s->found = true;
		return 1;
	}
	return 0;
}

static __always_inline bool mentions_modprobe(const char *p)
{
	struct scan s = {.p = p};
#ifndef CUDATRACE_OLD_KERNEL
	if (use_bpf_loop) {
		bpf_loop(PATH_LEN - 16, modprobe_step, &s, 0);
	} else
#endif
	{
		for (__u32 i = 0; i < PATH_LEN - 16; i++)
			if (modprobe_step(i, &s))
				break;
	}
	return s.found;
}

/* Files of NVIDIA's own: its nodes, the driver's /proc and /sys files. An
 * open of one makes a host-wide trace follow the process (watch_follows). */
static __always_inline bool is_nvidia_file(const char *p)
{
	return HAS_PREFIX(p, "/dev/nvidia") || HAS_PREFIX(p, "/proc/driver/nvidia") ||
	       HAS_PREFIX(p, "/sys/module/nvidia");
}

/* Paths worth recording on open whatever they turn out to be (with the
 * CUDA/NVML libraries, names_nvidia_lib). */
static __always_inline bool is_interesting_open(const char *p)
{
	return is_nvidia_file(p) || HAS_PREFIX(p, "/dev/char/") || HAS_PREFIX(p, "/proc/devices");
}

/* ---- opens ---- */

/* Every open is kept until it returns: even an uninteresting path may
 * turn out to be an NVIDIA node (a symlink, a bind mount, /dev/char/M:m).
 * Its path is read at exit, after the kernel has faulted it in. */
static __always_inline int open_enter(__u16 sc, unsigned long path, __u64 flags, __u32 mode)
{
	struct event *e = begin(sc, KIND_OPEN);
	if (!e)
		return 0;
	e->path_uptr = path;
	e->flags = flags;
	e->mode = mode;
	return 0;
}

struct open_how_min {
	__u64 flags;
	__u64 mode;
	__u64 resolve;
};

/* ---- ioctl ---- */

static __always_inline int ioctl_enter(int fd, __u32 request, unsigned long uptr)
{
	umode_t mode = 0;
	dev_t rdev = 0;
	if (fd >= 0) {
		/* Decided from the inode, so inherited and dup'd fds count too. */
		if (!fd_inode(fd, &mode, &rdev) || (mode & S_IFMT) != S_IFCHR ||
		    (!is_nvidia_major(rdev >> 20) && !bpf_map_lookup_elem(&path_devs, &rdev))) {
			/* The only traced call that begins nothing: a slot left
			 * by a call whose exit was missed must not pair with
			 * this exit. */
			struct event *slot = pending_slot(true);
			if (slot)
				skip(slot, SC_IOCTL);
			return 0;
		}
	}
	struct event *e = begin(SC_IOCTL, KIND_IOCTL);
	if (!e)
		return 0;
	e->fd = fd;
	e->request = request;
	e->uptr = uptr;
	e->has_status = 0;
	if (fd >= 0)
		set_kdev(e, rdev);
	e->matched = 1;
	return 0;
}

/* ---- path calls recorded only for device nodes ---- */

/* stat and access also count when they look for nvidia-modprobe. */
static __always_inline bool node_kind_matches(__u8 kind, const char *p)
{
	return is_node_path(p) ||
	       ((kind == KIND_STAT || kind == KIND_ACCESS) && mentions_modprobe(p));
}

static __always_inline bool is_node_kind(__u8 kind)
{
	return kind == KIND_STAT || kind == KIND_ACCESS || kind == KIND_MKNOD ||
	       kind == KIND_UNLINK || kind == KIND_SYMLINK || kind == KIND_MKDIR;
}

/* One entry for every node call: the switch only picks the arguments, so
 * the verifier walks the recording code once, not once per syscall. path
 * is the node; x and y are the call's other arguments (see the switch). An
 * unreadable path is decided at exit. */
static __always_inline int node_enter(__u16 sc, unsigned long *a)
{
	__u8 kind;
	unsigned long path, x = 0, y = 0;
	switch (sc) {
	case SC_MKNODAT:	kind = KIND_MKNOD; path = a[1]; x = a[2]; y = a[3]; break;
	case SC_MKNOD:		kind = KIND_MKNOD; path = a[0]; x = a[1]; y = a[2]; break;
	case SC_UNLINKAT:	kind = KIND_UNLINK; path = a[1]; x = a[2]; break;
	case SC_UNLINK:		kind = KIND_UNLINK; path = a[0]; break;
	case SC_SYMLINKAT:	kind = KIND_SYMLINK; path = a[2]; x = a[0]; break;
	case SC_SYMLINK:	kind = KIND_SYMLINK; path = a[1]; x = a[0]; break;
	case SC_MKDIRAT:	kind = KIND_MKDIR; path = a[1]; x = a[2]; break;
	case SC_MKDIR:		kind = KIND_MKDIR; path = a[0]; x = a[1]; break;
	case SC_NEWFSTATAT:	kind = KIND_STAT; path = a[1]; x = a[2]; y = a[3]; break;
	case SC_STAT:
	case SC_LSTAT:		kind = KIND_STAT; path = a[0]; x = a[1]; break;
	case SC_STATX:		kind = KIND_STAT; path = a[1]; x = a[4]; y = a[2]; break;
	case SC_FACCESSAT:
	case SC_FACCESSAT2:	kind = KIND_ACCESS; path = a[1]; x = a[2]; break;
	case SC_ACCESS:		kind = KIND_ACCESS; path = a[0]; x = a[1]; break;
	default:
		return 0;
	}
	struct event *e = begin(sc, kind);
	if (!e)
		return 0;
	if (read_path(e, path)) {
		if (!node_kind_matches(kind, e->path)) {
			skip(e, sc);
			return 0;
		}
		e->matched = 1;
	}
	switch (kind) {
	case KIND_MKNOD:
		e->mode = x;
		if (is_dev_mode(x)) {
			/* The syscall's dev argument is in new_encode_dev format. */
			e->dev_major = (y & 0xfff00) >> 8;
			e->dev_minor = (y & 0xff) | ((y >> 12) & 0xfff00);
			e->has_dev = 1;
		}
		break;
	case KIND_SYMLINK: /* x: the link's target */
		if (bpf_probe_read_user_str(e->aux, sizeof(e->aux), (const void *)x) < 0)
			e->aux[0] = 0;
		break;
	case KIND_MKDIR:
		e->mode = x;
		break;
	case KIND_STAT: /* x: the stat buffer, read at exit; y: AT_* flags */
		e->uptr = x;
		e->flags = y;
		break;
	default: /* unlink: AT_* flags; access: the mode asked for */
		e->flags = x;
	}
	return 0;
}

/* ---- always recorded for traced processes ---- */

static __always_inline int memfd_enter(unsigned long name, __u64 flags)
{
	struct event *e = begin(SC_MEMFD_CREATE, KIND_MEMFD);
	if (!e)
		return 0;
	read_path(e, name);
	e->flags = flags;
	e->matched = 1;
	return 0;
}

static __always_inline int exec_enter(__u16 sc, unsigned long path, unsigned long argv, __u64 flags)
{
	struct event *e = begin(sc, KIND_EXEC);
	if (!e)
		return 0;
	read_path(e, path);
	e->flags = flags;
	e->matched = 1;
	/* argv lives in the old image: read it now, not at exit. */
#pragma unroll
	for (int i = 0; i < ARGV_MAX; i++) {
		const char *arg = NULL;
		if (bpf_probe_read_user(&arg, sizeof(arg), (const void *)(argv + i * sizeof(arg))) || !arg)
			break;
		if (bpf_probe_read_user_str(&e->aux[i * ARGV_SLOT], ARGV_SLOT, arg) < 0)
			break;
		e->argc = i + 1;
	}
	return 0;
}

/* ---- syscall dispatch ---- */

static __always_inline bool is_arm64(void)
{
	return bpf_core_field_exists(struct pt_regs___arm64, syscallno);
}

/* The syscall number at exit, which passes only the return value. */
static __always_inline long syscall_nr(struct pt_regs *regs)
{
	if (is_arm64())
		return ((struct pt_regs___arm64 *)regs)->syscallno;
	return ((struct pt_regs___x86 *)regs)->orig_ax;
}

/* Traced syscall number → enum syscall_id, or SC_NONE. The only work an
 * untraced syscall costs, with the filter lookup after it. */
static __always_inline __u8 traced_syscall(long nr)
{
	if ((unsigned long)nr >= NR_TABLE)
		return SC_NONE;
	return nr_to_sc[nr];
}

/* A 32-bit task's syscall numbers are another table; the per-syscall
 * tracepoints ignore such calls, and so does this. */
static __always_inline bool in_compat_syscall(void)
{
#ifdef CUDATRACE_OLD_KERNEL
	if (is_arm64()) {
		struct task_struct___arm64 *t = (void *)bpf_get_current_task();
		return (BPF_CORE_READ(t, thread_info.flags) >> ARM64_TIF_32BIT) & 1;
	}
	struct task_struct___x86 *t = (void *)bpf_get_current_task();
	return BPF_CORE_READ(t, thread_info.status) & X86_TS_COMPAT;
#else
	if (is_arm64()) {
		struct task_struct___arm64 *t = (void *)bpf_get_current_task_btf();
		return (t->thread_info.flags >> ARM64_TIF_32BIT) & 1;
	}
	struct task_struct___x86 *t = (void *)bpf_get_current_task_btf();
	return t->thread_info.status & X86_TS_COMPAT;
#endif
}

/* struct event's no_entry. ROLLED_BACK: a seccomp KILL_PROCESS,
 * KILL_THREAD or TRAP rolled the call back (syscall_rollback) before
 * sending SIGSYS; it never returns to the program, and its "return value"
 * is the register restored. */
enum no_entry_mark {
	NO_ENTRY_SEEN = 0,
	NO_ENTRY_REFUSED = 1,    /* answered by a filter (RET_ERRNO, USER_NOTIF) */
	NO_ENTRY_SKIPPED = 2,    /* entered, not one to record (skip()) */
	NO_ENTRY_ROLLED_BACK = 3,
	NO_ENTRY_THREAD_KILLED = 4, /* its thread ended inside it (KILL_THREAD) */
};
const enum no_entry_mark *unused_no_entry_mark __attribute__((unused));

/* Whether an unentered call's exit value is the rollback's: x86 restores
 * ax from orig_ax (the syscall number), arm64 x0 from orig_x0 (the first
 * argument). A real result equal to it is a fd or ioctl value that a
 * filtered call of a traced process did not produce: its entry would
 * have been seen. */
static __always_inline bool rolled_back(struct pt_regs *regs, long ret)
{
	if (is_arm64())
		return ret == (long)((struct pt_regs___arm64 *)regs)->orig_x0;
	return ret == syscall_nr(regs);
}

struct sys_args {
	unsigned long a[6];
};

static __always_inline void read_args(struct pt_regs *regs, struct sys_args *args)
{
	if (is_arm64()) {
		struct pt_regs___arm64 *r = (void *)regs;
		/* x0 holds the return value once the call is done; orig_x0
		 * keeps the first argument for the no-entry path at exit. */
		args->a[0] = r->orig_x0;
		args->a[1] = r->regs[1];
		args->a[2] = r->regs[2];
		args->a[3] = r->regs[3];
		args->a[4] = r->regs[4];
		args->a[5] = r->regs[5];
	} else {
		struct pt_regs___x86 *r = (void *)regs;
		args->a[0] = r->di;
		args->a[1] = r->si;
		args->a[2] = r->dx;
		args->a[3] = r->r10;
		args->a[4] = r->r8;
		args->a[5] = r->r9;
	}
}

/* Begin recording a traced call of a traced process from its arguments.
 * A global function: the verifier checks it once per program, for any
 * arguments (sys_exit's no-entry path inlined it into a second copy). */
static __always_inline int enter_sc(__u8 sc, struct sys_args *args)
{
	unsigned long *a = args->a;
	unsigned long path;
	__u64 flags;
	__u32 mode;
	switch (sc) {
	case SC_IOCTL:
		return ioctl_enter((int)a[0], (__u32)a[1], a[2]);
	case SC_MEMFD_CREATE:
		return memfd_enter(a[0], a[1]);
	case SC_EXECVE:
		return exec_enter(SC_EXECVE, a[0], a[1], 0);
	case SC_EXECVEAT:
		return exec_enter(SC_EXECVEAT, a[1], a[2], a[4]);
	case SC_OPENAT:
		path = a[1]; flags = a[2]; mode = a[3];
		break;
	case SC_OPENAT2: {
		struct open_how_min how = {};
		bpf_probe_read_user(&how, sizeof(how), (const void *)a[2]);
		path = a[1]; flags = how.flags; mode = how.mode;
		break;
	}
	case SC_OPEN:
		path = a[0]; flags = a[1]; mode = a[2];
		break;
	case SC_CREAT:
		path = a[0]; flags = CREAT_FLAGS; mode = a[1];
		break;
	default:
		return node_enter(sc, a);
	}
	return open_enter(sc, path, flags, mode);
}

GLOBAL_FN int enter_args(__u8 sc, struct sys_args *args)
{
	if (!args)
		return 0;
	return enter_sc(sc, args);
}

/* Begin recording a traced call from its registers. With sc a constant
 * (the fentry hook's), inline: the verifier sees that call's case alone. */
static __always_inline int enter_regs(__u8 sc, struct pt_regs *regs, bool constant_sc)
{
	struct sys_args args;
	read_args(regs, &args);
	if (constant_sc)
		return enter_sc(sc, &args);
	return enter_args(sc, &args);
}

static __always_inline int enter(__u8 sc, struct pt_regs *regs)
{
	return enter_regs(sc, regs, false);
}

/* Follow process tgid from now on (host-wide); false when the map is full
 * (counted). */
static __always_inline bool follow(__u32 tgid)
{
	__u8 one = 1;
	if (bpf_map_update_elem(&traced, &tgid, &one, BPF_ANY)) {
		count_drop(DROP_CHILD);
		return false;
	}
	return true;
}

/* watch_follows' answers. WATCH_AT_EXIT: the path could not be read (a
 * string in a page the process has not touched yet: a program at a
 * syscall's entry cannot fault it in), so the open is begun and its exit,
 * after the kernel read the path, decides (finish_open). */
enum { WATCH_NO = 0, WATCH_FOLLOW = 1, WATCH_AT_EXIT = 2 };

/* Host-wide: does this open by an untraced process name something of
 * NVIDIA's (a /dev/nvidia* node, the driver's /proc or /sys files, the CUDA
 * or NVML library)? Then the process is followed from this call on. */
static __always_inline int watch_follows(__u8 sc, struct pt_regs *regs, __u32 tgid)
{
	if (sc != SC_OPENAT && sc != SC_OPENAT2 && sc != SC_OPEN)
		return WATCH_NO;
	if (tgid == self_tgid || in_compat_syscall())
		return WATCH_NO;
	struct sys_args args;
	read_args(regs, &args);
	__u32 zero = 0;
	struct event *e = bpf_map_lookup_elem(&watch_scratch, &zero);
	if (!e)
		return WATCH_NO;
	e->path_uptr = sc == SC_OPEN ? args.a[0] : args.a[1];
	if (!load_path(e))
		return e->path_uptr ? WATCH_AT_EXIT : WATCH_NO;
	if (!is_nvidia_file(e->path) && !names_nvidia_lib(e, true))
		return WATCH_NO;
	return follow(tgid) ? WATCH_FOLLOW : WATCH_NO;
}

/* The entry of traced syscall sc, whichever hook saw it. */
static __always_inline int sys_enter(__u8 sc, struct pt_regs *regs, bool constant_sc)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	int watch = WATCH_NO;
	if (!is_traced(tgid)) {
		if (!host_wide)
			return 0;
		watch = watch_follows(sc, regs, tgid);
		if (watch == WATCH_NO)
			return 0;
	}
	if (in_compat_syscall())
		return 0;
	enter_regs(sc, regs, constant_sc);
	if (watch == WATCH_AT_EXIT) {
		struct event *e = pending_slot(false);
		if (e && e->kind == KIND_OPEN)
			e->retry = RETRY_WATCH;
	}
	return 0;
}

#ifndef CUDATRACE_FENTRY
/* Every syscall's entry: (struct pt_regs *regs, long id). */
SEC("tp_btf/sys_enter")
int ct_sys_enter(__u64 *ctx)
{
	__u8 sc = traced_syscall((long)ctx[1]);
	if (sc == SC_NONE || sc >= SC_MMAP) /* exit-only calls: nothing at entry */
		return 0;
	return sys_enter(sc, (struct pt_regs *)ctx[0], false);
}

#endif

/* ---- the one exit path ---- */

/* glibc's dev_t, as the kernel writes st_rdev into struct stat. */
static __always_inline void set_udev(struct event *e, __u64 dev)
{
	e->dev_major = ((dev >> 8) & 0xfff) | ((dev >> 32) & ~0xfffULL);
	e->dev_minor = (dev & 0xff) | ((dev >> 12) & ~0xffULL);
	e->has_dev = 1;
}

/* Count one more call of a site; true once it is past the first `after`
 * (the atomic add hands out each position once, so exactly `after` calls
 * of a site are sent however many CPUs race). */
static __always_inline bool past_first(void *sites, void *key, __u32 after)
{
	__u64 *n = bpf_map_lookup_elem(sites, key);
	if (!n) {
		__u64 one = 1;
		if (!bpf_map_update_elem(sites, key, &one, BPF_NOEXIST))
			return false; /* the first of its site */
		n = bpf_map_lookup_elem(sites, key);
		if (!n)
			return false; /* map full: sent, and counted by user space */
	}
#ifdef CUDATRACE_OLD_KERNEL
	/* No atomic fetch before 5.12 (BPF_STX with BPF_FETCH: "uses reserved
	 * fields"), only a plain atomic add: read, then add. Two calls of one
	 * site that race at the threshold on two CPUs may both be sent, one
	 * more than `after`; none is ever lost. */
	__u64 seen = *n;
	__sync_fetch_and_add(n, 1);
	return seen >= after;
#else
	return __sync_fetch_and_add(n, 1) >= after;
#endif
}

/* Read a successful ioctl's in-band result into e, if its request has one;
 * true when it shows a failure (or cannot show success). Every call of a
 * listed request is read, sent or folded: the word may lie past ARG_LEN. */
static __always_inline bool inband_failed(struct event *e)
{
	/* The key is copied to the stack: in a global function e is plain
	 * memory to the verifier, which before 6.x (6.1 refuses it: "R2
	 * type=mem expected=fp, ...") takes no such pointer as a map key. */
	__u32 request = e->request;
	struct inband_word *w = bpf_map_lookup_elem(&inband_status, &request);
	if (!w)
		return false;
	if (e->uptr >= 4096 &&
	    !bpf_probe_read_user(&e->status, sizeof(e->status), (const void *)(e->uptr + w->off))) {
		e->status_off = w->off;
		e->has_status = 1;
		if (e->status)
			return true;
	}
	return w->keep_all;
}

/* The path into a fold key, NUL-padded: eight word copies masked at its
 * length (path_len, with its NUL, is at most FOLD_PATH_LEN here), where a
 * kernel string copy went byte by byte through a helper. */
static __always_inline void fold_path(char *dst, const struct event *e)
{
	int len = e->path_len;
#pragma unroll
	for (int i = 0; i < FOLD_PATH_LEN / 8; i++) {
		__u64 w;
		int rem = len - i * 8;
		__builtin_memcpy(&w, &e->path[i * 8], 8);
		if (rem <= 0)
			w = 0;
		else if (rem < 8)
			w &= (1ULL << (rem * 8)) - 1; /* little-endian: the first rem bytes */
		__builtin_memcpy(dst + i * 8, &w, 8);
	}
}

/* Whether a completed call is a repeat to count rather than send. Failures
 * are the evidence: always sent, the driver's in-band ones too. */
static __always_inline bool fold(struct event *e, __u8 kind, long ret, bool held)
{
	if ((ret < 0 && ret > -4096) || kind == KIND_EXEC || held)
		return false;
	if (kind == KIND_IOCTL) {
		if (inband_failed(e))
			return false;
		if (!fold_ioctls_after || !e->has_dev)
			return false;
		struct ioctl_site k = {
			.tgid = e->tgid,
			.major = e->dev_major,
			.minor = e->dev_minor,
			.request = e->request,
		};
		return past_first(&ioctl_sites, &k, fold_ioctls_after);
	}
	if (!fold_calls_after || e->path_len > FOLD_PATH_LEN)
		return false;
	struct call_site k;
	__builtin_memset(&k, 0, sizeof(k));
	k.tgid = e->tgid;
	k.kind = kind;
	fold_path(k.path, e);
	return past_first(&call_sites, &k, fold_calls_after);
}

/* Whether fd is one of awaited_libs. A global function: its result is
 * unknown to the verifier either way, so the paths after it merge. */
GLOBAL_FN int is_awaited_lib(int fd)
{
	struct lib_id id;
	return fd_file_id(fd, &id) && bpf_map_lookup_elem(&awaited_libs, &id);
}

/* An open's completion: its path read and matched, its node looked up,
 * its hold decided. OPEN_DISCARD: not one to record (discarded);
 * OPEN_HELD: its process is to be held. A global function: verified once,
 * not once per path into it. */
enum { OPEN_DISCARD = -1, OPEN_KEEP = 0, OPEN_HELD = 1 };

GLOBAL_FN int finish_open(struct event *e, long ret)
{
	if (!e)
		return OPEN_DISCARD;
	umode_t imode = 0;
	dev_t rdev = 0;
	bool have_inode = false;
	int verdict = OPEN_KEEP;

	load_path(e);
	/* The file-name scan runs once, for the filter and the hold,
	 * and not for the node and /proc paths the prefixes settle
	 * (no library lives there). */
	bool known = is_interesting_open(e->path);
	bool lib = names_nvidia_lib(e, !known);
	if (ret >= 0)
		have_inode = fd_inode((int)ret, &imode, &rdev) && is_dev_mode(imode);
	if (!known && !lib && hold_unprobed_libs && awaiting_libs && ret >= 0 && !have_inode)
		lib = is_awaited_lib((int)ret); /* the library, under another name */
	e->matched = known || lib;
	bool nvidia_node = have_inode && (imode & S_IFMT) == S_IFCHR && is_nvidia_major(rdev >> 20);
	if (e->retry == RETRY_WATCH) {
		/* An untraced process's open whose path was unreadable at entry
		 * (watch_follows): now the kernel has read it, follow the
		 * process if it named (or opened) something of NVIDIA's. */
		e->retry = 0;
		if (!(is_nvidia_file(e->path) || lib || nvidia_node) || !follow(e->tgid)) {
			discard(e);
			return OPEN_DISCARD;
		}
	}
	/* An unknown path counts only if it opened an NVIDIA node. */
	if (!e->matched && !nvidia_node) {
		discard(e);
		return OPEN_DISCARD;
	}
	if (have_inode)
		set_kdev(e, rdev);
	if (have_inode && (imode & S_IFMT) == S_IFCHR && HAS_PREFIX(e->path, "/dev/nvidia") &&
	    !is_nvidia_major(rdev >> 20)) {
		__u8 one = 1;
		bpf_map_update_elem(&path_devs, &rdev, &one, BPF_ANY);
	}
	if ((hold_unprobed_libs || host_wide) && ret >= 0 && !have_inode && lib) {
		struct lib_id id;
		if (fd_file_id((int)ret, &id) && !bpf_map_lookup_elem(&probed_libs, &id)) {
			e->held = hold_unprobed_libs ? 1 : 2;
			verdict = OPEN_HELD;
			e->request = id.dev;
			e->uptr = id.ino;
		}
	}
	return verdict;
}

/* Complete the call in its slot, send it as far as its kind needs (unless
 * it folds), and free the slot. Global, as finish_open. */
GLOBAL_FN int finish(struct event *e, long ret)
{
	if (!e)
		return 0;
	bool held = false;
	/* Read once, not reloaded after every helper that writes e. */
	const __u8 kind = e->kind;
	/* Rolled back for SIGSYS: the value is no result. Nothing of the call
	 * is read back, no fd looked up, and it never folds (as a failure). */
	const bool no_return = e->no_entry == NO_ENTRY_ROLLED_BACK;
	if (no_return)
		ret = -1;

	e->ret = no_return ? 0 : ret;
	/* A non-leader thread that execs returns with the leader's pid. */
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->cgroup_id = bpf_get_current_cgroup_id();

	if (kind == KIND_OPEN) {
		int v = finish_open(e, ret);
		if (v == OPEN_DISCARD)
			return 0;
		held = v == OPEN_HELD;
	}
	/* Folded repeats are counted before anything else is read for them. */
	if (fold(e, kind, ret, held)) {
		discard(e);
		return 0;
	}
	if (kind == KIND_IOCTL) {
		e->arg_len = 0;
		if (capture_ioctl_args && e->uptr >= 4096 && !no_return) {
			/* The params block after the call: its status field says why. */
			if (!bpf_probe_read_user(e->arg, ARG_LEN, (const void *)e->uptr))
				e->arg_len = ARG_LEN;
			else if (!bpf_probe_read_user(e->arg, 16, (const void *)e->uptr))
				e->arg_len = 16;
		}
	} else if (kind == KIND_STAT && ret == 0 && e->uptr) {
		if (e->syscall == SC_STATX) {
			__u16 m = 0;
			__u32 maj = 0, min = 0;
			bpf_probe_read_user(&m, sizeof(m), (const void *)(e->uptr + STX_MODE_OFF));
			bpf_probe_read_user(&maj, sizeof(maj), (const void *)(e->uptr + STX_RDEV_MAJOR_OFF));
			bpf_probe_read_user(&min, sizeof(min), (const void *)(e->uptr + STX_RDEV_MINOR_OFF));
			e->mode = m;
			if (is_dev_mode(m)) {
				e->dev_major = maj;
				e->dev_minor = min;
				e->has_dev = 1;
			}
		} else {
			__u32 m = 0;
			__u64 dev = 0;
			bpf_probe_read_user(&m, sizeof(m), (const void *)(e->uptr + stat_mode_off));
			bpf_probe_read_user(&dev, sizeof(dev), (const void *)(e->uptr + stat_rdev_off));
			e->mode = m;
			if (is_dev_mode(m))
				set_udev(e, dev);
		}
	}
	if (kind != KIND_EXEC)
		current_comm(e->comm);
	/* Stamped when it returns, as ptrace stamps its calls; a folded
	 * repeat needs no clock read. */
	e->ktime = bpf_ktime_get_ns();
	__u32 size = sizeof(*e);
	if (kind == KIND_IOCTL) {
		size = EVENT_PATH_OFF;
	} else if (kind != KIND_EXEC && kind != KIND_SYMLINK) {
		__u32 n = e->path_len;
		if (n > PATH_LEN)
			n = PATH_LEN;
		size = EVENT_PATH_OFF + n;
	}
	if (bpf_ringbuf_output(&events, e, size, wakeup_flags(kind == KIND_EXEC || held))) {
		count_drop(DROP_RINGBUF);
	} else if (held && hold_unprobed_libs) {
		/* Stops the process on its way back to user space, before it
		 * can map the library; user space continues it once the probes
		 * are on. Only sent when the event that asks for SIGCONT is. */
		bpf_send_signal_thread(SIGSTOP);
	}
	discard(e);
	return 0;
}

/* The return of a call begun in e (its slot, not empty, its syscall this
 * one's), whichever hook saw it. */
static __always_inline int exit_matched(struct event *e, long ret)
{
	if (e->retry && is_node_kind(e->kind)) {
		/* The path was unreadable at enter: read it now and apply the
		 * filter the enter handler could not. */
		e->retry = 0;
		load_path(e);
		if (!node_kind_matches(e->kind, e->path)) {
			discard(e);
			return 0;
		}
		e->matched = 1;
	}
	return finish(e, ret);
}

#ifndef CUDATRACE_FENTRY
/* The exit of an exit-only call (sc >= SC_MMAP): sent when a limit failed
 * it in a traced process. The errno is tested first, so a call that
 * succeeds costs the table lookup alone; repeats of one (process, call,
 * errno) fold as other calls do, so a retry loop cannot flood the ring. */
static __always_inline int limit_exit(__u8 sc, long ret)
{
	if (ret != -LIMIT_EMFILE && ret != -LIMIT_ENFILE && ret != -LIMIT_ENOMEM)
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_traced(tgid) || in_compat_syscall())
		return 0;
	if (fold_calls_after) {
		struct call_site k;
		__builtin_memset(&k, 0, sizeof(k));
		k.tgid = tgid;
		k.kind = KIND_LIMIT;
		k.path[0] = sc; /* the site: the call and its errno */
		k.path[1] = -ret;
		if (past_first(&call_sites, &k, fold_calls_after))
			return 0;
	}
	struct event *e = bpf_ringbuf_reserve(&events, EVENT_HEADER_SIZE, 0);
	if (!e) {
		count_drop(DROP_RINGBUF);
		return 0;
	}
	__builtin_memset(e, 0, EVENT_HEADER_SIZE);
	e->ktime = bpf_ktime_get_ns();
	e->ret = ret;
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->tgid = tgid;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->syscall = sc;
	e->kind = KIND_LIMIT;
	e->matched = 1;
	current_comm(e->comm);
	bpf_ringbuf_submit(e, wakeup_flags(false));
	return 0;
}

/* Whether a seccomp filter can answer the current task's calls: only then
 * can a call's exit come with no entry seen and not have begun before the
 * attach. The mode is set for every thread before its filter applies
 * (TSYNC too), and a filter is never removed. */
static __always_inline bool seccomp_filtered(void)
{
#ifdef CUDATRACE_OLD_KERNEL
	struct task_struct *cur = (void *)bpf_get_current_task();
	if (!bpf_core_field_exists(cur->seccomp))
		return false;
	return BPF_CORE_READ(cur, seccomp.mode) != 0;
#else
	struct task_struct *task = bpf_get_current_task_btf();
	if (!bpf_core_field_exists(task->seccomp))
		return false;
	/* A KILL action sets SECCOMP_MODE_DEAD (5.17+) before the rolled-back
	 * call's exit: any mode but "none" means seccomp was at work. */
	return task->seccomp.mode != 0;
#endif
}

/* The return of a call begun in e (its slot, not empty). */
static __always_inline int exit_entered(struct event *e, __u8 sc, long ret)
{
	if (e->syscall != sc) {
		/* Left by a call whose exit was not seen; not this one. */
		discard(e);
		return 0;
	}
	return exit_matched(e, ret);
}

/* Every syscall's return: (struct pt_regs *regs, long ret). Untraced
 * threads have no slot or an empty one. */
SEC("tp_btf/sys_exit")
int ct_sys_exit(__u64 *ctx)
{
	__u8 sc = traced_syscall(syscall_nr((struct pt_regs *)ctx[0]));
	if (sc == SC_NONE)
		return 0;
	if (sc >= SC_MMAP)
		return limit_exit(sc, (long)ctx[1]);
	/* A 32-bit call's number means another syscall (enter skips them). */
	if (in_compat_syscall())
		return 0;
	long ret = (long)ctx[1];
	struct event *e = pending_slot(false);
	if (e && e->kind == 0 && e->no_entry == 2 && e->syscall == sc) {
		e->no_entry = 0; /* entered and skipped */
		return 0;
	}
	if (!e || e->kind == 0) {
		/* A failed call whose entry no program saw: a seccomp filter
		 * answered it (RET_ERRNO, USER_NOTIF) before the kernel ran it,
		 * or rolled it back for SIGSYS (KILL, TRAP: rolled_back). Its
		 * arguments are still in the registers. Without a filter it is
		 * one that began before its process joined `traced` (an
		 * attach): not seen, not recorded. */
		if ((ret >= 0 || ret < -4095) && !rolled_back((struct pt_regs *)ctx[0], ret))
			return 0;
		if (!is_traced(bpf_get_current_pid_tgid() >> 32) || !seccomp_filtered())
			return 0;
		bpf_tail_call(ctx, &exit_tail, tail_unentered_key);
		count_drop(DROP_PENDING); /* not reached: user space fills the slots first */
		return 0;
	}
	return exit_entered(e, sc, ret);
}

/* The exit of a failed call of a traced process whose entry no program
 * saw (tail-called by ct_sys_exit, never attached): begin it from the
 * registers, then let ct_sys_exit finish it. */
SEC("tp_btf/sys_exit")
int ct_sys_exit_unentered(__u64 *ctx)
{
	__u8 sc = traced_syscall(syscall_nr((struct pt_regs *)ctx[0]));
	if (sc == SC_NONE)
		return 0;
	enter(sc, (struct pt_regs *)ctx[0]);
	struct event *e = pending_slot(false);
	if (!e)
		return 0;
	if (e->kind == 0) {
		e->no_entry = 0; /* not one to record; no later exit's business */
		return 0;
	}
	e->no_entry = rolled_back((struct pt_regs *)ctx[0], (long)ctx[1]) ? NO_ENTRY_ROLLED_BACK : 1;
	bpf_tail_call(ctx, &exit_tail, tail_exit_key);
	discard(e); /* not reached: user space fills the slots first */
	count_drop(DROP_PENDING);
	return 0;
}

#endif

#ifdef CUDATRACE_FENTRY
/* ---- the fentry/fexit hook (chosen at run time: tracer/ebpf/hook.go) ----
 *
 * One program pair per traced syscall, on its own kernel function, so an
 * untraced syscall runs no program at all and the sc constant prunes every
 * other case. User space points each at this arch's function
 * (__x64_sys_NAME, __arm64_sys_NAME) and loads only the pairs whose
 * syscall the arch has. */

/* A syscall's fexit: the checks that need its number (read from the
 * registers: one program serves every syscall), then the shared exit by
 * tail call, or (direct: where the function's prototype is not the one
 * ct_fexit_common was loaded for, which the kernel's tail call requires)
 * inline. A 32-bit call runs __ia32_sys_*, never these. */
static __always_inline int fexit_sys(__u64 *ctx, bool direct)
{
	__u8 sc = traced_syscall(syscall_nr((struct pt_regs *)ctx[0]));
	if (sc == SC_NONE)
		return 0;
	struct event *e = bpf_task_storage_get(&pending, bpf_get_current_task_btf(), 0, 0);
	if (!e)
		return 0;
	if (e->kind == 0) {
		/* Entered and skipped, or not entered (before the attach). */
		if (e->no_entry == NO_ENTRY_SKIPPED && e->syscall == sc)
			e->no_entry = NO_ENTRY_SEEN;
		return 0;
	}
	if (e->syscall != sc) {
		/* Left by a call whose exit was not seen; not this one. */
		discard(e);
		return 0;
	}
	if (direct)
		return exit_matched(e, (long)ctx[1]);
	bpf_tail_call(ctx, &fexit_tail, fexit_tail_key);
	discard(e); /* not reached: user space fills the slot first */
	count_drop(DROP_PENDING);
	return 0;
}

/* Every traced syscall's fexit, one of the two: user space loads a copy on
 * each function (tracer/ebpf/hook.go), so the object holds one, not one
 * per syscall (each copy of the direct one carried finish). */
SEC("fexit/syscall")
int ct_fexit_sys(__u64 *ctx) { return fexit_sys(ctx, false); }

SEC("fexit/syscall")
int ct_fexit_sys_direct(__u64 *ctx) { return fexit_sys(ctx, true); }

/* The shared exit of every syscall's fexit (tail-called, never attached;
 * loaded as fexit of one syscall function, all of which take the same
 * arguments): the slot holds this call. */
SEC("fexit/syscall")
int ct_fexit_common(__u64 *ctx)
{
	struct event *e = bpf_task_storage_get(&pending, bpf_get_current_task_btf(), 0, 0);
	if (!e || e->kind == 0)
		return 0;
	return exit_matched(e, (long)ctx[1]);
}

/* (const struct pt_regs *regs): the user's registers, as the tracepoints
 * pass them. One entry per syscall, its number a constant: the verifier
 * sees that call's case alone. */
#define SYSCALL_HOOK(name, sc)                                                  \
	SEC("fentry/syscall")                                                   \
	int ct_fentry_##name(__u64 *ctx)                                        \
	{                                                                       \
		return sys_enter(sc, (struct pt_regs *)ctx[0], true);           \
	}

/* Named as the kernel names the functions (x86-64's stat is newstat). */
SYSCALL_HOOK(openat, SC_OPENAT)
SYSCALL_HOOK(openat2, SC_OPENAT2)
SYSCALL_HOOK(open, SC_OPEN)
SYSCALL_HOOK(creat, SC_CREAT)
SYSCALL_HOOK(ioctl, SC_IOCTL)
SYSCALL_HOOK(mknodat, SC_MKNODAT)
SYSCALL_HOOK(mknod, SC_MKNOD)
SYSCALL_HOOK(unlinkat, SC_UNLINKAT)
SYSCALL_HOOK(unlink, SC_UNLINK)
SYSCALL_HOOK(symlinkat, SC_SYMLINKAT)
SYSCALL_HOOK(symlink, SC_SYMLINK)
SYSCALL_HOOK(mkdirat, SC_MKDIRAT)
SYSCALL_HOOK(mkdir, SC_MKDIR)
SYSCALL_HOOK(newfstatat, SC_NEWFSTATAT)
SYSCALL_HOOK(newstat, SC_STAT)
SYSCALL_HOOK(newlstat, SC_LSTAT)
SYSCALL_HOOK(statx, SC_STATX)
SYSCALL_HOOK(faccessat, SC_FACCESSAT)
SYSCALL_HOOK(faccessat2, SC_FACCESSAT2)
SYSCALL_HOOK(access, SC_ACCESS)
SYSCALL_HOOK(memfd_create, SC_MEMFD_CREATE)
SYSCALL_HOOK(execve, SC_EXECVE)
SYSCALL_HOOK(execveat, SC_EXECVEAT)

/* The syscall's result as the exit path reads it (ax, x0). */
static __always_inline long regs_result(struct pt_regs *regs)
{
	if (is_arm64())
		return ((struct pt_regs___arm64 *)regs)->regs[0];
	return ((struct pt_regs___x86 *)regs)->ax;
}

/* A call that a seccomp filter refused never reaches its function. Its
 * refusal is seen where it is decided: __secure_computing returns -1 (skip
 * the call) with the result already in the registers (RET_ERRNO,
 * USER_NOTIF) or the call rolled back for SIGSYS (KILL, TRAP). Only
 * filtered tasks run this, and only tasks that seccomp refused get past
 * the first test; unlike the tracepoints' guess at an exit with no entry,
 * a call in flight at the attach is never taken for refused. The
 * function's argument went in 6.15, so the return comes from
 * bpf_get_func_ret. */
SEC("fexit/__secure_computing")
int ct_fexit_seccomp(__u64 *ctx)
{
	__u64 skip = 0;
	if (bpf_get_func_ret(ctx, &skip) || (int)skip != -1)
		return 0;
	if (!is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	__u8 sc = traced_syscall(syscall_nr(regs));
	if (sc == SC_NONE || in_compat_syscall())
		return 0;
	long ret = (long)regs_result(regs);
	bool rb = rolled_back(regs, ret);
	if ((ret >= 0 || ret < -4095) && !rb)
		return 0; /* USER_NOTIF answered with a value: not a failure */
	enter(sc, regs);
	struct event *e = bpf_task_storage_get(&pending, task, 0, 0);
	if (!e)
		return 0;
	if (e->kind == 0) {
		e->no_entry = NO_ENTRY_SEEN;
		return 0;
	}
	e->no_entry = rb ? NO_ENTRY_ROLLED_BACK : NO_ENTRY_REFUSED;
	return finish(e, ret);
}

#endif

/* The process's resource limits when a probed entry point failed, in the
 * event's arg: read in the kernel at the return, so a target that exits
 * at once still has them (its /proc is gone when user space looks), as
 * the cgroup id is. CUDA needs address space (RLIMIT_AS: cuInit 2) and
 * fds (RLIMIT_NOFILE: 304, 46). */
struct api_limits {
	__u64 as_cur;
	__u64 as_max;
	__u64 nofile_cur;
	__u64 nofile_max;
	__u64 memlock_cur;
	__u64 memlock_max;
};

const struct api_limits *unused_api_limits __attribute__((unused));

#ifndef CUDATRACE_FENTRY
/* ---- process lifecycle ---- */

SEC("tp_btf/sched_process_fork")
int ct_fork(__u64 *ctx)
{
	struct task_struct *parent = (void *)ctx[0];
	struct task_struct *child = (void *)ctx[1];
	if (!follow_children)
		return 0;
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid == ctgid || !is_traced(ptgid))
		return 0;
	__u8 one = 1;
	if (bpf_map_update_elem(&traced, &ctgid, &one, BPF_ANY))
		count_drop(DROP_CHILD);
	return 0;
}

/* seccomp's KILL_THREAD on a thread that is not its process's last ends it
 * in do_exit(SIGSYS) inside the call: no syscall exit runs (the other
 * actions, and the last thread, roll the call back and exit through it), so
 * this exit is the call's only trace. Its registers still hold the call,
 * its fds are still open; its memory is gone. On arm64 a rollback cannot be
 * told from the registers (x0 keeps the first argument either way): not
 * seen there. */
#ifndef CUDATRACE_OLD_KERNEL
static __always_inline void killed_in_call(struct task_struct *task)
{
	struct task_struct *cur = bpf_get_current_task_btf();
	if (task->exit_code != SIGSYS || !bpf_core_field_exists(cur->seccomp) || cur->seccomp.mode != SECCOMP_MODE_DEAD)
		return;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(cur);
	if (!regs || in_compat_syscall())
		return;
	/* A rolled-back call exited through sys_exit, which reported it; a
	 * sibling dying with the process is not in SECCOMP_MODE_DEAD. Not
	 * SIGNAL_GROUP_EXIT: a sibling woken by this thread's exit (a join)
	 * may end the process before this tracepoint runs. */
	if (rolled_back(regs, is_arm64() ? ((struct pt_regs___arm64 *)regs)->regs[0] : ((struct pt_regs___x86 *)regs)->ax))
		return;
	/* The calls a sandbox kills inside cuInit are the driver's ioctls
	 * (no filter can tell a /dev/nvidia* open from another). Built here,
	 * not through enter_args and finish: their other kinds would cost
	 * this program thousands of verified instructions. */
	if (traced_syscall(syscall_nr(regs)) != SC_IOCTL)
		return;
	struct sys_args args;
	read_args(regs, &args);
	ioctl_enter((int)args.a[0], (__u32)args.a[1], args.a[2]);
	struct event *e = bpf_task_storage_get(&pending, bpf_get_current_task_btf(), 0, 0);
	if (!e)
		return;
	if (e->kind != KIND_IOCTL) {
		e->no_entry = 0;
		return;
	}
	e->no_entry = NO_ENTRY_THREAD_KILLED;
	e->ret = 0;
	e->arg_len = 0;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->cgroup_id = bpf_get_current_cgroup_id();
	current_comm(e->comm);
	e->ktime = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, e, EVENT_PATH_OFF, wakeup_flags(true)))
		count_drop(DROP_RINGBUF);
	discard(e);
}
#endif

SEC("tp_btf/sched_process_exit")
int ct_exit(__u64 *ctx)
{
	struct task_struct *task = untrusted_task((void *)ctx[0]);
	__u32 tgid = task->tgid;
	bool group_dead;
	if (exit_tp_has_group_dead)
		group_dead = ctx[1] != 0;
	else
		group_dead = task->signal->live.counter == 0;
	/* Before the group_dead test: without the tracepoint's argument
	 * (before 6.16) a thread whose sibling has since decremented live
	 * reads live == 0 and looks like the last, though its own decrement
	 * was not (a worker killed in cuInit wakes the joining leader, which
	 * exits first: 3 of 3 on 6.1, under load on 6.12). The sibling whose
	 * exit ends the process may also have run this tracepoint first and
	 * untraced it: a thread with a slot was traced. killed_in_call itself
	 * checks that this thread died in a call (SIGSYS, SECCOMP_MODE_DEAD,
	 * not rolled back). */
#ifdef CUDATRACE_OLD_KERNEL
	/* The thread's slots go with it, as task storage's do. Before 5.17
	 * no thread is in SECCOMP_MODE_DEAD: killed_in_call sees nothing. */
	__u64 key = bpf_get_current_task();
	bpf_map_delete_elem(&pending, &key);
	bpf_map_delete_elem(&api_out_arg, &key);
#else
	if (is_traced(tgid) || bpf_task_storage_get(&pending, bpf_get_current_task_btf(), 0, 0))
		killed_in_call(task);
#endif
	if (!group_dead)
		return 0;
	if (!is_traced(tgid))
		return 0;
	bpf_map_delete_elem(&traced, &tgid);

	struct event *e = bpf_ringbuf_reserve(&events, EVENT_HEADER_SIZE, 0);
	if (!e) {
		count_drop(DROP_RINGBUF);
		return 0;
	}
	e->ktime = bpf_ktime_get_ns();
	e->flags = 0;
	e->ret = 0;
	e->uptr = 0;
	e->path_uptr = 0;
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->retry = 0;
	e->tgid = tgid;
	e->tid = tgid; /* the process's exit, reported by its leader as ptrace does */
	e->request = 0;
	e->fd = 0;
	e->mode = 0;
	e->dev_major = 0;
	e->dev_minor = 0;
	if (task->signal->flags & SIGNAL_GROUP_EXIT)
		e->exit_code = task->signal->group_exit_code;
	else
		e->exit_code = task->exit_code;
	e->syscall = SC_EXIT;
	e->kind = KIND_EXIT;
	e->has_dev = 0;
	e->arg_len = 0;
	e->argc = 0;
	e->matched = 1;
	e->path_len = 0;
	e->no_entry = 0;
	e->held = 0;
	e->has_count = 0;
	e->has_status = 0;
	e->status_off = 0;
	e->status = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, wakeup_flags(true));
	return 0;
}

/* ---- CUDA and NVML entry points (uprobes on the libraries) ---- */

/* The return register, in either arch's pt_regs. */
/* A uprobe's ctx may only be loaded at fixed offsets; CO-RE relocated
 * fields are read through a probe read instead (as bpf_tracing.h's
 * PT_REGS_*_CORE do). */
static __always_inline __u64 regs_ret(struct pt_regs *regs)
{
	if (is_arm64())
		return BPF_CORE_READ((struct pt_regs___arm64 *)regs, regs[0]);
	return BPF_CORE_READ((struct pt_regs___x86 *)regs, ax);
}

static __always_inline __u64 regs_arg0(struct pt_regs *regs)
{
	if (is_arm64())
		return BPF_CORE_READ((struct pt_regs___arm64 *)regs, regs[0]);
	return BPF_CORE_READ((struct pt_regs___x86 *)regs, di);
}

/* Entry of an entry point that returns a count through its first argument
 * (cuDeviceGetCount(int *count)): keep the pointer for the return. */
static __always_inline int api_enter(struct pt_regs *ctx)
{
	if (!is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
#ifdef CUDATRACE_OLD_KERNEL
	__u64 key = bpf_get_current_task(), arg = regs_arg0(ctx);
	bpf_map_update_elem(&api_out_arg, &key, &arg, BPF_ANY);
#else
	__u64 *slot = bpf_task_storage_get(&api_out_arg, bpf_get_current_task_btf(), 0,
					   BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (slot)
		*slot = regs_arg0(ctx);
#endif
	return 0;
}

enum { RLIMIT_NOFILE_ = 7, RLIMIT_MEMLOCK_ = 8, RLIMIT_AS_ = 9 };

static __always_inline void read_limits(struct api_limits *l)
{
	/* Through probe reads: a uprobe has no BTF-typed task on 5.10. */
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct signal_struct *sig = BPF_CORE_READ(task, signal);
	l->as_cur = BPF_CORE_READ(sig, rlim[RLIMIT_AS_].rlim_cur);
	l->as_max = BPF_CORE_READ(sig, rlim[RLIMIT_AS_].rlim_max);
	l->nofile_cur = BPF_CORE_READ(sig, rlim[RLIMIT_NOFILE_].rlim_cur);
	l->nofile_max = BPF_CORE_READ(sig, rlim[RLIMIT_NOFILE_].rlim_max);
	l->memlock_cur = BPF_CORE_READ(sig, rlim[RLIMIT_MEMLOCK_].rlim_cur);
	l->memlock_max = BPF_CORE_READ(sig, rlim[RLIMIT_MEMLOCK_].rlim_max);
}

/* The current process's environment block (mm->env_start..env_end), sent
 * as a KIND_ENV record, once per mm. Through probe reads, as read_limits. */
static __always_inline void send_env(__u32 tgid, __u32 tid)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct mm_struct *mm = BPF_CORE_READ(task, mm);
	if (!mm)
		return;
	__u64 key = (__u64)mm;
	__u8 one = 1;
	if (bpf_map_update_elem(&env_sent, &key, &one, BPF_NOEXIST))
		return; /* sent already for this image */
	__u64 start = BPF_CORE_READ(mm, env_start);
	__u64 end = BPF_CORE_READ(mm, env_end);
	if (end <= start)
		return;
	__u64 n = end - start;
	__u32 cut = 0;
	if (n > ENV_MAX) {
		n = ENV_MAX;
		cut = 1;
	}
	struct event *e = bpf_ringbuf_reserve(&events, EVENT_HEADER_SIZE + ENV_MAX, 0);
	if (!e) {
		count_drop(DROP_RINGBUF);
		return;
	}
	__builtin_memset(e, 0, EVENT_HEADER_SIZE);
	if (bpf_probe_read_user((char *)e + EVENT_HEADER_SIZE, n, (const void *)start))
		n = 0; /* not resident: user space reads /proc instead */
	e->ktime = bpf_ktime_get_ns();
	e->ret = (__s64)n;
	e->mode = cut;
	e->tgid = tgid;
	e->tid = tid;
	e->syscall = SC_API;
	e->kind = KIND_ENV;
	e->matched = 1;
	bpf_ringbuf_submit(e, 0);
}

/* Return of a probed entry point. The attach cookie says which one (user
 * space's table); ret is the CUresult / nvmlReturn_t. flags holds the
 * count an out-argument returned, when the entry kept one; a failure
 * carries the limits in arg. */
static __always_inline int api_ret(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!is_traced(tgid))
		return 0;
	__s64 ret = (__s64)(__u32)regs_ret(ctx);
	struct event *e;
	if (ret) {
		e = bpf_ringbuf_reserve(&events, EVENT_PATH_OFF, 0);
		if (e) {
			__builtin_memset(e, 0, EVENT_PATH_OFF);
			read_limits((struct api_limits *)e->arg);
			e->arg_len = sizeof(struct api_limits);
		}
	} else {
		e = bpf_ringbuf_reserve(&events, EVENT_HEADER_SIZE, 0);
		if (e)
			__builtin_memset(e, 0, EVENT_HEADER_SIZE);
	}
	if (!e) {
		count_drop(DROP_RINGBUF);
		return 0;
	}
	e->ktime = bpf_ktime_get_ns();
	e->ret = ret;
	e->request = (__u32)bpf_get_attach_cookie(ctx);
	e->tgid = tgid;
	e->tid = (__u32)id;
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->syscall = SC_API;
	e->kind = KIND_API;
	e->matched = 1;
#ifdef CUDATRACE_OLD_KERNEL
	__u64 key = bpf_get_current_task();
	__u64 *slot = bpf_map_lookup_elem(&api_out_arg, &key);
#else
	__u64 *slot = bpf_task_storage_get(&api_out_arg, bpf_get_current_task_btf(), 0, 0);
#endif
	if (slot && *slot) {
		__s32 n = 0;
		if (!bpf_probe_read_user(&n, sizeof(n), (const void *)*slot)) {
			e->flags = (__u32)n;
			e->has_count = 1;
		}
		*slot = 0;
	}
#ifdef CUDATRACE_OLD_KERNEL
	if (slot)
		bpf_map_delete_elem(&api_out_arg, &key);
#endif
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, wakeup_flags(true));
	if (ret)
		send_env(tgid, (__u32)id);
	return 0;
}

/* The same, attached one symbol at a time (any kernel with uprobes), or all
 * of a library's at once (uprobe_multi, 6.6+): one link per library, whose
 * close waits for the kernel once rather than once per symbol (~1 s per run
 * on the H200 with per-symbol links). */
SEC("uprobe")
int ct_api_enter(struct pt_regs *ctx) { return api_enter(ctx); }

SEC("uretprobe")
int ct_api_ret(struct pt_regs *ctx) { return api_ret(ctx); }

#ifndef CUDATRACE_OLD_KERNEL
SEC("uprobe.multi")
int ct_api_enter_multi(struct pt_regs *ctx) { return api_enter(ctx); }

SEC("uretprobe.multi")
int ct_api_ret_multi(struct pt_regs *ctx) { return api_ret(ctx); }
#endif

#endif
