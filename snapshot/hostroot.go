package snapshot

import (
	"golang.org/x/sys/unix"
)

// PID 1's mount namespace and root (tests point them elsewhere: a sandbox
// may deny access to its init's).
var (
	initMountNS = "/proc/1/ns/mnt"
	initRoot    = "/proc/1/root"
)

// hostRootDir is where the host's own files (/lib/firmware, /boot, CDI
// specs, container configs) are read: "/", except where cudatrace runs in a
// mount namespace other than PID 1's, as in a pod with hostPID, whose "/"
// is the image: there PID 1's root is the host's. Every read under it
// resolves inside it (openat2 RESOLVE_IN_ROOT), under the guard's deadline.
func hostRootDir() string {
	if !otherNamespace("/proc/self/ns/mnt", initMountNS) {
		return "/"
	}
	fd, err := unix.Open(initRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "/" // not ours to read (no CAP_SYS_PTRACE): the image's files, as before
	}
	_ = unix.Close(fd) // O_PATH: nothing to lose
	return initRoot
}

// otherNamespace reports whether the namespace files self and init (as
// /proc/PID/ns/KIND) name different namespaces; unreadable is no.
func otherNamespace(self, init string) bool {
	var a, b unix.Stat_t
	if unix.Stat(self, &a) != nil || unix.Stat(init, &b) != nil {
		return false
	}
	return a.Ino != b.Ino || a.Dev != b.Dev
}

// statInRoot describes name inside root, following symlinks inside it.
func (g *fsGuard) statInRoot(root, name string) (unix.Stat_t, error) {
	return guarded(g, func() (unix.Stat_t, error) {
		var st unix.Stat_t
		h, err := openInRoot(root, name)
		if err != nil {
			return st, err
		}
		defer func() { _ = h.Close() }() // read-only: a failed close loses nothing
		err = unix.Fstat(int(h.Fd()), &st)
		return st, err
	})
}
