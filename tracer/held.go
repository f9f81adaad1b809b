package tracer

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
)

// HeldNoteSuffix ends each of HeldDeviceNotes' notes: the analysis finds
// them in a report's notes by it.
const HeldNoteSuffix = ", held before the attach"

// HeldDeviceNotes lists the NVIDIA device fds in an fd directory
// (/proc/PID/fd, or a live thread's /proc/PID/task/TID/fd when the leader is
// a zombie) when an attach begins: their opens are not in the trace, yet
// the ioctls on them are, so the report says where those fds came from.
// Both backends use it, so their notes match word for word.
func HeldDeviceNotes(fdDir string, majors []uint32) []string {
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil // gone meanwhile: its exit is traced
	}
	fds := make([]int, 0, len(ents))
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, fd)
		}
	}
	sort.Ints(fds)
	var notes []string
	for _, fd := range fds {
		name := fdDir + "/" + strconv.Itoa(fd)
		// From the cached attributes: a stat that syncs would ask a FUSE
		// server, which the target may run and stall (ptrace's fdStat).
		var st unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, name, unix.AT_STATX_DONT_SYNC, unix.STATX_TYPE|unix.STATX_MODE, &st) != nil ||
			st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		path, _ := os.Readlink(name)
		major, minor := st.Rdev_major, st.Rdev_minor
		if !slices.Contains(majors, major) && !nvfile.IsNode(path) {
			continue
		}
		notes = append(notes, fmt.Sprintf("fd %d → %s (c %d:%d)%s", fd, path, major, minor, HeldNoteSuffix))
	}
	return notes
}
