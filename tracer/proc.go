package tracer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// pfKthread is PF_KTHREAD in /proc/PID/stat's flags (include/linux/sched.h).
const pfKthread = 0x00200000

// procStat is what both backends need from /proc/PID/stat before an attach.
type procStat struct {
	comm  string
	state byte
	flags uint64
}

func readProcStat(path string) (procStat, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, false
	}
	// pid (comm) state ppid pgrp session tty tpgid flags ...; comm may hold
	// anything, parentheses included.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 7 || len(f[0]) != 1 {
		return procStat{}, false
	}
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	return procStat{comm: s[open+1 : end], state: f[0][0], flags: flags}, true
}

// CheckAttachable says in one line why pid cannot be attached to: it is
// gone, a kernel thread, or a zombie whose threads have all exited. A
// process whose main thread exited while others run on is attachable.
func CheckAttachable(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid)
	st, ok := readProcStat(dir + "/stat")
	if !ok {
		return fmt.Errorf("no such process: %d", pid)
	}
	if st.flags&pfKthread != 0 {
		return fmt.Errorf("PID %d is a kernel thread (%s): it makes no system calls to trace", pid, strconv.Quote(st.comm))
	}
	if (st.state == 'Z' || st.state == 'X') && !LiveThreads(pid) {
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
		if st, ok := readProcStat(dir + e.Name() + "/stat"); ok && st.state != 'Z' && st.state != 'X' {
			return true
		}
	}
	return false
}
