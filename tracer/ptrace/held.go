package ptracetrace

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// heldDeviceNotes lists the NVIDIA device files process pid holds when the
// attach begins: their opens are not in the trace, yet its ioctls on them
// are, so the report says where those fds came from. The wording is the
// eBPF backend's. A zombie leader has no files left: a live thread's fd
// table (the process's, unless that thread unshared it) is read instead.
func (s *session) heldDeviceNotes(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	if s.zombieLeaders[pid] {
		for _, t := range s.tasks {
			if t.tgid == pid && t.tid != pid {
				dir = "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(t.tid) + "/fd/"
				break
			}
		}
	}
	ents, err := os.ReadDir(dir)
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
		name := dir + strconv.Itoa(fd)
		var st unix.Stat_t
		if unix.Stat(name, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		path, _ := os.Readlink(name)
		major, minor := unix.Major(st.Rdev), unix.Minor(st.Rdev)
		if !s.rules.majors[major] && !strings.HasPrefix(path, "/dev/nvidia") {
			continue
		}
		notes = append(notes, fmt.Sprintf("fd %d → %s (c %d:%d), held before the attach", fd, path, major, minor))
	}
	return notes
}
