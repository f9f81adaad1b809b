package main

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// libcuda on x86-64 uses the legacy path syscalls (stat, access, unlink,
// symlink), not their *at forms; x/sys/unix maps those helpers onto the *at
// syscalls, so they are issued raw here to match the recordings.

const (
	statName    = "stat"
	accessName  = "access"
	unlinkName  = "unlink"
	symlinkName = "symlink"
)

func errno(e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func rawStat(path string, st *unix.Stat_t) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_STAT, uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(st)), 0)
	return errno(e)
}

func rawAccess(path string, mode uint32) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_ACCESS, uintptr(unsafe.Pointer(p)), uintptr(mode), 0)
	return errno(e)
}

func rawUnlink(path string) error {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_UNLINK, uintptr(unsafe.Pointer(p)), 0, 0)
	return errno(e)
}

func rawSymlink(target, link string) error {
	t, err := unix.BytePtrFromString(target)
	if err != nil {
		return err
	}
	l, err := unix.BytePtrFromString(link)
	if err != nil {
		return err
	}
	_, _, e := unix.Syscall(unix.SYS_SYMLINK, uintptr(unsafe.Pointer(t)), uintptr(unsafe.Pointer(l)), 0)
	return errno(e)
}
