package ebpf

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
)

// The kernel's open filter (bpf/cudatrace.c: is_interesting_open and
// names_nvidia_lib) records exactly the opens the Go rule the ptrace
// backend and the strace importer use (tracer.IsInterestingOpen) does, so
// both backends see the same calls. Every path here is missing, so the open
// fails and only the path decides (a failed open of a path the filter does
// not know is dropped); relative ones are opened from an empty directory.
func TestKernelOpenFilterMatchesTheGoRule(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("cudatrace-test-%08x", rand.Uint32())
	missing := "/" + tag // a directory that does not exist
	paths := []string{
		// The libraries, by file name.
		"libcuda.so.1", "libnvidia-ml.so.1", "libcuda.so", "./libcuda.so.1", "sub/libnvidia-ml.so",
		missing + "/libcuda.so.1", missing + "/lib64/stubs/libcuda.so", missing + "/libnvidia-ml.so.570.1",
		// Names that only look like them.
		"libcudart.so.12", "mylibcuda.so", missing + "/libcuda.so.1/inner", missing + "/xlibnvidia-ml.so.1",
		missing + "/libcuda", "libcud", "nvidiactl", "",
		// The prefixes.
		"/dev/nvidia-" + tag, "/dev/nvidia" + tag, "/dev/char/195:" + tag, "/dev/" + tag + "-nvidia",
		"/proc/driver/nvidia/" + tag, "/proc/devices-" + tag, "/sys/module/nvidia_" + tag + "/parameters/x",
		"/proc/" + tag + "/driver/nvidia", "/etc/libcuda.conf-" + tag, "dev/nvidiactl",
	}
	cwd := t.TempDir()
	var script strings.Builder
	fmt.Fprintf(&script, "cd '%s' && exec '%s' %s", cwd, self, helperArg)
	for _, p := range paths {
		fmt.Fprintf(&script, " open-fail '%s'", p)
	}
	res, rec := traceCmd(t, tracer.Spec{}, script.String())
	checkComplete(t, res)
	for _, p := range paths {
		got := len(rec.find(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == p })) > 0
		if want := tracer.IsInterestingOpen(p); got != want {
			t.Errorf("open of %q: the kernel recorded it: %v, the Go rule says %v", p, got, want)
		}
	}
}
