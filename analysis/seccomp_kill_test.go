package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// A call that never returned (seccomp KILL/TRAP) is the failing call in
// every shape: an ioctl killed after a failure libcuda survived, an open
// killed, a thread's call with the process dying of SIGSYS; no result is
// read from it and the headline never says nothing failed.
func TestSeccompKilled(t *testing.T) {
	cases := []struct {
		name  string
		build func(b *evb)
		call  string
		exit  tracer.Event
		want  []string
	}{
		{"ioctl killed", func(b *evb) {
			b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
			// Survived: a MIG cap node libcuda goes on without.
			b.open("/dev/nvidia-caps/nvidia-cap1", unix.O_RDONLY, errno(unix.EACCES), nil)
			b.add(tracer.Event{Kind: tracer.KindIoctl, FD: 3, Request: 0xc00846d6, Dev: dev(195, 255), NoEntry: true, NoReturn: true})
		}, "ioctl", tracer.Event{Kind: tracer.KindExit, Signal: int(unix.SIGSYS)}, []string{"died of SIGSYS", "159"}},
		{"open killed", func(b *evb) {
			b.add(tracer.Event{Kind: tracer.KindOpen, Path: "/dev/nvidia-uvm", Flags: unix.O_RDWR, NoEntry: true, NoReturn: true})
		}, "openat", tracer.Event{Kind: tracer.KindExit, Signal: int(unix.SIGSYS)}, []string{"died of SIGSYS"}},
		{"trap handled", func(b *evb) {
			b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
			b.add(tracer.Event{Kind: tracer.KindIoctl, FD: 3, Request: 0xc00846d6, Dev: dev(195, 255), NoEntry: true, NoReturn: true})
		}, "ioctl", tracer.Event{Kind: tracer.KindExit, ExitCode: 1}, []string{"SIGSYS handler", "exited 1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newEvents(7, "python3")
			c.build(b)
			b.add(c.exit)
			s := h200()
			s.Process.Comm = "" // gone before the snapshot
			a := AnalyzeFacts(b.evs, s, Facts{APIReturns: true})
			if a.Failing == nil || !a.Failing.NoReturn || a.Failing.Syscall != c.call {
				t.Fatalf("failing %+v; verdict %q", a.Failing, a.Verdict)
			}
			f := find(t, a, "seccomp-killed")
			if f.Severity != SeverityError || a.Findings[0].ID != "seccomp-killed" {
				t.Errorf("findings %v", ids(a))
			}
			mustContain(t, "detail", detail(f), append([]string{"never returned", "SIGSYS", "no result"}, c.want...)...)
			mustContain(t, "fix", f.Fix, "SystemCallFilter=", "SCMP_ACT_KILL", "seccomp=unconfined")
			mustContain(t, "verdict", a.Verdict, "never returned", "seccomp", "SIGSYS")
			for _, bad := range []string{"No NVIDIA device call failed", "→ 0", "NV_OK", "EACCES"} {
				if strings.Contains(a.Verdict, bad) {
					t.Errorf("verdict %q says %q", a.Verdict, bad)
				}
			}
			if has(a, "seccomp-denied") || has(a, "cuda-failed-unexplained") {
				t.Errorf("findings %v", ids(a))
			}
		})
	}
}

// A call that returned is never taken for a killed one, even when its
// value is its syscall number (16, ioctl's on x86-64).
func TestReturnedValueNotKilled(t *testing.T) {
	b := newEvents(7, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.ioctl(3, 0xc00846d6, 16, dev(195, 255))
	a := Analyze(b.evs, h200())
	if has(a, "seccomp-killed") || a.Failing != nil {
		t.Errorf("findings %v failing %+v", ids(a), a.Failing)
	}
}
