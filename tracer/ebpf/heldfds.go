package ebpf

import (
	"strconv"

	"github.com/cudatrace/cudatrace/tracer"
)

// heldDeviceNotes lists the device fds a process held when we attached.
func heldDeviceNotes(pid int, majors []uint32) []string {
	return tracer.HeldDeviceNotes("/proc/"+strconv.Itoa(pid)+"/fd", majors)
}
