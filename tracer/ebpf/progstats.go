package ebpf

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// runStats, with --debug, turns on the kernel's BPF run-time statistics
// (BPF_ENABLE_STATS: on while the fd is open, for every program on the
// host, so only when asked) and says at the end what each program cost:
// the per-call figure the tracing overhead is made of.
type runStats struct {
	enabled io.Closer
	lines   []string
}

func startRunStats(on bool) *runStats {
	if !on {
		return nil
	}
	c, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return &runStats{lines: []string{fmt.Sprintf("program statistics unavailable: %v", err)}}
	}
	return &runStats{enabled: c}
}

// collect reads every program's counters; call it before the programs
// are closed.
func (r *runStats) collect(progs map[string]*ebpf.Program) {
	if r == nil || r.enabled == nil {
		return
	}
	names := make([]string, 0, len(progs))
	for name := range progs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		st, err := progs[name].Stats()
		if err != nil || st.RunCount == 0 {
			continue
		}
		r.lines = append(r.lines, fmt.Sprintf("%s %d runs %d ns/run",
			name, st.RunCount, st.Runtime.Nanoseconds()/int64(st.RunCount)))
	}
	_ = r.enabled.Close() // best-effort cleanup: nothing to do if it fails
	r.enabled = nil
}

func (r *runStats) String() string {
	if r == nil || len(r.lines) == 0 {
		return ""
	}
	return "programs: " + strings.Join(r.lines, ", ")
}
