package ptrace

import (
	"os"
	"strconv"
	"strings"
)

// seccompFilters is how many seccomp filters task tid runs under
// (Seccomp_filters, Linux 5.9+; before it, 1 for "Seccomp: 2").
func seccompFilters(tid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0
	}
	mode := 0
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp_filters:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			mode, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if mode == 2 {
		return 1
	}
	return 0
}
