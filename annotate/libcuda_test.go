package annotate

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// Which libcuda was loaded and whether it fits the kernel module; the
// headline when no probed entry point returned and the process failed.
func TestLibcudaLoaded(t *testing.T) {
	build := func(lib string, exit tracer.Event) []tracer.Event {
		b := newEvents(5, "python3")
		b.open(lib, unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
		b.add(exit)
		return b.evs
	}
	s := h200()
	s.Env = map[string]string{"LD_LIBRARY_PATH": "/opt/x:/opt/cuda-12/lib64"}
	a := AnalyzeFacts(build("/opt/cuda-12/lib64/libcuda.so.575.51.03", tracer.Event{Kind: tracer.KindExit, ExitCode: 1}), s, Facts{APIReturns: true})
	f := find(t, a, "libcuda-loaded")
	if f.Severity != SeverityWarning {
		t.Errorf("mismatch: severity %s", f.Severity)
	}
	mustContain(t, "summary", f.Summary, "575.51.03", "580.159.04")
	mustContain(t, "detail", detail(f), "803", "LD_LIBRARY_PATH, entry 2 (/opt/cuda-12/lib64)")
	mustContain(t, "verdict", a.Verdict, "python3[5] exited 1", "/opt/cuda-12/lib64/libcuda.so.575.51.03", "not known")
	if strings.Contains(a.Verdict, "No NVIDIA device call failed") {
		t.Errorf("verdict %q", a.Verdict)
	}

	// The same version, exit 0: no headline of failure, the library named.
	a = AnalyzeFacts(build("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", tracer.Event{Kind: tracer.KindExit}), s, Facts{APIReturns: true})
	f = find(t, a, "libcuda-loaded")
	if f.Severity != SeverityInfo || strings.Contains(a.Verdict, "not known") {
		t.Errorf("severity %s verdict %q", f.Severity, a.Verdict)
	}
	mustContain(t, "detail", detail(f), "is the kernel module's", "No LD_LIBRARY_PATH entry")
}

// Attached to a process that initialised CUDA before the attach: the
// headline says what was held then and that nothing failed while
// attached, never that libcuda was not loaded or CUDA not initialised.
func TestAttachedAfterInit(t *testing.T) {
	b := newEvents(30, "python3")
	b.ioctl(3, 0xc020462a, 0, dev(195, 255))
	facts := Facts{APIReturns: true, Attached: true, HeldAtAttach: []string{"fd 3 → /dev/nvidiactl (c 195:255)", "fd 4 → /dev/nvidia-uvm (c 238:0)"}}
	for _, evs := range [][]tracer.Event{b.evs, nil} {
		a := AnalyzeFacts(evs, h200(), facts)
		mustContain(t, "verdict", a.Verdict, "Nothing failed while attached", "held 2 NVIDIA device fd(s)", "/dev/nvidia-uvm", "initialised before the trace")
		for _, bad := range []string{"did not load libcuda", "was not initialised", "touched no"} {
			if strings.Contains(a.Verdict, bad) {
				t.Errorf("verdict %q says %q", a.Verdict, bad)
			}
		}
	}
}
