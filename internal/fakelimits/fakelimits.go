// Package fakelimits is a target's workload for the tests of the calls a
// resource limit fails (tracer.KindLimit): the fd and address-space calls
// libcuda makes besides its device nodes, failed by a limit, then the same
// calls succeeding, which no backend may send.
package fakelimits

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Rounds is how often Run makes each failing call.
const Rounds = 5

// Want are the calls Run fails, as "syscall ERRNO", sorted.
var Want = []string{"eventfd2 EMFILE", "mmap ENOMEM", "pipe2 EMFILE", "socket EMFILE", "socketpair EMFILE"}

// Run makes, Rounds times, an eventfd, pipe, socket and socketpair under
// RLIMIT_NOFILE 0 (each fails EMFILE) and a mapping larger than any
// address space (ENOMEM); then, with the limit restored, a successful
// eventfd and mmap.
func Run() error {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		return err
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 0, Max: old.Max}); err != nil {
		return err
	}
	var p [2]int
	for range Rounds {
		for _, call := range []func() error{
			func() error { _, err := unix.Eventfd(0, 0); return err },
			func() error { return unix.Pipe2(p[:], 0) },
			func() error { _, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0); return err },
			func() error { _, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0); return err },
		} {
			if err := call(); !errors.Is(err, unix.EMFILE) {
				return fmt.Errorf("under RLIMIT_NOFILE 0: %v, want EMFILE", err)
			}
		}
		if _, err := unix.Mmap(-1, 0, 1<<50, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); !errors.Is(err, unix.ENOMEM) {
			return fmt.Errorf("1 PiB mmap: %v, want ENOMEM", err)
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		return err
	}
	fd, err := unix.Eventfd(0, 0)
	if err != nil {
		return err
	}
	_ = unix.Close(fd) // an eventfd: nothing to lose
	m, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	return unix.Munmap(m)
}
