package ebpf

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// MinimumKernel is the oldest Linux the programs are tested on: Debian 11's
// 5.10, which loads the object for older kernels (oldKernelFeatures). It is
// stated, never checked: each feature is probed.
const MinimumKernel = "5.10"

// feature is one the programs need: its name, the Linux release that
// brought it, and its probe (ebpf.ErrNotSupported: missing).
type feature struct {
	name, since string
	probe       func() error
}

// requiredFeatures are what neither object can do without, oldest first.
// BTF tracepoints (5.5) are older; cilium/ebpf's probe for that program
// type loads an fentry program, which lockdown refuses. The first one
// missing is the one line saying why the eBPF backend cannot run here
// (--backend auto then takes ptrace).
var requiredFeatures = []feature{
	{"the BPF ring buffer", "5.8", func() error { return features.HaveMapType(ebpf.RingBuf) }},
}

// oldKernelFeatures are what the main object needs beyond them. Where one
// is missing, the object for older kernels loads instead
// (oldkernel_bpfel.o, bpf/cudatrace.c with CUDATRACE_OLD_KERNEL), with a
// fallback for each. Pointer arguments to global functions (5.12) and
// BPF_PSEUDO_FUNC (5.13) are not probed: every kernel with attach
// cookies has both, and the old object does without either.
var oldKernelFeatures = []feature{
	{"task storage maps", "5.11", probeTaskStorage},
	{"bpf_get_current_task_btf", "5.11", func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetCurrentTaskBtf) }},
	{"uprobe attach cookies (bpf_get_attach_cookie)", "5.15", func() error {
		return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie)
	}},
}

// oldKernelVariants are the fallbacks the object for older kernels takes,
// all of them wherever it loads.
var oldKernelVariants = []string{
	"object=oldkernel",
	"slots=hash",              // per-thread slots: hash maps by task, for task storage
	"current-task=probe-read", // bpf_get_current_task and probe reads, for bpf_get_current_task_btf
	"functions=inlined",       // no global functions (their pointer arguments: 5.12)
	"cookies=per-program",     // a ct_api_ret per entry point, for bpf_get_attach_cookie
}

// probeTaskStorage asks for a task storage map whose values are too large:
// a kernel with the type refuses it (E2BIG) in its attribute check, before
// anything is allocated; one without says EINVAL. cilium/ebpf's probe
// (features.HaveMapType) gets past the allocation to the BTF fd, and its
// failure frees the map through RCU barriers in the syscall: 20-40 ms here,
// ~200 under load, in front of every start (issue 31).
func probeTaskStorage() error {
	attr := struct {
		mapType, keySize, valueSize, maxEntries, mapFlags, innerMapFD, numaNode uint32
		name                                                                    [16]byte
		ifindex, btfFD, btfKey, btfValue                                        uint32
	}{mapType: unix.BPF_MAP_TYPE_TASK_STORAGE, keySize: 4, valueSize: 1 << 24, mapFlags: unix.BPF_F_NO_PREALLOC,
		btfFD: ^uint32(0), btfKey: 1, btfValue: 1}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	switch errno {
	case 0:
		_ = unix.Close(int(fd)) // a kernel that took it has the type
		return nil
	case unix.E2BIG:
		return nil
	case unix.EINVAL:
		return ebpf.ErrNotSupported
	}
	return errno
}

// kernelVariants is what the running kernel offers, probed once per
// process: whether the programs can run at all, and the variant chosen
// where a feature has a fallback.
type kernelVariants struct {
	missing error // the first required feature the kernel lacks (unavailable), or nil

	memlockRaised bool // the kernel charges BPF memory to RLIMIT_MEMLOCK (before 5.11): raised
	loop          bool // bpf_loop (5.17); else bounded loops
	rdonlyCast    bool // bpf_rdonly_cast (6.2); else a probe read per field (set by the load)
	uprobeMulti   bool // uprobe_multi links (6.6); else a link per symbol
	// oldKernel, where the kernel lacks one of oldKernelFeatures, says
	// which: the object for older kernels loads. "": the main object.
	oldKernel string
}

// list names the variants chosen, for --debug and the report.
func (v *kernelVariants) list() []string {
	pick := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	l := []string{
		pick(v.memlockRaised, "memlock=raised", "memlock=memcg"),
		pick(v.loop, "scans=bpf_loop", "scans=bounded-loops"),
		pick(v.rdonlyCast, "task-reads=bpf_rdonly_cast", "task-reads=probe-read"),
		pick(v.uprobeMulti, "uprobes=uprobe_multi", "uprobes=per-symbol"),
	}
	if v.oldKernel != "" {
		l = append(l, oldKernelVariants...)
	}
	return l
}

func (v *kernelVariants) String() string {
	s := "kernel variants: " + strings.Join(v.list(), ", ")
	if v.oldKernel != "" {
		s += " (the object for older kernels: this one has no " + v.oldKernel + ")"
	}
	return s
}

// loadObject reads the BPF object the kernel takes (v.oldKernel).
func loadObject(v kernelVariants) (*ebpf.CollectionSpec, error) {
	if v.oldKernel != "" {
		return loadOldkernel()
	}
	return loadBpf()
}

var probed struct {
	once sync.Once
	v    kernelVariants
}

// kernelSupport probes the kernel once; callers hold privileges already
// (checkPrivileges). cilium/ebpf caches each feature probe, too.
func kernelSupport() kernelVariants {
	probed.once.Do(func() { probed.v = probeKernel() })
	v := probed.v
	if oldKernelObject && v.missing == nil && v.oldKernel == "" {
		v.oldKernel = "need for the main object (a test chose the other)"
		v.loop, v.uprobeMulti = false, false
	}
	return v
}

// oldKernelObject, set by tests, makes the object for older kernels load
// on a kernel that has what the main one needs.
var oldKernelObject bool

func probeKernel() kernelVariants {
	var v kernelVariants
	// Before 5.11 every map and program is charged to RLIMIT_MEMLOCK
	// (64 KiB by default): rlimit finds out by creating a map under a
	// limit of 0, and lifts the limit only where it is charged.
	var before, after unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &before) // a failure reads as unchanged
	if err := rlimit.RemoveMemlock(); err != nil {
		v.missing = unavailable("this kernel charges BPF memory to RLIMIT_MEMLOCK and it cannot be raised: %v", err)
		return v
	}
	_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &after)
	v.memlockRaised = after != before
	for _, f := range requiredFeatures {
		if err := f.probe(); err != nil {
			if errors.Is(err, ebpf.ErrNotSupported) {
				v.missing = missingFeature(f.name, f.since)
			} else {
				v.missing = unavailable("BPF not supported: probing for %s: %v", f.name, err)
			}
			return v
		}
	}
	for _, f := range oldKernelFeatures {
		if err := f.probe(); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				v.missing = unavailable("BPF not supported: probing for %s: %v", f.name, err)
				return v
			}
			v.oldKernel = fmt.Sprintf("%s (Linux %s)", f.name, f.since)
			break
		}
	}
	if v.oldKernel != "" {
		return v // its object has neither bpf_loop nor uprobe_multi programs
	}
	v.loop = features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop) == nil
	v.uprobeMulti = features.HaveBPFLinkUprobeMulti() == nil
	return v
}

// haveKfunc: a kfunc is a function in the kernel's BTF. The programs take
// bpf_rdonly_cast as a weak ksym, so its absence chooses the fallback by
// itself at load; this says which one the load took.
func haveKfunc(cache *btf.Cache, name string) bool {
	kspec, err := cache.Kernel()
	if err != nil {
		return false
	}
	var fn *btf.Func
	return kspec.TypeByName(name, &fn) == nil
}

// missingFeature is the one line saying the kernel lacks a required feature.
func missingFeature(name, since string) error {
	return unavailable("cudatrace's eBPF programs need %s (Linux %s or newer; the eBPF backend's minimum is %s): this kernel has none", name, since, MinimumKernel)
}
