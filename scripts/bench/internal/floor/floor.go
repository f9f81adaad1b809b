// Package floor attaches BPF programs that return at once to the syscall
// tracepoints, the way cudatrace attaches its dispatchers (BTF-typed raw
// tracepoints): what a syscall then pays is the hook's own cost, the part
// of the tracing overhead no change to cudatrace's programs can remove
// (issue 19's "floor").
package floor

import (
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// Prefix starts the programs' names (bpfstats selects them by it; the
// leftover checks find them by "ct_").
const Prefix = "ct_floor"

// Attach puts a "return 0" program on sys_enter and on sys_exit; the
// returned func detaches both.
func Attach() (func(), error) {
	var links []link.Link
	closeAll := func() {
		for _, l := range links {
			_ = l.Close() // best effort: the link goes with the process anyway
		}
	}
	for _, tp := range []string{"enter", "exit"} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         Prefix + "_" + tp,
			Type:         ebpf.Tracing,
			AttachType:   ebpf.AttachTraceRawTp,
			AttachTo:     "sys_" + tp,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			closeAll()
			return nil, err
		}
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		_ = prog.Close() // the link holds it
		if err != nil {
			closeAll()
			return nil, err
		}
		links = append(links, l)
	}
	return closeAll, nil
}
