package ebpf

import (
	"errors"
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

// MinimumKernel is the oldest Linux whose features the programs need
// (requiredFeatures): the attach cookie, the newest of them, came in 5.15.
// It is stated, never checked: each feature is probed.
const MinimumKernel = "5.15"

// feature is one the programs need: its name, the Linux release that
// brought it, and its probe (ebpf.ErrNotSupported: missing).
type feature struct {
	name, since string
	probe       func() error
}

// requiredFeatures are what the programs cannot do without, oldest first.
// BTF tracepoints (5.5) are older than all of them; cilium/ebpf's probe
// for that program type loads an fentry program, which lockdown refuses.
// The first one missing is the one line saying why the eBPF backend cannot
// run here (--backend auto then takes ptrace).
var requiredFeatures = []feature{
	{"the BPF ring buffer", "5.8", func() error { return features.HaveMapType(ebpf.RingBuf) }},
	{"task storage maps", "5.11", probeTaskStorage},
	{"bpf_get_current_task_btf", "5.11", func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetCurrentTaskBtf) }},
	{"uprobe attach cookies (bpf_get_attach_cookie)", "5.15", func() error {
		return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie)
	}},
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
}

// list names the variants chosen, for --debug and the report.
func (v *kernelVariants) list() []string {
	pick := func(ok bool, yes, no string) string {
		if ok {
			return yes
		}
		return no
	}
	return []string{
		pick(v.memlockRaised, "memlock=raised", "memlock=memcg"),
		pick(v.loop, "scans=bpf_loop", "scans=bounded-loops"),
		pick(v.rdonlyCast, "task-reads=bpf_rdonly_cast", "task-reads=probe-read"),
		pick(v.uprobeMulti, "uprobes=uprobe_multi", "uprobes=per-symbol"),
	}
}

func (v *kernelVariants) String() string { return "kernel variants: " + strings.Join(v.list(), ", ") }

var probed struct {
	once sync.Once
	v    kernelVariants
}

// kernelSupport probes the kernel once; callers hold privileges already
// (checkPrivileges). cilium/ebpf caches each feature probe, too.
func kernelSupport() kernelVariants {
	probed.once.Do(func() { probed.v = probeKernel() })
	return probed.v
}

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
