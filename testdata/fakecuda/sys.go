package main

import (
	"fmt"
	"io"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/sysabi"
)

// sys issues raw syscalls and, with -v, logs each one strace-style so a test
// failure can be compared with what the tracer recorded.
type sys struct {
	log io.Writer // nil: quiet
	// beforeWrite runs before the first call that changes /dev (unlink,
	// symlink, mknod): the check that it is not the host's. An error
	// fails that call and the later ones without issuing them.
	beforeWrite func() error
	writeErr    error
	// noIoctls: issue no ioctl, as if each had worked (--no-ioctls).
	noIoctls bool
}

func (s *sys) writing() error {
	if s.beforeWrite != nil {
		s.writeErr = s.beforeWrite()
		s.beforeWrite = nil
	}
	return s.writeErr
}

func (s *sys) logf(format string, args ...any) {
	if s.log == nil {
		return
	}
	fmt.Fprintf(s.log, "[%d] %s\n", unix.Gettid(), fmt.Sprintf(format, args...))
}

func result(ret int, err error) string {
	if err != nil {
		if e, ok := err.(unix.Errno); ok {
			return fmt.Sprintf("-1 %s (%v)", unix.ErrnoName(e), e)
		}
		return "-1 (" + err.Error() + ")"
	}
	return fmt.Sprint(ret)
}

func (s *sys) openat(path string, flags int) (int, error) {
	fd, err := unix.Openat(unix.AT_FDCWD, path, flags, 0)
	s.logf("openat(AT_FDCWD, %q, %s) = %s", path, openFlags(flags), result(fd, err))
	return fd, err
}

func (s *sys) close(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

func (s *sys) stat(path string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	err := rawStat(path, &st)
	if err != nil {
		s.logf("%s(%q) = %s", statName, path, result(0, err))
		return nil, err
	}
	s.logf("%s(%q, {st_mode=%#o, st_rdev=%d:%d}) = 0", statName, path, st.Mode,
		unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	return &st, nil
}

func (s *sys) access(path string, mode uint32) error {
	err := rawAccess(path, mode)
	s.logf("%s(%q, %d) = %s", accessName, path, mode, result(0, err))
	return err
}

func (s *sys) unlink(path string) error {
	if err := s.writing(); err != nil {
		return err
	}
	err := rawUnlink(path)
	s.logf("%s(%q) = %s", unlinkName, path, result(0, err))
	return err
}

func (s *sys) symlink(target, link string) error {
	if err := s.writing(); err != nil {
		return err
	}
	err := rawSymlink(target, link)
	s.logf("%s(%q, %q) = %s", symlinkName, target, link, result(0, err))
	return err
}

func (s *sys) mknodat(path string, mode uint32, major, minor uint32) error {
	if err := s.writing(); err != nil {
		return err
	}
	err := unix.Mknodat(unix.AT_FDCWD, path, mode, int(unix.Mkdev(major, minor)))
	s.logf("mknodat(AT_FDCWD, %q, %#o, makedev(%d, %d)) = %s", path, mode, major, minor, result(0, err))
	return err
}

// ioctl passes a zeroed parameter block of the size encoded in the request,
// as libcuda passes its own structs.
func (s *sys) ioctl(fd int, req uint32) error {
	if s.noIoctls {
		return nil
	}
	size := (req >> 16) & 0x3fff
	var arg uintptr
	if size > 0 {
		buf := make([]byte, size)
		arg = uintptr(unsafe.Pointer(&buf[0]))
		defer keepAlive(buf)
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	var err error
	if e != 0 {
		err = e
	}
	s.logf("ioctl(%d, %#x) = %s", fd, req, result(0, err))
	return err
}

//go:noinline
func keepAlive([]byte) {}

func (s *sys) memfdCreate(name string) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	s.logf("memfd_create(%q, MFD_CLOEXEC) = %s", name, result(fd, err))
	return fd, err
}

func openFlags(flags int) string { return sysabi.OpenFlagsString(uint64(flags)) }
