package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The headline names cuInit only when CUDA was at work: `cat /dev/nvidia0`
// failing is an NVIDIA device call that failed, not "cuInit cannot
// succeed"; the same failure after libcuda was opened is CUDA's.
func TestVerdictHeadNamesCUDAOnlyWhenSeen(t *testing.T) {
	b := newEvents(9, "cat")
	b.open("/dev/nvidia0", unix.O_RDONLY, errno(unix.ENOENT), nil)
	v := Analyze(b.evs, h200()).Verdict
	if !strings.HasPrefix(v, "An NVIDIA device call failed: openat(\"/dev/nvidia0\"") || strings.Contains(v, "cuInit") {
		t.Errorf("cat /dev/nvidia0: verdict %q", v)
	}
	b = newEvents(9, "python3")
	b.open("/usr/lib/x86_64-linux-gnu/libcuda.so.1", unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
	b.open("/dev/nvidia0", unix.O_RDWR, errno(unix.ENOENT), nil)
	if v := Analyze(b.evs, h200()).Verdict; !strings.HasPrefix(v, "cuInit cannot succeed: ") {
		t.Errorf("after libcuda's open: verdict %q", v)
	}
}
