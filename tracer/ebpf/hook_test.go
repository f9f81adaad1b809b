package ebpf

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// The fentry probe either loads, or fails the way a kernel that refuses
// fentry fails; anything else (a wrong function name, a malformed program)
// is a bug in the probe, which would silently keep fentry off everywhere.
// (It names a traced syscall that BTF has on every kernel: no-argument
// syscalls such as getppid have no BTF entry, which reads as "not
// supported".)
func TestFentryProbe(t *testing.T) {
	privtest.RequireRoot(t)
	err := probeFentry(btf.NewCache())
	hook, why := chooseSyscallHook(btf.NewCache())
	if hook != hookRawTracepoint || why == "" {
		t.Errorf("hook %q (%q), want %q with a reason", hook, why, hookRawTracepoint)
	}
	if err == nil {
		t.Logf("fentry allowed: %s", why)
		return
	}
	if errors.Is(err, unix.EPERM) {
		t.Skipf("this kernel refuses fentry (%v); the raw tracepoints are used", err)
	}
	t.Fatalf("fentry probe failed for another reason: %v", err)
}
