package ebpf

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// requireFentry: the kernel matrix sets CUDATRACE_REQUIRE_FENTRY=1 on the
// kernels that allow fentry, so that a silent fall-back to the raw
// tracepoints fails there.
var requireFentry = os.Getenv("CUDATRACE_REQUIRE_FENTRY") == "1"

// The fentry probe either loads, or fails the way a kernel that refuses
// fentry fails; anything else (a wrong function name, a malformed program)
// is a bug in the probe, which would silently keep fentry off everywhere.
// (It names a traced syscall that BTF has on every kernel: no-argument
// syscalls such as getppid have no BTF entry, which reads as "not
// supported".)
func TestFentryProbe(t *testing.T) {
	privtest.RequireRoot(t)
	err := probeFentry(btf.NewCache())
	hook, why, _ := chooseSyscallHook(btf.NewCache(), true)
	if err == nil && hook == hookRawTracepoint && !requireFentry {
		t.Skipf("fentry allowed, not usable here: %s", why)
	}
	if want := map[bool]string{true: hookFentry, false: hookRawTracepoint}[err == nil]; hook != want || why == "" {
		t.Errorf("host-wide: hook %q (%q), want %q with a reason", hook, why, want)
	}
	// A trace of its own processes keeps the raw tracepoints, saying why.
	if hook, why, _ := chooseSyscallHook(btf.NewCache(), false); hook != hookRawTracepoint || why == "" {
		t.Errorf("not host-wide: hook %q (%q), want %q with a reason", hook, why, hookRawTracepoint)
	}
	if err == nil {
		t.Logf("fentry allowed: %s", why)
		return
	}
	if requireFentry {
		t.Fatalf("CUDATRACE_REQUIRE_FENTRY=1 and the fentry probe failed: %v", err)
	}
	if errors.Is(err, unix.EPERM) {
		t.Skipf("this kernel refuses fentry (%v); the raw tracepoints are used", err)
	}
	t.Fatalf("fentry probe failed for another reason: %v", err)
}

// hooks are the syscall hooks this kernel allows.
func hooks(t *testing.T) []string {
	if v := kernelSupport(); v.oldKernel != "" {
		t.Logf("raw tracepoints only: the object for older kernels has no fentry programs (no %s here)", v.oldKernel)
		return []string{hookRawTracepoint}
	}
	if hook, why, _ := chooseSyscallHook(btf.NewCache(), true); hook != hookFentry {
		if requireFentry {
			t.Fatalf("CUDATRACE_REQUIRE_FENTRY=1 and no fentry hook here: %s", why)
		}
		t.Logf("raw tracepoints only: %s", why)
		return []string{hookRawTracepoint}
	}
	return []string{hookRawTracepoint, hookFentry}
}

// withHook runs f with the syscall programs of hook, checking that the
// run took it (no silent fall-back).
func withHook(t *testing.T, hook string, f func() *tracer.Result) {
	t.Helper()
	forceHook = hook
	defer func() { forceHook = "" }()
	if res := f(); res.SyscallHook != hook {
		t.Fatalf("run used hook %q, want %q", res.SyscallHook, hook)
	}
}

// The same calls give the same events under both hooks: opens that
// succeed and fail, a device ioctl, stats, node calls, a memfd, execs.
func TestHooksSeeTheSameCalls(t *testing.T) {
	privtest.RequireRoot(t)
	all := hooks(t)
	if len(all) < 2 {
		t.Skip("this kernel refuses fentry: only the raw tracepoints run here")
	}
	node := fakeNode(t, "nvidiactl")
	missing := fmt.Sprintf("/dev/nvidia-uvm-cudatrace-test-missing-%08x", rand.Uint32())
	made := fmt.Sprintf("/dev/nvidia-cudatrace-test-made-%08x", rand.Uint32())
	t.Cleanup(func() { os.Remove(made) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("exec 3<>%s; { true < %s; } 2>/dev/null; stty < %s; stat %s >/dev/null; "+
		"test -e %s; mknod %s c 1 3; rm -f %s; ls -d /dev/nvidia-cudatrace-none 2>/dev/null; "+
		"%[8]s %[9]s memfd cuda-probe thread-open %[1]s; "+
		// Refused by seccomp (no entry under either hook), then rolled
		// back for SIGSYS.
		"%[8]s %[10]s --seccomp-deny memfd_create -- %[8]s %[9]s memfd refused; "+
		"%[8]s %[10]s --seccomp-deny memfd_create --seccomp-action kill-process -- %[8]s %[9]s memfd killed; exit 0",
		node, missing, node, node, missing, made, made, self, helperArg, faultsArg)
	got := map[string][]string{}
	for _, hook := range all {
		withHook(t, hook, func() *tracer.Result {
			// --debug's phases and per-program run times, for the log
			// (docs/benchmarks.md); asserted is only what was seen.
			res, rec := traceCmd(t, tracer.Spec{Debug: true}, script)
			checkComplete(t, res)
			for _, e := range rec.events {
				dev := "-"
				if e.Dev != nil {
					dev = fmt.Sprintf("%d:%d", e.Dev.Major, e.Dev.Minor)
				}
				got[hook] = append(got[hook], fmt.Sprintf("%s %s %q %d %s %s %v %v", e.Comm, e.Syscall, e.Path, e.Ret, e.ErrnoName(), dev, e.NoEntry, e.NoReturn))
			}
			slices.Sort(got[hook])
			return res
		})
	}
	raw, fentry := got[hookRawTracepoint], got[hookFentry]
	if !slices.Equal(raw, fentry) {
		t.Errorf("the hooks saw different calls:\nraw_tracepoint:\n%q\nfentry:\n%q", raw, fentry)
	}
	if len(raw) < 8 {
		t.Errorf("only %d events: %q", len(raw), raw)
	}
	for _, want := range []string{`memfd_create "refused" -1 EPERM`, `memfd_create "killed"`} {
		if !slices.ContainsFunc(raw, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no event %q among %q", want, raw)
		}
	}
}

// A fentry hook that loads but fails to attach (one entry's attach fails,
// injected) gives way to the raw tracepoints, which then see the calls.
func TestFentryAttachFailureFallsBack(t *testing.T) {
	privtest.RequireRoot(t)
	if len(hooks(t)) < 2 {
		t.Skip("this kernel refuses fentry: only the raw tracepoints run here")
	}
	var tried []string
	failAttach = func(name string) error {
		tried = append(tried, name)
		if name == "ct_fentry_ioctl" {
			return errors.New("injected")
		}
		return nil
	}
	defer func() { failAttach = nil }()
	forceHook = hookFentry // a launch would not take it
	defer func() { forceHook = "" }()
	node := fakeNode(t, "nvidiactl")
	res, rec := traceCmd(t, tracer.Spec{}, fmt.Sprintf("exec 3<>%s; stty < %s; exit 0", node, node))
	checkComplete(t, res)
	if !slices.Contains(tried, "ct_fentry_ioctl") || !slices.Contains(tried, bpfProgCtSysEnter) {
		t.Errorf("attached %q: want the fentry hook tried, then the raw tracepoints", tried)
	}
	if res.SyscallHook != hookRawTracepoint {
		t.Errorf("hook %q, want %q after the failed attach", res.SyscallHook, hookRawTracepoint)
	}
	if opens := rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == node && e.Ret >= 0 }); len(opens) != 2 {
		t.Errorf("%d opens of %s, want 2 (exec 3<>, stty's stdin)", len(opens), node)
	}
	one(t, rec, "ioctl on "+node, func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl })
}

// The fentry object's programs load on the main object's maps and globals,
// found by name: each map and variable must be the same in both objects
// (both are built from bpf/cudatrace.c), or they would read other bytes.
func TestFentryObjectMatches(t *testing.T) {
	base, err := loadBpf()
	if err != nil {
		t.Fatal(err)
	}
	fspec, err := loadFentry()
	if err != nil {
		t.Fatal(err)
	}
	if len(fspec.Maps) != len(base.Maps) || len(fspec.Variables) != len(base.Variables) {
		t.Errorf("fentry object: %d maps, %d variables; main: %d, %d", len(fspec.Maps), len(fspec.Variables), len(base.Maps), len(base.Variables))
	}
	for name, m := range fspec.Maps {
		b := base.Maps[name]
		if b == nil || m.Type != b.Type || m.KeySize != b.KeySize || m.ValueSize != b.ValueSize || m.MaxEntries != b.MaxEntries || m.Flags != b.Flags {
			t.Errorf("map %s: fentry object's %v, main's %v", name, m, b)
		}
	}
	for name, v := range fspec.Variables {
		b := base.Variables[name]
		if b == nil || v.SectionName != b.SectionName || v.Offset != b.Offset || v.Size() != b.Size() || !slices.Equal(v.Value, b.Value) {
			t.Errorf("variable %s: fentry object's %v, main's %v", name, v, b)
		}
	}
	for name := range fspec.Programs {
		if base.Programs[name] != nil {
			t.Errorf("program %s is in both objects", name)
		}
	}
}
