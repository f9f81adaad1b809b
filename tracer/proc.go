package tracer

import (
	"fmt"
	"os"
	"strconv"

	"github.com/cudatrace/cudatrace/internal/procfs"
)

// CheckAttachable says in one line why pid cannot be attached to: it is
// gone, a kernel thread, or a zombie whose threads have all exited. A
// process whose main thread exited while others run on is attachable.
func CheckAttachable(pid int) error {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return fmt.Errorf("no such process: %d", pid)
	}
	if st.Flags&procfs.PFKthread != 0 {
		return fmt.Errorf("PID %d is a kernel thread (%s): it makes no system calls to trace", pid, strconv.Quote(st.Comm))
	}
	if st.Gone() && !LiveThreads(pid) {
		return fmt.Errorf("process %d has exited (a zombie its parent has not reaped): nothing to trace", pid)
	}
	return nil
}

// LiveThreads reports whether any thread of process pid has not exited
// (the leader may have, as a zombie).
func LiveThreads(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile(dir + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if st, err := procfs.ParseStat(string(b)); err == nil && !st.Gone() {
			return true
		}
	}
	return false
}
