// Package nvdev is the NVIDIA knowledge base: the generated tables (RM
// escapes, UVM ioctls, NV_STATUS, CUresult, RM classes and controls, the
// params layouts), the node expectations, the remedies in each runtime's
// words, the kernel log lines the driver writes, the in-band status
// decoder and words, and the formatting of calls. The analysis
// (package analysis) and `cudatrace doctor`, which checks the same things
// before anything runs, both read it, so each fact has one home. The facts
// that tell NVIDIA's files, which the tracers and the snapshot need, are in
// nvdev/nvfile, which imports nothing of cudatrace's.
package nvdev

import (
	"path"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/cgroupdev"
	"github.com/cudatrace/cudatrace/snapshot"
)

// RegisteredMajor is the major /proc/devices lists now for path's driver,
// and the name it is listed under.
func RegisteredMajor(s *snapshot.Snapshot, path string) (uint32, string, bool) {
	x, ok := ExpectedNode(path)
	if !ok {
		return 0, "", false
	}
	return x.Registered(s)
}

// IsAPIMismatchLine classifies a kernel log line: the user-space driver's
// version differs from the module's.
func IsAPIMismatchLine(t string) bool { return strings.Contains(t, "API mismatch") }

// EmulatedPrograms are recorded cgroup device programs in the form the
// cgroupdev emulator needs (cgroupdev knows no snapshot).
func EmulatedPrograms(progs []snapshot.DeviceProgram) []cgroupdev.Program {
	out := make([]cgroupdev.Program, len(progs))
	for i, p := range progs {
		out[i] = cgroupdev.Program{ID: p.ID, Name: p.Name, AttachedTo: p.AttachedTo, Instructions: p.Instructions}
	}
	return out
}

// LibcudaKind classifies a libcuda path: "stub" (the toolkit's
// link-time stub: cuInit returns 34), "compat" (the forward-compatibility
// package), or "".
func LibcudaKind(p string) string {
	if !strings.HasPrefix(path.Base(p), "libcuda.so") {
		return ""
	}
	switch {
	case strings.Contains(p, "/stubs/"):
		return "stub"
	case strings.Contains(p, "/compat/"):
		return "compat"
	}
	return ""
}

// VisibleDevicesHidesAll applies CUDA's parsing of CUDA_VISIBLE_DEVICES to a host
// with nGPU GPUs (0: unknown): it stops at the first entry that is not a
// valid index or GPU/MIG UUID, so an invalid first entry hides everything.
func VisibleDevicesHidesAll(v string, nGPU int) bool {
	v = strings.TrimSpace(v)
	if v == "" {
		return true
	}
	first := strings.TrimSpace(strings.SplitN(v, ",", 2)[0])
	if strings.HasPrefix(first, "GPU-") || strings.HasPrefix(first, "MIG-") {
		return false
	}
	n, err := strconv.Atoi(first)
	if err != nil || n < 0 {
		return true
	}
	return nGPU > 0 && n >= nGPU
}
