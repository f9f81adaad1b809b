package snapshot

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Identity is what cudatrace watch reads of a process when it first sees
// it (and a failure snapshot at the failure): enough to filter it and to
// name it in a diagnosis line, read before any snapshot work. A snapshot
// that finds the process gone uses it (Options.Identity).
type Identity struct {
	PID    int
	Cgroup string   // the unified cgroup path (v1: the first hierarchy's)
	Argv   []string // the command line, as far as maxArgvBytes; empty for a zombie
	// UID is the effective user ID (-1 unknown): a zombie's status still
	// has it, when its snapshot can no longer be taken.
	UID int64
	// SameRoot: its root was cudatrace's own (the same mount namespace
	// and root, or a copy of that namespace whose / is the same file
	// system and subtree), so cudatrace's /etc/passwd names its users.
	SameRoot bool
	// RootKnown: SameRoot could be told (not for a zombie, whose
	// namespaces are gone).
	RootKnown bool
	// Env is what a report keeps of its environment (DiagnosticEnv), as
	// the image it runs set it: a process that exits right after CUDA
	// fails may be gone before any later read (CUDA_VISIBLE_DEVICES may be
	// the cause).
	Env map[string]string
	// CgroupAtCall: its unified cgroup is the one the kernel recorded at a
	// traced call (InCgroupV2), not one read from /proc.
	CgroupAtCall bool
	// Limits are its resource limits at that read (its first event or
	// last exec): a process CUDA fails for lack of address space or fds
	// often exits before the failure's snapshot can read them.
	Limits *Limits
	// cgroups is its /proc/PID/cgroup text: every hierarchy's path, so a
	// snapshot reads the device policy as it would for the live process.
	cgroups string
}

// maxArgvBytes bounds the command line kept: the target chooses it.
const maxArgvBytes = 4096

// TargetIdentity reads process pid's cgroup and command line: two small
// bounded reads under the guard, for a process that may exit any moment.
func TargetIdentity(pid int) (Identity, error) {
	g := &fsGuard{timeout: fsTimeout, what: "system files"}
	id := Identity{PID: pid, UID: -1}
	text, err := g.readString(fmt.Sprintf("/proc/%d/cgroup", pid), maxFileSize)
	if err != nil {
		return id, err
	}
	id.Cgroup = CgroupPathOf(text)
	if len(text) <= maxCgroupBytes {
		id.cgroups = text
	}
	cmdline, err := g.readFile(fmt.Sprintf("/proc/%d/cmdline", pid), maxArgvBytes)
	if err == nil || errors.Is(err, errTooLarge) {
		id.Argv = MaskArgv(splitCmdline(cmdline))
	}
	if status, err := g.readString(fmt.Sprintf("/proc/%d/status", pid), maxFileSize); err == nil {
		id.UID = effectiveUID(status)
	}
	id.SameRoot, id.RootKnown = sameRoot(g, "/proc", pid)
	if env, err := readDiagnosticEnv(g, pid); err == nil {
		id.Env = env
	}
	if text, err := g.readString(fmt.Sprintf("/proc/%d/limits", pid), maxFileSize); err == nil {
		id.Limits = parseLimits(text)
	}
	return id, nil
}

// maxCgroupBytes bounds the /proc/PID/cgroup text kept per process: a
// dozen v1 hierarchies with long paths fit.
const maxCgroupBytes = 16 << 10

// sameRoot is whether process pid's root is cudatrace's own, from links
// and mount tables only: nothing under its root is opened (a file system
// it controls could hang). In the same mount namespace the root link says
// it ("/" unless chrooted); in another, its / mount must be the same file
// system and subtree as cudatrace's (a copy made by unshare --mount, not a
// container's own root). known is false when that cannot be told (a
// zombie's namespaces are gone).
func sameRoot(g *fsGuard, proc string, pid int) (same, known bool) {
	dir := fmt.Sprintf("%s/%d", proc, pid)
	theirs, err1 := os.Readlink(dir + "/ns/mnt")
	mine, err2 := os.Readlink(proc + "/self/ns/mnt")
	if err1 != nil || err2 != nil {
		return false, false
	}
	if theirs == mine {
		root, err := os.Readlink(dir + "/root")
		return err == nil && root == "/", err == nil
	}
	their, err1 := g.readString(dir+"/mountinfo", maxFileSize)
	own, err2 := g.readString(proc+"/self/mountinfo", maxFileSize)
	if err1 != nil || err2 != nil {
		return false, false
	}
	a, okA := rootMount(their)
	b, okB := rootMount(own)
	return okA && okB && a == b, okA && okB
}

// rootMount identifies the mount seen at / in a mountinfo text (the last
// one listed there covers the others): its device and its root within it.
func rootMount(text string) (string, bool) {
	found, id := false, ""
	for _, in := range parseMountinfo(text) {
		if in.Mountpoint == "/" {
			found, id = true, fmt.Sprintf("%d:%d %s", in.Major, in.Minor, in.Root)
		}
	}
	return id, found
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
