// Package nvfile holds the facts that tell NVIDIA's files, which the
// tracers, the snapshot and the analysis share, so each is written once:
// the device nodes by path and major (the source: device_nodes in
// nvdev/internal/gentables/nvidia-abi.json), the driver's directories,
// and the CUDA driver library and NVML by name and by contents (the
// version banner, the toolkit's stubs). It imports nothing of cudatrace's:
// tracer and snapshot, in whose types nvdev's knowledge is phrased, import
// it.
package nvfile

import (
	"strconv"
	"strings"
)

// Major is nvidia.ko's fixed character major, of /dev/nvidiactl (minor
// 255), /dev/nvidia-modeset (254) and /dev/nvidiaN (0..247)
// (nv-chardev-numbers.h). Every other NVIDIA major (nvidia-uvm,
// nvidia-caps, ...) is allocated dynamically: only /proc/devices tells it.
const Major = 195

// Prefix starts the path of every NVIDIA device node.
const Prefix = "/dev/nvidia"

// IsNode reports whether p names an NVIDIA device node, taken as the
// target passed it (not resolved).
func IsNode(p string) bool { return strings.HasPrefix(p, Prefix) }

var fixedMajorLink = "/dev/char/" + strconv.Itoa(Major) + ":"

// IsFixedMajorLink reports whether p is a /dev/char/195:N link (libcuda
// makes them), which names an NVIDIA node whatever the minor.
func IsFixedMajorLink(p string) bool { return strings.HasPrefix(p, fixedMajorLink) }

// dirs are the directories the driver's tools create beside the nodes:
// nvidia-modprobe's MIG capability nodes and the IMEX channels live in them.
var dirs = []string{"/dev/nvidia-caps", "/dev/nvidia-caps-imex-channels"}

// IsDir reports whether p is one of the driver's directories under /dev,
// which is a directory when all is well.
func IsDir(p string) bool {
	p = strings.TrimRight(p, "/")
	for _, d := range dirs {
		if p == d {
			return true
		}
	}
	return false
}

// IsLibrary reports whether a path's file name is that of the CUDA driver
// library or NVML (libcuda.so*, libnvidia-ml.so*): the files whose opens
// are recorded and whose entry points are probed. The BPF programs apply
// the same rule to the name after the last '/'.
func IsLibrary(p string) bool {
	base := p[strings.LastIndexByte(p, '/')+1:]
	return strings.HasPrefix(base, "libcuda.so") || strings.HasPrefix(base, "libnvidia-ml.so")
}
