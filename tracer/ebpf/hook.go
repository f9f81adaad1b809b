package ebpf

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// The syscall programs hang on the raw sys_enter/sys_exit tracepoints,
// which every syscall on the host passes through while they are attached
// (the cost an untraced syscall pays: docs/benchmarks.md). fentry/fexit on
// the traced syscalls' own functions would cost the others nothing, but
// locked-down kernels refuse them (EPERM under lockdown=integrity), so the
// choice is made at run time, by loading a program that does nothing.
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

// chooseSyscallHook says which hook the syscall programs use and why, for
// --debug and the report. Only the raw tracepoints exist so far: with
// fentry allowed it says so, for the day the fentry programs do
// (docs/benchmarks.md has their design).
func chooseSyscallHook(cache *btf.Cache) (hook, why string) {
	if err := probeFentry(cache); err != nil {
		if errors.Is(err, unix.EPERM) {
			// cilium/ebpf's hint about RLIMIT_MEMLOCK does not apply (5.11+).
			return hookRawTracepoint, "fentry refused: EPERM, kernel locked down?"
		}
		return hookRawTracepoint, fmt.Sprintf("fentry refused: %v", err)
	}
	return hookRawTracepoint, "fentry allowed by this kernel, not used yet"
}
