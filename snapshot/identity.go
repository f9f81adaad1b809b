package snapshot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Identity is what cudatrace watch reads of a process when it first sees
// it: enough to filter it and to name it in a diagnosis line, read before
// any snapshot work.
type Identity struct {
	Cgroup string   // the unified cgroup path (v1: the first hierarchy's)
	Argv   []string // the command line, as far as maxArgvBytes; empty for a zombie
	// UID is the effective user ID (-1 unknown): a zombie's status still
	// has it, when its snapshot can no longer be taken.
	UID int64
}

// maxArgvBytes bounds the command line kept: the target chooses it.
const maxArgvBytes = 4096

// TargetIdentity reads process pid's cgroup and command line: two small
// bounded reads under the guard, for a process that may exit any moment.
func TargetIdentity(pid int) (Identity, error) {
	g := &fsGuard{timeout: fsTimeout, what: "system files"}
	id := Identity{UID: -1}
	text, err := g.readString(fmt.Sprintf("/proc/%d/cgroup", pid), maxFileSize)
	if err != nil {
		return id, err
	}
	id.Cgroup = CgroupPathOf(text)
	cmdline, err := g.readFile(fmt.Sprintf("/proc/%d/cmdline", pid), maxArgvBytes)
	if err == nil || errors.Is(err, errTooLarge) {
		id.Argv = splitCmdline(cmdline)
	}
	if status, err := g.readString(fmt.Sprintf("/proc/%d/status", pid), maxFileSize); err == nil {
		id.UID = effectiveUID(status)
	}
	return id, nil
}

// CgroupPathOf picks a process's cgroup path out of its /proc/PID/cgroup
// text: the unified (v2) line's, else the first hierarchy's.
func CgroupPathOf(text string) string {
	lines := parseCgroupFile(text)
	for _, l := range lines {
		if l.Hierarchy == "0" && len(l.Controllers) == 0 {
			return l.Path
		}
	}
	if len(lines) > 0 {
		return lines[0].Path
	}
	return ""
}

// ContainerFromCgroupPath says which container one cgroup path names, from
// the path alone (kubepods pod UID and container ID, docker, podman, LXC,
// a systemd unit); DetectContainer also looks at the PID namespace's init.
func ContainerFromCgroupPath(path string) Container { return containerFromPath(path) }

// splitCmdline splits NUL-separated argv, keeping at most maxArgvBytes.
func splitCmdline(data []byte) []string {
	if len(data) > maxArgvBytes {
		data = data[:maxArgvBytes]
	}
	s := strings.TrimSuffix(string(data), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// effectiveUID is the second field of status's Uid: line, or -1.
func effectiveUID(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) >= 2 {
				if uid, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					return uid
				}
			}
		}
	}
	return -1
}
