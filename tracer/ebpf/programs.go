package ebpf

import (
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// The syscall programs are one hook's (hook.go): fentry/fexit pairs on
// the traced syscalls' functions, or two raw tracepoints, sys_enter and
// sys_exit, that see every syscall and turn away untraced numbers first.
// Per-syscall tracepoints cost an untraced syscall less than the raw ones
// (here ~55 ns against ~120 ns, both host-wide while tracing), but
// attaching and closing ~50 links took seconds (a kernel grace period
// each, under one mutex) on every run.

// lifecycleProgs follow the process tree; they are BTF tracepoints.
var lifecycleProgs = []string{bpfProgCtFork, bpfProgCtExit}

// nrTableSize: syscall numbers at or above it are not looked at.
const nrTableSize = int(bpfLimitsNR_TABLE)

// syscallTable maps this arch's syscall numbers to the programs' syscall
// ids; a zero entry is a syscall not traced.
func syscallTable() ([nrTableSize]uint8, error) {
	var table [nrTableSize]uint8
	if len(syscallNumbers) == 0 {
		return table, unavailable("eBPF backend: syscall numbers not known on this architecture")
	}
	if len(syscallNumbers) != int(bpfSyscallIdSC_EXIT) {
		return table, fmt.Errorf("%d syscall numbers for %d syscalls", len(syscallNumbers), bpfSyscallIdSC_EXIT-1)
	}
	for id, nr := range syscallNumbers {
		if id == int(bpfSyscallIdSC_NONE) || nr < 0 {
			continue // -1: this arch lacks the call
		}
		if nr >= nrTableSize || table[nr] != 0 {
			return table, fmt.Errorf("syscall %s: number %d out of range or taken", syscallNames[id], nr)
		}
		table[nr] = uint8(id)
	}
	for id, nr := range limitSyscallNumbers {
		if nr < 0 {
			continue
		}
		if nr >= nrTableSize || table[nr] != 0 {
			return table, fmt.Errorf("syscall %s: number %d out of range or taken", syscallNames[id], nr)
		}
		table[nr] = uint8(id)
	}
	return table, nil
}

// fieldReads, set by tests, makes the programs walk fd → inode with a probe
// read per field, as on kernels before 6.2 (no bpf_rdonly_cast).
var fieldReads bool

// boundedLoops, set by tests, makes the programs scan paths with bounded
// loops, as on kernels before 5.17 (no bpf_loop).
var boundedLoops bool

// foldAfter is how many successful calls per site are sent before the rest
// are only counted (tracer.Spec.FoldIoctlsAfter); zero sends all.
type foldAfter struct{ ioctls, calls uint32 }

// configure sets the load-time constants in spec. cache holds the kernel's
// BTF, parsed once for configure and the load.
// hostWide (cudatrace watch) follows any process that opens something of
// NVIDIA's, and stops no one's process at an unprobed library.
// v is the kernel's probed variants (kernelSupport).
func configure(spec *ebpf.CollectionSpec, cache *btf.Cache, fold foldAfter, hostWide bool, v kernelVariants) error {
	// Below a quarter full, the reader's own timer (pump.go) collects
	// events; above it, every submit wakes it.
	wakeup := uint64(spec.Maps[bpfMapEvents].MaxEntries / 4)
	hasGroupDead, err := exitTracepointHasGroupDead(cache)
	if err != nil {
		return err
	}
	// The user's struct stat is this arch's (compat calls are not traced).
	var st unix.Stat_t
	modeOff, rdevOff := uint32(unsafe.Offsetof(st.Mode)), uint32(unsafe.Offsetof(st.Rdev))
	table, err := syscallTable()
	if err != nil {
		return err
	}
	vars := map[string]any{
		"nr_to_sc":               table,
		"follow_children":        true,
		"capture_ioctl_args":     true,
		"exit_tp_has_group_dead": hasGroupDead,
		"stat_mode_off":          modeOff,
		"stat_rdev_off":          rdevOff,
		"wakeup_bytes":           wakeup,
		"fold_ioctls_after":      fold.ioctls,
		"fold_calls_after":       fold.calls,
		"use_rdonly_cast":        !fieldReads,
		"use_bpf_loop":           v.loop && !boundedLoops,
		"hold_unprobed_libs":     !hostWide,
		"host_wide":              hostWide,
		"self_tgid":              uint32(os.Getpid()),
	}
	for name, v := range vars {
		vs, ok := spec.Variables[name]
		if !ok {
			return fmt.Errorf("BPF object lacks variable %s", name)
		}
		if err := vs.Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// exitTracepointHasGroupDead: since 6.16 sched_process_exit passes
// group_dead, computed before the tracepoint runs (signal->live may not be
// decremented yet when it fires).
func exitTracepointHasGroupDead(cache *btf.Cache) (bool, error) {
	kspec, err := cache.Kernel()
	if err != nil {
		return false, unavailable("BPF not supported: no kernel BTF: %v", err)
	}
	var td *btf.Typedef
	if err := kspec.TypeByName("btf_trace_sched_process_exit", &td); err != nil {
		return false, unavailable("BPF not supported: no sched_process_exit tracepoint: %v", err)
	}
	ptr, ok := td.Type.(*btf.Pointer)
	if !ok {
		return false, fmt.Errorf("btf_trace_sched_process_exit: unexpected type %v", td.Type)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok {
		return false, fmt.Errorf("btf_trace_sched_process_exit: unexpected type %v", ptr.Target)
	}
	// (void *data, struct task_struct *p[, bool group_dead])
	return len(proto.Params) >= 3, nil
}

// createMaps makes the maps the C declares; none needs the kernel's BTF,
// so this overlaps with its parsing. The data sections (.rodata, .bss) are
// left to the collection: it makes them mmapable, and .rodata is frozen
// with the constants configure sets.
func createMaps(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, error) {
	maps := make(map[string]*ebpf.Map, len(spec.Maps))
	for name, ms := range spec.Maps {
		if strings.HasPrefix(name, ".") {
			continue
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			closeMaps(maps)
			return nil, fmt.Errorf("map %s: %w", name, err)
		}
		maps[name] = m
	}
	return maps, nil
}

func closeMaps(maps map[string]*ebpf.Map) {
	for _, m := range maps {
		_ = m.Close() // best-effort cleanup: nothing to do if it fails
	}
}

// loadOptions are the options of every load of ours: the kernel's BTF from
// cache, and vmlinux's types as the only CO-RE target. With no target
// named, cilium/ebpf also parses the BTF of every loaded module as one
// (the H200 host has two, nvidia and nvidia_uvm; a host with mlx5, nvme,
// ib_* and the like has dozens). Every type the programs read is
// vmlinux's, and type-ID relocations resolve against vmlinux alone anyway.
func loadOptions(cache *btf.Cache) (ebpf.CollectionOptions, error) {
	kspec, err := cache.Kernel()
	if err != nil {
		return ebpf.CollectionOptions{}, err
	}
	return ebpf.CollectionOptions{
		Cache:    cache,
		Programs: ebpf.ProgramOptions{KernelTypes: kspec},
	}, nil
}

// loadCollection makes the data sections, then loads the programs in parallel, one
// group per CPU: each load is a verifier run, and privileged loads do not
// serialise in the kernel. maps holds the other maps, made by createMaps.
func loadCollection(spec *ebpf.CollectionSpec, cache *btf.Cache, maps map[string]*ebpf.Map) (_ *ebpf.Collection, err error) {
	mapsOnly := &ebpf.CollectionSpec{Maps: spec.Maps, Variables: spec.Variables, Types: spec.Types, ByteOrder: spec.ByteOrder}
	coll, err := ebpf.NewCollectionWithOptions(mapsOnly, ebpf.CollectionOptions{Cache: cache, MapReplacements: maps})
	if err != nil {
		return nil, err
	}
	opts, err := loadOptions(cache)
	if err != nil {
		coll.Close()
		return nil, err
	}
	coll.Programs = make(map[string]*ebpf.Program, len(spec.Programs))
	defer func() {
		if err != nil {
			coll.Close()
		}
	}()
	parts := balance(spec, min(runtime.NumCPU(), len(spec.Programs)))
	groups := len(parts)
	loaded := make([]*ebpf.Collection, groups)
	errs := make([]error, groups)
	var wg sync.WaitGroup
	for g, progs := range parts {
		part, replace := groupSpec(spec, progs, coll.Maps)
		opts := opts
		opts.MapReplacements = replace
		wg.Go(func() { loaded[g], errs[g] = ebpf.NewCollectionWithOptions(part, opts) })
	}
	wg.Wait()
	for g, c := range loaded {
		if c == nil {
			continue
		}
		for name := range c.Programs {
			coll.Programs[name] = c.DetachProgram(name)
		}
		c.Close() // its clones of the maps
		if errs[g] != nil && err == nil {
			err = errs[g]
		}
	}
	for _, e := range errs {
		if e != nil && err == nil {
			err = e
		}
	}
	return coll, err
}

// groupSpec is the part of spec that loads progs: their programs and only
// the maps and variables they use, each map replaced by the one in made.
// The rest is shared, not copied: spec.Copy() copied every program and the
// object's BTF once per group, ~2.5 ms each here, one after another before
// the last group could start; and every map in the part is a clone (an fd)
// and every data section an mmap, in every group.
func groupSpec(spec *ebpf.CollectionSpec, progs []string, made map[string]*ebpf.Map) (*ebpf.CollectionSpec, map[string]*ebpf.Map) {
	part := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Variables: map[string]*ebpf.VariableSpec{},
		Types: spec.Types, ByteOrder: spec.ByteOrder, Programs: make(map[string]*ebpf.ProgramSpec, len(progs))}
	replace := map[string]*ebpf.Map{}
	for _, name := range progs {
		p := spec.Programs[name]
		part.Programs[name] = p
		for _, ins := range p.Instructions {
			if ref := ins.Reference(); ins.IsLoadFromMap() && ref != "" && spec.Maps[ref] != nil {
				part.Maps[ref], replace[ref] = spec.Maps[ref], made[ref]
			}
		}
	}
	for name, v := range spec.Variables {
		if part.Maps[v.SectionName] != nil {
			part.Variables[name] = v
		}
	}
	return part, replace
}

// balance splits the programs into n groups of about equal verifier time,
// which grows with a program's size: largest first, each to the lightest
// group. With sys_exit as large as the rest together, round-robin by name
// left one CPU waiting for the other.
func balance(spec *ebpf.CollectionSpec, n int) [][]string {
	names := slices.Sorted(maps.Keys(spec.Programs))
	size := func(name string) int { return len(spec.Programs[name].Instructions) }
	slices.SortStableFunc(names, func(a, b string) int { return size(b) - size(a) })
	parts := make([][]string, n)
	load := make([]int, n)
	for _, name := range names {
		g := slices.Index(load, slices.Min(load))
		parts[g] = append(parts[g], name)
		load[g] += size(name)
	}
	return parts
}

// exitTails are sys_exit's tail-call slots and their programs.
var exitTails = map[bpfExitTailSlot]string{
	bpfExitTailSlotTAIL_UNENTERED: bpfProgCtSysExitUnentered,
	bpfExitTailSlotTAIL_EXIT:      bpfProgCtSysExit,
}

// setExitTails fills the exits' tail-call slots (sys_exit's, or the
// fentry hook's one); before anything is attached, so that no exit finds
// one empty.
func setExitTails(coll *ebpf.Collection) error {
	if p := coll.Programs[fentryProgCtFexitCommon]; p != nil {
		if err := coll.Maps[bpfMapFexitTail].Put(uint32(0), p); err != nil {
			return fmt.Errorf("tail call %s: %w", fentryProgCtFexitCommon, err)
		}
	}
	if coll.Programs[bpfProgCtSysExit] == nil {
		return nil
	}
	for slot, name := range exitTails {
		if err := coll.Maps[bpfMapExitTail].Put(uint32(slot), coll.Programs[name]); err != nil {
			return fmt.Errorf("tail call %s: %w", name, err)
		}
	}
	return nil
}

// clearExitTails empties the slots: ct_sys_exit and the map hold each other,
// and the kernel would break that cycle only later, from a work queue, after
// the map's last fd is closed.
func clearExitTails(coll *ebpf.Collection) {
	for slot := range exitTails {
		_ = coll.Maps[bpfMapExitTail].Delete(uint32(slot)) // empty already is fine
	}
	_ = coll.Maps[bpfMapFexitTail].Delete(uint32(0)) // empty already is fine
}

// failAttach, set by tests, makes the attach of the programs it names fail.
var failAttach func(name string) error

// attachProgs attaches the named programs in order; the caller closes the
// links, also on error.
func attachProgs(coll *ebpf.Collection, names []string) (links []link.Link, err error) {
	for _, name := range names {
		if failAttach != nil {
			if err := failAttach(name); err != nil {
				return links, fmt.Errorf("attach %s: %w", name, err)
			}
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[name]})
		if err != nil {
			return links, fmt.Errorf("attach %s: %w", name, err)
		}
		links = append(links, l)
	}
	return links, nil
}
