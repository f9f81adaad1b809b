package diagnose

import (
	"context"
	"errors"
	"fmt"

	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/ebpf"
	"github.com/cudatrace/cudatrace/tracer/ptrace"
)

// ErrUnknownBackend wraps a --backend name that is not auto, ebpf or
// ptrace: a usage error, where any other ChooseBackend error is the host's.
var ErrUnknownBackend = errors.New("unknown backend")

// ChooseBackend implements --backend. auto tells notice in one line why it
// falls back; an explicit choice fails loudly.
func ChooseBackend(name string, notice func(msg string)) (tracer.Backend, error) {
	switch name {
	case "ebpf":
		if err := ebpf.Probe(); err != nil {
			return nil, fmt.Errorf("eBPF backend unavailable: %w", err)
		}
		return ebpf.New(), nil
	case "ptrace":
		if err := ptrace.Probe(); err != nil {
			return nil, fmt.Errorf("ptrace backend unavailable: %w", err)
		}
		return ptrace.New(), nil
	case "auto":
		ebpfErr := ebpf.Probe()
		if ebpfErr == nil {
			return ebpf.New(), nil
		}
		if err := ptrace.Probe(); err != nil {
			return nil, fmt.Errorf("cannot trace: eBPF: %v; ptrace: %w", ebpfErr, err)
		}
		if notice != nil {
			notice(fmt.Sprintf("eBPF unavailable (%v); using ptrace", ebpfErr))
		}
		return ptrace.New(), nil
	}
	return nil, fmt.Errorf("%w %q: use auto, ebpf or ptrace", ErrUnknownBackend, name)
}

// runBackend runs backend; with fallback (--backend auto), an eBPF backend
// that passed its probe but could not load (an older kernel, the verifier)
// gives way to ptrace, provided nothing was traced yet: the target has not
// run, so ptrace can still start it from the beginning.
func runBackend(ctx context.Context, backend tracer.Backend, fallback bool, spec tracer.Spec, sink tracer.Sink, untouched func() bool, notice func(string)) (*tracer.Result, error) {
	res, err := backend.Run(ctx, spec, sink)
	if err == nil || !fallback || backend.Name() != "ebpf" || !errors.Is(err, tracer.ErrUnavailable) || !untouched() {
		return res, err
	}
	if perr := ptrace.Probe(); perr != nil {
		return nil, err
	}
	notice(fmt.Sprintf("eBPF unavailable (%v); using ptrace", err))
	return ptrace.New().Run(ctx, spec, sink)
}
