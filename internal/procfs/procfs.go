// Package procfs is cudatrace's one parser of /proc/PID/stat and
// /proc/PID/status (proc(5)), shared by the snapshot, both tracers and the
// command. The parsers are pure; Read* read the live files.
package procfs

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// Stat is what cudatrace uses of /proc/PID/stat.
type Stat struct {
	PID   int
	Comm  string // as the kernel shows it, up to 15 bytes; may hold spaces and parentheses
	State byte   // R, S, D, Z, X, ...
	PPID  int
	Flags uint64 // the kernel's PF_* flags (include/linux/sched.h)
}

// PFKthread is PF_KTHREAD in Stat.Flags: a kernel thread.
const PFKthread = 0x00200000

// Gone reports whether the process is a zombie or dead.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

var errStat = errors.New("malformed /proc stat line")

// ParseStat parses one /proc/PID/stat line: "pid (comm) state ppid ...".
// The comm is whatever the process named itself, so the fields after it
// are found from the last ')'.
func ParseStat(line string) (Stat, error) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return Stat{}, errStat
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return Stat{}, errStat
	}
	f := strings.Fields(line[end+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return Stat{}, errStat
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, errStat
	}
	st := Stat{PID: pid, Comm: line[open+1 : end], State: f[0][0], PPID: ppid}
	// state ppid pgrp session tty_nr tpgid flags: flags is the seventh.
	if len(f) > 6 {
		st.Flags, _ = strconv.ParseUint(f[6], 10, 64)
	}
	return st, nil
}

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(string(b))
}

// Status is /proc/PID/status: each "Key:\tvalue" line, the value trimmed.
type Status map[string]string

// ParseStatus parses /proc/PID/status text. Lines without a colon are
// skipped.
func ParseStatus(text string) Status {
	st := Status{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			st[k] = strings.TrimSpace(v)
		}
	}
	return st
}

// ReadStatus reads /proc/PID/status (or a thread's, with its TID).
func ReadStatus(pid int) (Status, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	return ParseStatus(string(b)), nil
}

// Int is a decimal field (Tgid, TracerPid, Seccomp).
func (s Status) Int(key string) (int, bool) {
	n, err := strconv.Atoi(s[key])
	return n, err == nil
}

// Hex is a hexadecimal field (CapEff, CapBnd).
func (s Status) Hex(key string) (uint64, bool) {
	n, err := strconv.ParseUint(s[key], 16, 64)
	return n, err == nil
}

// Uints is a field of decimal numbers (Uid, Gid, Groups, NSpid); numbers
// that do not parse are skipped.
func (s Status) Uints(key string) []uint32 {
	var out []uint32
	for _, f := range strings.Fields(s[key]) {
		if v, err := strconv.ParseUint(f, 10, 32); err == nil {
			out = append(out, uint32(v))
		}
	}
	return out
}
