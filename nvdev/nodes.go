package nvdev

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
)

var (
	gpuNodeRe = regexp.MustCompile(`^/dev/nvidia([0-9]+)$`)
	capNodeRe = regexp.MustCompile(`^/dev/nvidia-caps/nvidia-cap([0-9]+)$`)
)

// IsGPUNode is whether p is /dev/nvidiaN.
func IsGPUNode(p string) bool { return gpuNodeRe.MatchString(p) }

// IsCapsNode is whether p is a MIG capability node.
func IsCapsNode(p string) bool { return strings.HasPrefix(p, "/dev/nvidia-caps") }

// NodeExpectation says which /proc/devices name should own a node path and
// which minor it should have, from the driver's fixed naming (device_nodes in
// internal/gentables/nvidia-abi.json). Names lists acceptable names, newest first;
// Fixed195 is true for nodes whose major is always 195.
type NodeExpectation struct {
	Names      []string
	Minor      uint32
	MinorKnown bool
	Fixed195   bool
}

// ExpectedNode says what path should be, false for a path that is not an
// NVIDIA node known here.
func ExpectedNode(p string) (NodeExpectation, bool) {
	switch {
	case p == "/dev/nvidiactl":
		return NodeExpectation{[]string{"nvidiactl", "nvidia-frontend", "nvidia"}, 255, true, true}, true
	case p == "/dev/nvidia-modeset":
		return NodeExpectation{[]string{"nvidia-modeset", "nvidia-frontend", "nvidia"}, 254, true, true}, true
	case IsGPUNode(p):
		n, _ := strconv.ParseUint(gpuNodeRe.FindStringSubmatch(p)[1], 10, 32)
		return NodeExpectation{[]string{"nvidia", "nvidia-frontend"}, uint32(n), true, true}, true
	case p == "/dev/nvidia-uvm":
		return NodeExpectation{Names: []string{"nvidia-uvm"}, Minor: 0, MinorKnown: true}, true
	case p == "/dev/nvidia-uvm-tools":
		return NodeExpectation{Names: []string{"nvidia-uvm"}, Minor: 1, MinorKnown: true}, true
	case capNodeRe.MatchString(p):
		n, _ := strconv.ParseUint(capNodeRe.FindStringSubmatch(p)[1], 10, 32)
		return NodeExpectation{Names: []string{"nvidia-caps"}, Minor: uint32(n), MinorKnown: true}, true
	case strings.HasPrefix(p, "/dev/nvidia-caps-imex-channels/"):
		return NodeExpectation{Names: []string{"nvidia-caps-imex-channels"}}, true
	case p == "/dev/nvidia-nvswitchctl":
		return NodeExpectation{Names: []string{"nvidia-nvswitch"}, Minor: 255, MinorKnown: true}, true
	case strings.HasPrefix(p, "/dev/nvidia-nvswitch"):
		return NodeExpectation{Names: []string{"nvidia-nvswitch"}}, true
	case p == "/dev/nvidia-nvlink":
		return NodeExpectation{Names: []string{"nvidia-nvlink"}, Minor: 0, MinorKnown: true}, true
	}
	return NodeExpectation{}, false
}

// Registered returns the major /proc/devices lists for the node's driver and
// the name it is listed under.
func (x NodeExpectation) Registered(s *snapshot.Snapshot) (uint32, string, bool) {
	for _, n := range x.Names {
		if m, ok := s.MajorOf(n); ok {
			return m, n, true
		}
	}
	return 0, "", false
}

// DriverName is /proc/devices' owner of major:minor. Major 195 is split into
// regions on drivers >= 545 (nvidia 0-247, nvidia-modeset 254, nvidiactl
// 255), so the minor picks among several lines.
func DriverName(s *snapshot.Snapshot, major, minor uint32) string {
	var names []string
	for _, d := range s.ProcDevices {
		if d.Major == major {
			names = append(names, d.Name)
		}
	}
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	if major == nvfile.Major {
		want := "nvidia"
		switch minor {
		case 255:
			want = "nvidiactl"
		case 254:
			want = "nvidia-modeset"
		}
		for _, n := range names {
			if n == want {
				return n
			}
		}
	}
	// A major shared with a non-NVIDIA name (a stand-in, or a driver that
	// registered a second region): the NVIDIA name is the one that matters.
	var nv []string
	for _, n := range names {
		if strings.HasPrefix(n, "nvidia") {
			nv = append(nv, n)
		}
	}
	if len(nv) == 1 {
		return nv[0]
	}
	return strings.Join(names, "/")
}
