//go:build !amd64

package main

import "golang.org/x/sys/unix"

// Architectures such as arm64 have no legacy stat/access/unlink/symlink
// syscalls; libcuda uses the *at forms there, and so does this program.

const (
	statName    = "newfstatat"
	accessName  = "faccessat"
	unlinkName  = "unlinkat"
	symlinkName = "symlinkat"
)

func rawStat(path string, st *unix.Stat_t) error {
	return unix.Fstatat(unix.AT_FDCWD, path, st, 0)
}

func rawAccess(path string, mode uint32) error {
	return unix.Faccessat(unix.AT_FDCWD, path, mode, 0)
}

func rawUnlink(path string) error {
	return unix.Unlinkat(unix.AT_FDCWD, path, 0)
}

func rawSymlink(target, link string) error {
	return unix.Symlinkat(target, unix.AT_FDCWD, link)
}
