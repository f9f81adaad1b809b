package analysis

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// A log in which a supervisor installs a filter with a listener
// (SECCOMP_FILTER_FLAG_NEW_LISTENER) before the device open that fails
// EPERM: seccomp is named, not the device cgroup the log cannot show.
func TestSeccompNotifyLogNamesSeccomp(t *testing.T) {
	for _, path := range []string{"/dev/nvidia-uvm", "/dev/nvidiactl"} {
		t.Run(path, func(t *testing.T) {
			b := newEvents(20, "supervisor")
			b.add(tracer.Event{Kind: tracer.KindSeccomp, Syscall: "seccomp", Mode: 2, Flags: seccompFlagNewListener, Ret: 6})
			b.open(path, unix.O_RDWR|unix.O_CLOEXEC, errno(unix.EPERM), nil)
			b.open(path, unix.O_RDWR, errno(unix.EPERM), nil)
			a := Analyze(b.evs, &snapshot.Snapshot{})
			f := find(t, a, "seccomp-denied")
			mustContain(t, "detail", detail(f), "listener", "SECCOMP_RET_USER_NOTIF")
			mustContain(t, "verdict", a.Verdict, "seccomp")
			if has(a, "cgroup-denied-inferred") || has(a, "cgroup2-denied") {
				t.Errorf("device cgroup blamed: %v; verdict %q", ids(a), a.Verdict)
			}
		})
	}
}
