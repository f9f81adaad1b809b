package ptrace

import "github.com/cudatrace/cudatrace/internal/procfs"

// seccompFilters is how many seccomp filters task tid runs under
// (Seccomp_filters, Linux 5.9+; before it, 1 for "Seccomp: 2").
func seccompFilters(tid int) int {
	st, err := procfs.ReadStatus(tid)
	if err != nil {
		return 0
	}
	if n, ok := st.Int("Seccomp_filters"); ok {
		return n
	}
	if mode, _ := st.Int("Seccomp"); mode == 2 {
		return 1
	}
	return 0
}
