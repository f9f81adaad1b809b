package analysis

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

func (b *evb) api(fn string, ret int64) *evb {
	return b.add(tracer.Event{Kind: tracer.KindAPI, Func: fn, Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Ret: ret, Time: 310 * time.Millisecond})
}

var traced = Facts{APIReturns: true}

// cuInit's return code leads the headline, and the failing call explains it.
func TestCUDAVerdictWithCause(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.ENOENT), nil)
	b.api("cuInit", 999)
	s := h200()
	s.Nodes = s.Nodes[:2] // uvm missing
	a := AnalyzeFacts(b.evs, s, traced)
	want := "cuInit returned 999 (CUDA_ERROR_UNKNOWN) in python3[845] at +0.31s: openat(\"/dev/nvidia-uvm\", O_RDWR|O_CLOEXEC) by python3[845] → ENOENT"
	if !strings.HasPrefix(a.Verdict, want) {
		t.Fatalf("verdict %q\nwant prefix %q", a.Verdict, want)
	}
	if a.CUDA == nil || a.CUDA.Status != "failed" || a.CUDA.Code != 999 || a.CUDA.Name != "CUDA_ERROR_UNKNOWN" {
		t.Fatalf("cuda %+v", a.CUDA)
	}
}

// CUDA failed and nothing failed at the syscall level: say so, never
// "nothing failed".
func TestCUDAFailedUnexplained(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia-uvm", unix.O_RDWR, 4, dev(238, 0))
	b.api("cuInit", 3)
	a := AnalyzeFacts(b.evs, h200(), traced)
	if strings.Contains(a.Verdict, "No NVIDIA device call failed") || !strings.HasPrefix(a.Verdict, "cuInit returned 3 (CUDA_ERROR_NOT_INITIALIZED)") {
		t.Fatalf("verdict %q", a.Verdict)
	}
	f := find(t, a, "cuda-failed-unexplained")
	mustContain(t, "detail", strings.Join(f.Detail, "\n"), "GSP", "Ruled out: the device nodes it opened opened fine (/dev/nvidiactl, /dev/nvidia-uvm)")
}

// A failure libcuda goes on without (modeset) is not the verdict while a
// later fatal one exists, and the report says it was ignored.
func TestRedHerringIgnored(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/dev/nvidia-modeset", unix.O_RDWR, errno(unix.EPERM), nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia-uvm", unix.O_RDWR, errno(unix.EPERM), nil)
	b.api("cuInit", 999)
	a := AnalyzeFacts(b.evs, h200(), traced)
	if a.Failing == nil || a.Failing.Path != "/dev/nvidia-uvm" {
		t.Fatalf("failing %+v", a.Failing)
	}
	f := find(t, a, "ignored-failures")
	mustContain(t, "detail", strings.Join(f.Detail, "\n"), "/dev/nvidia-modeset", "CUDA does not need it")
}

// Calls after CUDA's failure, or in other processes, cannot have caused it.
func TestFailureAfterCUDAReturnNotTheCause(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.api("cuInit", 100)
	b.open("/dev/nvidia0", unix.O_RDWR, errno(unix.EPERM), nil)
	a := AnalyzeFacts(b.evs, h200(), traced)
	if a.Failing != nil {
		t.Fatalf("failing %+v", a.Failing)
	}
	find(t, a, "cuda-failed-unexplained")
}

// Success is said as success, with the device count.
func TestCUDASucceeded(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.api("cuInit", 0)
	n := int64(1)
	b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuDeviceGetCount", Ret: 0, Out: &n})
	a := AnalyzeFacts(b.evs, h200(), traced)
	if a.Verdict != "cuInit succeeded in python3[845] and found 1 GPU(s); no NVIDIA device call failed." {
		t.Fatalf("verdict %q", a.Verdict)
	}
}

// An NVIDIA ioctl a seccomp filter refused (its entry never seen) is the
// failing call even with no errno rule for it.
func TestSeccompRefusedIoctlIsTheFailure(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.add(tracer.Event{Kind: tracer.KindIoctl, FD: 3, Request: 0xc00846d6, Ret: errno(unix.EPERM), Dev: dev(195, 255), NoEntry: true})
	b.api("cuInit", 304)
	s := h200()
	s.Process.Seccomp = 2
	a := AnalyzeFacts(b.evs, s, traced)
	if a.Failing == nil || a.Failing.Kind != tracer.KindIoctl {
		t.Fatalf("failing %+v (verdict %q)", a.Failing, a.Verdict)
	}
	f := find(t, a, "seccomp-denied")
	mustContain(t, "fix", f.Fix, "seccomp")
	mustContain(t, "verdict", a.Verdict, "cuInit returned 304 (CUDA_ERROR_OPERATING_SYSTEM)", "seccomp")
}

// Without probes, a libcuda that was loaded and never returned is not
// "nothing failed".
func TestLoadedButNoReturn(t *testing.T) {
	b := newEvents(845, "python3")
	b.open("/usr/lib/x86_64-linux-gnu/libcuda.so.1", unix.O_RDONLY, 3, nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, 4, dev(195, 255))
	a := AnalyzeFacts(b.evs, h200(), traced)
	mustContain(t, "verdict", a.Verdict, "no probed CUDA or NVML entry point returned")
}

// CUDA_VISIBLE_DEVICES naming a GPU that does not exist: cuInit returns 100
// although libcuda opened /dev/nvidia0 (recorded on the H200), and the
// variable is the cause.
func TestVisibleDevicesInvalidUUID(t *testing.T) {
	for _, v := range []string{"GPU-00000000-0000-0000-0000-000000000000", "-1"} {
		b := newEvents(845, "python3")
		b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
		b.open("/dev/nvidia0", unix.O_RDWR, 4, dev(195, 0))
		b.api("cuInit", 100)
		s := h200()
		s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": v}
		a := AnalyzeFacts(b.evs, s, traced)
		find(t, a, "cuda-visible-devices-hides-all")
		if strings.Contains(a.Verdict, "no failing call") || !strings.Contains(a.Verdict, "CUDA_VISIBLE_DEVICES") {
			t.Errorf("%s: verdict %q", v, a.Verdict)
		}
	}
}

// Eight GPUs, one node denied by the device cgroup: CUDA starts with seven.
// The headline says which GPU is gone and why; a GPU merely not given to
// the container is not a fault.
func TestOneOfEightGPUs(t *testing.T) {
	build := func(errnoOf3 unix.Errno) *evb {
		b := newEvents(845, "python3")
		b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
		for i := uint32(0); i < 8; i++ {
			p := "/dev/nvidia" + string(rune('0'+i))
			if i == 3 {
				b.open(p, unix.O_RDWR, errno(errnoOf3), nil)
				continue
			}
			b.open(p, unix.O_RDWR, int64(10+i), dev(195, i))
		}
		b.api("cuInit", 0)
		n := int64(7)
		b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuDeviceGetCount", Out: &n})
		return b
	}
	a := AnalyzeFacts(build(unix.EPERM).evs, h200(), traced)
	if a.Failing == nil || a.Failing.Path != "/dev/nvidia3" || !strings.Contains(a.Verdict, "found 7 GPU(s), but") || !strings.Contains(a.Verdict, "CUDA runs without that GPU") {
		t.Fatalf("denied: failing %v, verdict %q", a.Failing, a.Verdict)
	}
	s := h200()
	s.Env = map[string]string{"NVIDIA_VISIBLE_DEVICES": "0,1,2,4,5,6,7"}
	a = AnalyzeFacts(build(unix.ENOENT).evs, s, traced)
	if a.Failing != nil || !strings.HasSuffix(a.Verdict, "no NVIDIA device call failed.") {
		t.Fatalf("allocated: failing %v, verdict %q", a.Failing, a.Verdict)
	}
	f := find(t, a, "ignored-failures")
	mustContain(t, "detail", strings.Join(f.Detail, "\n"), "/dev/nvidia3", "not given to this container")
}
