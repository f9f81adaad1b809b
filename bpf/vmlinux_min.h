/* Minimal CO-RE kernel types for cudatrace.c: only the fields it reads.
 * preserve_access_index makes every access a CO-RE relocation, so the real
 * offsets come from the running kernel's BTF at load time. */
#ifndef CUDATRACE_VMLINUX_MIN_H
#define CUDATRACE_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

typedef __u32 u32;
typedef __u64 u64;
typedef __u16 u16;
typedef __u8 u8;
typedef __s64 s64;
typedef __s32 s32;
typedef int pid_t;
typedef __u32 dev_t;
typedef __u16 umode_t;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PROG_ARRAY = 3,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_F_NO_PREALLOC = 1,
};

enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

/* bpf_ringbuf_submit/output flags and bpf_ringbuf_query keys (UAPI). */
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

enum {
	BPF_RB_AVAIL_DATA = 0,
};

typedef struct {
	int counter;
} atomic_t;

struct rlimit {
	unsigned long rlim_cur;
	unsigned long rlim_max;
} __attribute__((preserve_access_index));

struct signal_struct {
	atomic_t live;
	unsigned int flags;
	int group_exit_code;
	struct rlimit rlim[16]; /* RLIM_NLIMITS */
} __attribute__((preserve_access_index));

struct super_block {
	dev_t s_dev;
} __attribute__((preserve_access_index));

struct inode {
	umode_t i_mode;
	dev_t i_rdev;
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

/* Absent without CONFIG_SECCOMP: then no filter can refuse a call. */
struct seccomp {
	int mode;
} __attribute__((preserve_access_index));

/* The environment block's bounds (/proc/PID/environ). */
struct mm_struct {
	unsigned long env_start;
	unsigned long env_end;
} __attribute__((preserve_access_index));

struct task_struct {
	struct seccomp seccomp;
	pid_t pid;
	pid_t tgid;
	int exit_code;
	char comm[16];
	struct files_struct *files;
	struct signal_struct *signal;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

/* The raw sys_enter/sys_exit tracepoints pass the syscall's registers.
 * One object serves x86-64 and arm64: each arch's layout is a CO-RE flavour,
 * and the one the running kernel lacks is never reached. */
struct pt_regs;

struct pt_regs___x86 {
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long r10;
	unsigned long r8;
	unsigned long r9;
	unsigned long ax;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct pt_regs___arm64 {
	unsigned long regs[31];
	unsigned long orig_x0;
	int syscallno;
} __attribute__((preserve_access_index));

/* Whether the current syscall is a 32-bit (compat) one, whose numbers are
 * another table: x86 marks it in thread_info.status, arm64 in its flags. */
struct thread_info___x86 {
	unsigned int status;
} __attribute__((preserve_access_index));

struct thread_info___arm64 {
	unsigned long flags;
} __attribute__((preserve_access_index));

struct task_struct___x86 {
	struct thread_info___x86 thread_info;
} __attribute__((preserve_access_index));

struct task_struct___arm64 {
	struct thread_info___arm64 thread_info;
} __attribute__((preserve_access_index));

#endif
