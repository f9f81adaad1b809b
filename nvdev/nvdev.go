// Package nvdev holds the facts about NVIDIA device nodes that the tracers,
// the snapshot and the analysis share, so each is written once (the source:
// device_nodes in annotate/internal/gentables/nvidia-abi.json).
package nvdev

import (
	"strconv"
	"strings"
)

// Major is nvidia.ko's fixed character major, of /dev/nvidiactl (minor
// 255), /dev/nvidia-modeset (254) and /dev/nvidiaN (0..247)
// (nv-chardev-numbers.h). Every other NVIDIA major (nvidia-uvm,
// nvidia-caps, ...) is allocated dynamically: only /proc/devices tells it.
const Major = 195

// PathPrefix starts the path of every NVIDIA device node.
const PathPrefix = "/dev/nvidia"

// IsNodePath reports whether p names an NVIDIA device node, taken as the
// target passed it (not resolved).
func IsNodePath(p string) bool { return strings.HasPrefix(p, PathPrefix) }

var fixedMajorLink = "/dev/char/" + strconv.Itoa(Major) + ":"

// IsFixedMajorLink reports whether p is a /dev/char/195:N link (libcuda
// makes them), which names an NVIDIA node whatever the minor.
func IsFixedMajorLink(p string) bool { return strings.HasPrefix(p, fixedMajorLink) }
