package tracer

import (
	"strings"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
)

// The path rules every backend applies (the eBPF programs in bpf/cudatrace.c
// implement the same in the kernel), so that all of them record the same
// events. Paths are matched as the target passed them, not resolved.

// IsDevicePath: NVIDIA device nodes and the /dev/char/M:m links libcuda
// creates for them.
func IsDevicePath(p string) bool {
	return nvfile.IsNode(p) || strings.HasPrefix(p, "/dev/char/")
}

// IsInterestingOpen adds the files that tell which driver and library were
// used: /proc/driver/nvidia, /proc/devices, module parameters, and the CUDA
// and NVML libraries by file name (nvfile.IsLibrary: a stub or compat copy
// shows here, and so does a dlopen of a bare "libcuda.so.1" that the loader
// turned into a relative open).
func IsInterestingOpen(p string) bool {
	return IsDevicePath(p) ||
		strings.HasPrefix(p, "/proc/driver/nvidia") ||
		strings.HasPrefix(p, "/proc/devices") ||
		strings.HasPrefix(p, "/sys/module/nvidia") ||
		nvfile.IsLibrary(p)
}

// IsInterestingStat adds libcuda looking for nvidia-modprobe.
func IsInterestingStat(p string) bool {
	return IsDevicePath(p) || strings.Contains(p, "nvidia-modprobe")
}
