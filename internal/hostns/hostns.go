// Package hostns puts cudatrace in the cgroup namespace of the PID
// namespace's init when it runs in one of its own: a DaemonSet pod with
// hostPID sees the host's processes, but its container runtime gave it a
// private cgroup namespace, in which the kernel writes every other
// process's /proc/PID/cgroup relative to the pod's own cgroup
// ("0::/../../kubepods.slice/..."). Joined to init's namespace, those paths
// are the host's, as the snapshot and the diagnosis lines need them.
package hostns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

const procRoot = "/proc"

// initNS is the namespace to join: PID 1's (tests point it at another
// process's, since a sandbox may deny access to its init's).
var initNS = procRoot + "/1/ns/cgroup"

// Differs reports whether this process's cgroup namespace is another than
// PID 1's (in this PID namespace). Unreadable means no (nothing to join).
func Differs() bool {
	var self, init unix.Stat_t
	if unix.Stat(procRoot+"/self/ns/cgroup", &self) != nil || unix.Stat(initNS, &init) != nil {
		return false
	}
	return self.Ino != init.Ino || self.Dev != init.Dev
}

// JoinInitCgroupNamespace re-executes this program, with the same argv
// bytes and environment, in PID 1's cgroup namespace, when it is in
// another. It returns only if nothing was to be done, or with the reason it
// could not (the caller goes on in its own namespace and says so). A
// cgroup namespace is a thread's; execve keeps the calling thread's, so the
// new image runs wholly in init's. The re-executed program finds the
// namespaces equal and goes on.
func JoinInitCgroupNamespace() error {
	if !Differs() {
		return nil
	}
	own, err := unix.Open(procRoot+"/self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open this process's cgroup namespace: %w", err)
	}
	defer func() { _ = unix.Close(own) }() // a namespace fd: nothing to flush
	init, err := unix.Open(initNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open PID 1's cgroup namespace: %w", err)
	}
	defer func() { _ = unix.Close(init) }() // a namespace fd: nothing to flush
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Setns(init, unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("join PID 1's cgroup namespace: %w", err)
	}
	// /proc/self/exe is this very file even if its path was replaced.
	err = unix.Exec(procRoot+"/self/exe", os.Args, os.Environ())
	// Still here: put this thread back with the others.
	if berr := unix.Setns(own, unix.CLONE_NEWCGROUP); berr != nil {
		panic(fmt.Sprintf("hostns: this thread is left in PID 1's cgroup namespace: %v", berr)) // cannot go on with threads in two namespaces
	}
	return fmt.Errorf("re-execute in PID 1's cgroup namespace: %w", err)
}
