package snapshot

import (
	"errors"
	"fmt"
	"strings"
)

// Identity is what cudatrace watch reads of a process when it first sees
// it: enough to filter it and to name it in a diagnosis line, read before
// any snapshot work.
type Identity struct {
	Cgroup string   // the unified cgroup path (v1: the first hierarchy's)
	Argv   []string // the command line, as far as maxArgvBytes
}

// maxArgvBytes bounds the command line kept: the target chooses it.
const maxArgvBytes = 4096

// TargetIdentity reads process pid's cgroup and command line: two small
// bounded reads under the guard, for a process that may exit any moment.
func TargetIdentity(pid int) (Identity, error) {
	g := &fsGuard{timeout: fsTimeout, what: "system files"}
	var id Identity
	text, err := g.readString(fmt.Sprintf("/proc/%d/cgroup", pid), maxFileSize)
	if err != nil {
		return id, err
	}
	id.Cgroup = CgroupPathOf(text)
	cmdline, err := g.readFile(fmt.Sprintf("/proc/%d/cmdline", pid), maxArgvBytes)
	if err == nil || errors.Is(err, errTooLarge) {
		id.Argv = splitCmdline(cmdline)
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
