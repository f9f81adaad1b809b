package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Spec is what Exec sets on the process before it becomes the target.
type Spec struct {
	Deny []Deny
	// NotifySocket, when set, makes the denied calls SECCOMP_RET_USER_NOTIF:
	// the filter's listener fd is handed to the Supervisor listening on this
	// unix socket, which answers every call with EPERM. Empty: the filter
	// returns SECCOMP_RET_ERRNO(EPERM) itself.
	NotifySocket string
	// NoFile, when non-zero, is RLIMIT_NOFILE (soft and hard, as a container
	// runtime sets it). The target cannot raise it.
	NoFile uint64
	// AS, when non-zero, is RLIMIT_AS in bytes (soft and hard): CUDA's
	// virtual address reservations then fail.
	AS uint64
	// ViaPrctl installs the filter with prctl(PR_SET_SECCOMP,
	// SECCOMP_MODE_FILTER), as older libseccomp and some sandboxes do, rather
	// than seccomp(2). It cannot make a USER_NOTIF listener.
	ViaPrctl bool
	// Action names what the filter does to a denied call (ParseAction; ""
	// is EPERM). NotifySocket excludes it.
	Action string
}

// Exec applies spec to this process and execs argv[0] (looked up in PATH)
// with the current environment. It returns only when something failed.
func Exec(spec Spec, argv []string) error {
	if len(argv) == 0 {
		return errors.New("no command")
	}
	// Filters and no_new_privs belong to the thread that sets them: set them
	// on the one that calls execve.
	runtime.LockOSThread()
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	if len(spec.Deny) > 0 {
		if err := install(spec); err != nil {
			return err
		}
	}
	if spec.NoFile > 0 {
		// The limit is to count the target's own fds: one its starter
		// leaked (flock(1)'s lock fd, a CI runner's pipe) would shift every
		// result by one.
		if err := cloexecInherited(); err != nil {
			return err
		}
		// syscall.Setrlimit, not unix.Prlimit: the Go runtime raised the soft
		// limit at start and would restore the old one at exec unless told.
		lim := syscall.Rlimit{Cur: spec.NoFile, Max: spec.NoFile}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return fmt.Errorf("set RLIMIT_NOFILE to %d: %w", spec.NoFile, err)
		}
	}
	if spec.AS > 0 {
		lim := unix.Rlimit{Cur: spec.AS, Max: spec.AS}
		if err := unix.Setrlimit(unix.RLIMIT_AS, &lim); err != nil {
			return fmt.Errorf("set RLIMIT_AS to %d: %w", spec.AS, err)
		}
	}
	return syscall.Exec(path, argv, os.Environ())
}

func install(spec Spec) error {
	// SECCOMP_RET_KILL_THREAD is 0: the name, not the value, says "unset".
	action, err := ParseAction(spec.Action)
	if err != nil {
		return err
	}
	var flags uintptr
	var sock int = -1
	if spec.NotifySocket != "" && (spec.ViaPrctl || spec.Action != "") {
		return errors.New("a USER_NOTIF listener needs seccomp(2), not prctl, and no other action")
	}
	if spec.NotifySocket != "" {
		action, flags = unix.SECCOMP_RET_USER_NOTIF, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
		// Connect before the filter exists: the filter may refuse what
		// connecting needs.
		if sock, err = connect(spec.NotifySocket); err != nil {
			return err
		}
		defer func() { _ = unix.Close(sock) }() // best-effort cleanup: nothing to do if it fails
	}
	prog := Filter(spec.Deny, action)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	load := func() (uintptr, syscall.Errno) {
		if spec.ViaPrctl {
			_, _, errno := unix.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)))
			return 0, errno
		}
		r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
		return r, errno
	}
	fd, errno := load()
	if errno == unix.EACCES {
		// Without CAP_SYS_ADMIN a filter needs no_new_privs.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
		fd, errno = load()
	}
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	if sock < 0 {
		return nil
	}
	defer func() { _ = unix.Close(int(fd)) }() // best-effort cleanup: nothing to do if it fails
	if err := unix.Sendmsg(sock, []byte{0}, unix.UnixRights(int(fd)), nil, 0); err != nil {
		return fmt.Errorf("hand the seccomp listener to %s: %w", spec.NotifySocket, err)
	}
	// Wait until the supervisor holds it, so that no call waits on nobody.
	var ack [1]byte
	if n, err := unix.Read(sock, ack[:]); n != 1 {
		return fmt.Errorf("seccomp supervisor at %s did not answer: %v", spec.NotifySocket, err)
	}
	return nil
}

func connect(path string) (int, error) {
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(sock, &unix.SockaddrUnix{Name: path}); err != nil {
		_ = unix.Close(sock) // best-effort cleanup: nothing to do if it fails
		return -1, fmt.Errorf("connect to seccomp supervisor %s: %w", path, err)
	}
	return sock, nil
}

// cloexecInherited marks every fd above stderr close-on-exec.
func cloexecInherited() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		// The directory's own fd is gone by now; EBADF for it is expected.
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
				return fmt.Errorf("fd %d: %w", fd, err)
			}
		}
	}
	return nil
}
