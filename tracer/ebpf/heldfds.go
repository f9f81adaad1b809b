package ebpftrace

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// heldDeviceNotes lists the device fds a process held when we attached:
// their opens happened before the trace, yet its ioctls on them are traced,
// so the report must say where those fds came from.
func heldDeviceNotes(pid int, majors []uint32) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone, or not ours to read: the exit will tell
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
		name := dir + strconv.Itoa(fd)
		var st unix.Stat_t
		if unix.Stat(name, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		path, _ := os.Readlink(name)
		major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		if !slices.Contains(majors, major) && !strings.HasPrefix(path, "/dev/nvidia") {
			continue
		}
		notes = append(notes, fmt.Sprintf("fd %d → %s (c %d:%d), held before the attach", fd, path, major, minor))
	}
	return notes
}
