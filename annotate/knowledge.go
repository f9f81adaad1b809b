package annotate

import (
	"strings"

	"github.com/cudatrace/cudatrace/cgroupdev"
	"github.com/cudatrace/cudatrace/snapshot"
)

// The NVIDIA facts and remedies annotate knows, for `cudatrace doctor`,
// which checks the same things before anything runs. Keeping them here
// gives each fact one home.

// NodeExpectation is what a node path should be: the /proc/devices names
// that may own it (newest first) and, when fixed, its minor.
type NodeExpectation struct {
	Names      []string
	Minor      uint32
	MinorKnown bool
	// Fixed195 is true for nodes whose major is always 195.
	Fixed195 bool
}

// ExpectedNode says what path should be, false for a path that is not an
// NVIDIA node annotate knows.
func ExpectedNode(path string) (NodeExpectation, bool) {
	x, ok := expectFor(path)
	return NodeExpectation{Names: x.names, Minor: x.minor, MinorKnown: x.minorOK, Fixed195: x.fixed195}, ok
}

// RegisteredMajor is the major /proc/devices lists now for path's driver,
// and the name it is listed under.
func RegisteredMajor(s *snapshot.Snapshot, path string) (uint32, string, bool) {
	x, ok := expectFor(path)
	if !ok {
		return 0, "", false
	}
	return x.registered(s)
}

// DriverName is /proc/devices' owner of major:minor ("" when none).
func DriverName(s *snapshot.Snapshot, major, minor uint32) string { return driverName(s, major, minor) }

// DeviceAllowFix is the remedy for a device cgroup (v is "v1" or "v2") that
// does not allow the current major of driver name, in the words of the
// runtime that s.Container names.
func DeviceAllowFix(s *snapshot.Snapshot, v string, major uint32, name, node, cgroupPath string) string {
	return deviceAllowFix(s, v, major, name, node, cgroupPath)
}

// NodeCreateFix is how to create a missing node on the host; BindNodeFix how
// to pass a host node into s's container ("" outside one).
func NodeCreateFix(path string) string                     { return nodeCreateFix(path) }
func BindNodeFix(s *snapshot.Snapshot, path string) string { return bindNodeFix(s, path) }

// DynamicMajorNote explains that a dynamic major must be re-checked after a
// driver change ("" for 195).
func DynamicMajorNote(major uint32, name string) string { return dynamicMajorNote(major, name) }

// VisibleDevicesHidesAll applies CUDA's parsing of CUDA_VISIBLE_DEVICES to
// a host with nGPU GPUs (0: unknown).
func VisibleDevicesHidesAll(v string, nGPU int) bool { return cvdHidesAll(v, nGPU) }

// IsGPULostLine, IsRMInitLine and IsAPIMismatchLine classify kernel log
// lines: the GPU fell off the bus (Xid 79), RmInitAdapter or GSP firmware
// failed, the user-space driver's version differs from the module's.
func IsGPULostLine(t string) bool     { return isXidLost(t) }
func IsRMInitLine(t string) bool      { return isRMInitLine(t) }
func IsAPIMismatchLine(t string) bool { return containsAPIMismatch(t) }

// IsGPUNode is whether p is /dev/nvidiaN; IsCapsNode whether it is a MIG
// capability node.
func IsGPUNode(p string) bool  { return isGPUNode(p) }
func IsCapsNode(p string) bool { return isCapsNode(p) }

// LibcudaKind classifies a libcuda path: "stub" (the toolkit's link-time
// stub: cuInit returns 34), "compat" (the forward-compatibility package),
// or "".
func LibcudaKind(path string) string { return libcudaPathKind(path) }

func containsAPIMismatch(t string) bool { return strings.Contains(t, "API mismatch") }

// EmulatedPrograms are recorded cgroup device programs in the emulator's
// form (cgroupdev knows no snapshot).
func EmulatedPrograms(progs []snapshot.DeviceProgram) []cgroupdev.Program { return emulated(progs) }
