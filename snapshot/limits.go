package snapshot

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// collectLimits reads the target's RLIMIT_NOFILE, RLIMIT_AS and
// RLIMIT_MEMLOCK and counts its open fds: an EMFILE on a device node is
// explained by the first and the count, cuInit's 2 by the second.
func (c *collector) collectLimits(pidDir string) {
	if text, err := c.fs.readString(filepath.Join(pidDir, "limits"), maxFileSize); err == nil {
		parseLimits(text).fill(&c.snap.Process)
	}
	d, err := os.Open(filepath.Join(pidDir, "fd"))
	if err != nil {
		return
	}
	defer func() { _ = d.Close() }() // read-only: a failed close loses nothing
	// Read in batches, bounded: a process may hold a million fds.
	for n := 0; n < 1<<20; {
		names, err := d.Readdirnames(4096)
		n += len(names)
		c.snap.Process.OpenFDs += len(names)
		if err != nil || len(names) == 0 {
			break
		}
	}
}

// Limits are the resource limits CUDA's failures depend on, as (soft, hard)
// pairs, nil where unread.
type Limits struct {
	NoFile, AS, MemLock *[2]uint64
}

func (l *Limits) fill(p *Process) { p.NoFile, p.AS, p.MemLock = l.NoFile, l.AS, l.MemLock }

// parseLimits reads a /proc/PID/limits text.
func parseLimits(text string) *Limits {
	l := &Limits{}
	for _, f := range []struct {
		name string
		to   **[2]uint64
	}{{"Max open files", &l.NoFile}, {"Max address space", &l.AS}, {"Max locked memory", &l.MemLock}} {
		if soft, hard, ok := parseLimit(text, f.name); ok {
			*f.to = &[2]uint64{soft, hard}
		}
	}
	return l
}

// parseLimit reads one limit's line of /proc/PID/limits ("Max address
// space  SOFT  HARD  bytes").
func parseLimit(text, name string) (soft, hard uint64, ok bool) {
	for _, line := range strings.Split(text, "\n") {
		rest, found := strings.CutPrefix(line, name+" ")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, false
		}
		lim := func(s string) uint64 {
			if s == "unlimited" {
				return ^uint64(0)
			}
			v, _ := strconv.ParseUint(s, 10, 64)
			return v
		}
		return lim(f[0]), lim(f[1]), true
	}
	return 0, 0, false
}
