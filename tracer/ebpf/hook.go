package ebpf

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The syscall programs hang either on fentry/fexit of the traced syscalls'
// own functions, which cost the others nothing, or on the raw
// sys_enter/sys_exit tracepoints, which every syscall on the host passes
// through while they are attached (the cost: docs/benchmarks.md).
// Locked-down kernels refuse fentry (EPERM under lockdown=integrity), so
// the choice is made at run time, by loading a program that does nothing.
const (
	hookRawTracepoint = "raw_tracepoint"
	hookFentry        = "fentry"
)

// syscallFunc is the kernel function behind a syscall on this arch, as
// fentry names it.
func syscallFunc(name string) string {
	switch runtime.GOARCH {
	case "arm64":
		return "__arm64_sys_" + name
	default:
		return "__x64_sys_" + name
	}
}

// probeFentry loads (does not attach: detaching a trampoline waits for a
// grace period) an fentry program on a syscall function; nil: the kernel
// allows fentry. cache is the run's kernel BTF, already parsed.
func probeFentry(cache *btf.Cache) error {
	const name = "ct_fentry_probe"
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{name: {
		Name:         name,
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceFEntry,
		AttachTo:     syscallFunc("openat"),
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	}}}
	opts, err := loadOptions(cache)
	if err != nil {
		return err
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		return err
	}
	coll.Close()
	return nil
}

// forceHook, set by tests, makes chooseSyscallHook take that hook where
// the kernel allows it, so that one kernel runs both paths.
var forceHook string

// chooseSyscallHook says which hook the syscall programs use and why, for
// --debug and the report, and for fentry how its exits load. fentry only
// for a host-wide trace (watch): there every syscall on the host pays the
// raw tracepoints for as long as it runs, while fentry's extra start-up
// and teardown, for ~47 links each a trampoline, are paid once (under
// TCG: +0.65 s to load and attach, +3.5 s to detach; docs/benchmarks.md).
// A launched or attached trace keeps the raw tracepoints: it lasts
// seconds, and its target waits for the attach.
func chooseSyscallHook(cache *btf.Cache, hostWide bool) (hook, why string, plan *fentryPlan) {
	if err := probeFentry(cache); err != nil {
		if errors.Is(err, unix.EPERM) {
			// cilium/ebpf's hint about RLIMIT_MEMLOCK does not apply (5.11+).
			return hookRawTracepoint, "fentry refused: EPERM, kernel locked down?", nil
		}
		return hookRawTracepoint, fmt.Sprintf("fentry refused: %v", err), nil
	}
	plan, why = fentryTargets(cache)
	switch {
	case plan == nil:
		return hookRawTracepoint, why, nil
	case forceHook == hookRawTracepoint:
		return hookRawTracepoint, "fentry allowed, raw tracepoints forced by a test", nil
	case !hostWide && forceHook != hookFentry:
		return hookRawTracepoint, "fentry allowed, used only host-wide (watch): attaching and detaching it costs a short trace more than it saves", nil
	}
	why = "fentry allowed by this kernel"
	if len(plan.direct) > 0 {
		why += fmt.Sprintf("; exits inline for %s (prototype unlike %s's)", strings.Join(slices.Sorted(maps.Keys(plan.direct)), ", "), plan.common)
	}
	return hookFentry, why, plan
}

// fentryPlan is how the fentry hook's exits load on this kernel: common is
// the function ct_fexit_common is loaded on, direct the syscall functions
// (without the arch's prefix) whose BTF prototype is another one. Their
// fexits finish inline (ct_fexit_sys_direct): the kernel refuses a tail call
// between tracing programs on functions of different prototypes, and BTF
// tells apart prototypes that differ only in an argument's name (trixie's
// memfd_create).
type fentryPlan struct {
	common string
	direct map[string]bool
}

// fentryTargets makes each traced syscall's function one function in the
// kernel's BTF as this run parsed it, and plans the exits; or says why it
// cannot. A syscall that is optional at build time has a weak stub in
// kernel/sys_ni.c, and where pahole kept the stub's entry too (6.1: two
// __x64_sys_memfd_create, the stub's argument named __unused) cilium/ebpf
// refuses the name as ambiguous (cilium/ebpf#894). Both entries name one
// kernel function (the kernel finds it by name), so the stub's is renamed
// in cache's copy: the load then takes the entry whose argument is a
// struct pt_regs.
func fentryTargets(cache *btf.Cache) (*fentryPlan, string) {
	kspec, err := cache.Kernel()
	if err != nil {
		return nil, fmt.Sprintf("fentry: no kernel BTF: %v", err)
	}
	byProto := map[btf.Type][]string{}
	for id, nr := range syscallNumbers {
		if id == int(bpfSyscallIdSC_NONE) || nr < 0 {
			continue
		}
		fn := syscallFunc(fentryFunc(id))
		types, _ := kspec.AnyTypesByName(fn) // none found: no funcs
		var funcs []*btf.Func
		for _, t := range types {
			if f, ok := t.(*btf.Func); ok {
				funcs = append(funcs, f)
			}
		}
		if len(funcs) == 0 {
			return nil, fmt.Sprintf("fentry allowed, but the kernel's BTF has no function %s", fn)
		}
		real := 0
		if len(funcs) > 1 {
			if real = slices.IndexFunc(funcs, takesRegs); real < 0 {
				return nil, fmt.Sprintf("fentry allowed, but the kernel's BTF has %d functions %s, none on struct pt_regs", len(funcs), fn)
			}
			for i, f := range funcs {
				if i != real {
					f.Name += "~stub"
				}
			}
		}
		byProto[funcs[real].Type] = append(byProto[funcs[real].Type], fentryFunc(id))
	}
	// The exits share ct_fexit_common where most functions share one
	// prototype; the rest finish inline.
	var most []string
	for _, fns := range byProto {
		if len(fns) > len(most) || len(fns) == len(most) && slices.Min(fns) < slices.Min(most) {
			most = fns
		}
	}
	plan := &fentryPlan{common: slices.Min(most), direct: map[string]bool{}}
	for _, fns := range byProto {
		if !slices.Contains(fns, plan.common) {
			for _, fn := range fns {
				plan.direct[fn] = true
			}
		}
	}
	return plan, ""
}

// takesRegs: f's one argument is a pointer to a (const) struct pt_regs
// defined in full, as a syscall function's is; a stub's may point to a
// forward declaration.
func takesRegs(f *btf.Func) bool {
	proto, ok := f.Type.(*btf.FuncProto)
	if !ok || len(proto.Params) != 1 {
		return false
	}
	ptr, ok := proto.Params[0].Type.(*btf.Pointer)
	if !ok {
		return false
	}
	s, ok := btf.UnderlyingType(ptr.Target).(*btf.Struct)
	return ok && s.Name == "pt_regs" && proto.Params[0].Name != "__unused"
}

// rawProgs are the raw-tracepoint hook's programs (sys_exit's tail calls
// included).
var rawProgs = []string{bpfProgCtSysEnter, bpfProgCtSysExit, bpfProgCtSysExitUnentered}

// fentryFunc is syscall id's kernel function without the arch's prefix;
// its programs are ct_fentry_NAME and ct_fexit_NAME.
func fentryFunc(id int) string {
	switch id {
	case int(bpfSyscallIdSC_STAT):
		return "newstat"
	case int(bpfSyscallIdSC_LSTAT):
		return "newlstat"
	}
	return syscallNames[id]
}

// withFentry adds the fentry hook's programs, from their own object, to
// spec (the main object's): read only where that hook is chosen.
func withFentry(spec *ebpf.CollectionSpec) error {
	fspec, err := loadFentry()
	if err != nil {
		return fmt.Errorf("read embedded fentry object: %w", err)
	}
	maps.Copy(spec.Programs, fspec.Programs)
	return nil
}

// useHook keeps in spec the syscall programs of hook and removes the other
// hook's, which are not loaded at all; it returns those it removed. For
// fentry (spec withFentry), the entries of the syscalls this arch has are
// pointed at its functions (the others removed), and each gets a copy of
// the fexit that plan says, named ct_fexit_NAME.
func useHook(spec *ebpf.CollectionSpec, hook string, plan *fentryPlan) (map[string]*ebpf.ProgramSpec, error) {
	removed := map[string]*ebpf.ProgramSpec{}
	drop := func(name string) {
		if p := spec.Programs[name]; p != nil {
			removed[name] = p
			delete(spec.Programs, name)
		}
	}
	fexit, direct := spec.Programs[fentryProgCtFexitSys], spec.Programs[fentryProgCtFexitSysDirect]
	if hook == hookFentry && (plan == nil || fexit == nil || direct == nil) {
		return nil, errors.New("fentry hook without its plan or programs")
	}
	for id, nr := range syscallNumbers {
		if id == int(bpfSyscallIdSC_NONE) {
			continue
		}
		fn := fentryFunc(id)
		entry, exit := "ct_fentry_"+fn, "ct_fexit_"+fn
		delete(spec.Programs, exit) // a copy, made below
		if hook != hookFentry || nr < 0 {
			drop(entry)
			continue
		}
		p := spec.Programs[entry]
		if p == nil {
			return nil, fmt.Errorf("BPF object lacks program %s", entry)
		}
		p.AttachTo = syscallFunc(fn)
		e := fexit.Copy()
		if plan.direct[fn] {
			e = direct.Copy()
		}
		e.Name, e.AttachTo = exit, syscallFunc(fn) // the kernel keeps 15 bytes of a name
		spec.Programs[exit] = e
	}
	drop(fentryProgCtFexitSys)
	drop(fentryProgCtFexitSysDirect)
	if hook == hookFentry {
		for _, name := range rawProgs {
			drop(name)
		}
		spec.Programs[fentryProgCtFexitCommon].AttachTo = syscallFunc(plan.common)
	} else {
		drop(fentryProgCtFexitSeccomp)
		drop(fentryProgCtFexitCommon)
	}
	return removed, nil
}

// hookProgs are the loaded syscall programs in the order they attach: every
// exit before its entry, so that every call begun is also finished.
func hookProgs(coll *ebpf.Collection) []string {
	if coll.Programs[bpfProgCtSysEnter] != nil {
		return []string{bpfProgCtSysExit, bpfProgCtSysEnter}
	}
	names := slices.Sorted(maps.Keys(coll.Programs))
	progs := []string{fentryProgCtFexitSeccomp}
	for _, prefix := range []string{"ct_fexit", "ct_fentry_"} {
		for _, name := range names {
			if strings.HasPrefix(name, prefix) && name != fentryProgCtFexitSeccomp && name != fentryProgCtFexitCommon {
				progs = append(progs, name)
			}
		}
	}
	return progs
}
