package cgroupdev

import "fmt"

// Program is one BPF_CGROUP_DEVICE program as EvaluateV2 judges it: its
// instructions (raw struct bpf_insn, little endian) and the names its
// errors give. The snapshot reads them from the kernel.
type Program struct {
	ID           uint32
	Name         string
	AttachedTo   string
	Instructions []byte
}

// EvaluateV2 judges req against every program in a cgroup's effective
// BPF_CGROUP_DEVICE array. The kernel runs them all and refuses with EPERM
// if any returns 0, so the verdict is the AND of the programs.
//
// allowed is true only when every program was emulated and allowed req.
// deniedBy lists the programs that denied it. errs has one error per
// program that could not be emulated; with errs and no deniedBy the verdict
// is unknown, not "denied".
func EvaluateV2(progs []Program, req Request) (allowed bool, deniedBy []uint32, errs []error) {
	for _, p := range progs {
		v := Emulate(p.Instructions, req)
		switch {
		case v.Err != nil:
			errs = append(errs, fmt.Errorf("device program %d (%s) attached to %s: %w", p.ID, orDash(p.Name), orDash(p.AttachedTo), v.Err))
		case !v.Allowed:
			deniedBy = append(deniedBy, p.ID)
		}
	}
	return len(deniedBy) == 0 && len(errs) == 0, deniedBy, errs
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
