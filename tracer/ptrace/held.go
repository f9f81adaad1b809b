package ptrace

import (
	"maps"
	"slices"
	"strconv"

	"github.com/cudatrace/cudatrace/tracer"
)

// heldDeviceNotes lists the NVIDIA device files process pid holds when the
// attach begins (tracer.HeldDeviceNotes). A zombie leader has no files
// left: a live thread's fd table (the process's, unless that thread
// unshared it) is read instead.
func (s *session) heldDeviceNotes(pid int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	if s.zombieLeaders[pid] {
		for _, t := range s.tasks {
			if t.tgid == pid && t.tid != pid {
				dir = "/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(t.tid) + "/fd"
				break
			}
		}
	}
	return tracer.HeldDeviceNotes(dir, slices.Collect(maps.Keys(s.rules.majors)))
}
