package analysis

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// /dev/nvidia-caps is a directory when all is well (recorded on the H200:
// libcuda's mkdir of it fails with EEXIST): not a node that is not a device.
func TestCapsDirectoryIsNotANonDevice(t *testing.T) {
	b := newEvents(845, "python3")
	b.add(tracer.Event{Kind: tracer.KindMkdir, Path: "/dev/nvidia-caps", Mode: 0o755, Ret: errno(unix.EEXIST)})
	b.open("/dev/nvidia-caps/nvidia-cap1", unix.O_RDONLY, 19, dev(241, 1))
	s := h200()
	s.Nodes = append(s.Nodes, snapshot.Node{Path: "/dev/nvidia-caps", Exists: true, Type: "d", Mode: 0o755, MountPoint: "/dev"})
	a := Analyze(b.evs, s)
	for _, f := range a.Findings {
		if f.ID == "node-not-device" {
			t.Fatalf("finding %+v", f)
		}
	}
}
