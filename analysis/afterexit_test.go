package analysis

import (
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/snapshot"
)

// Rules read from the cgroup a process that had exited was in are rules
// read: the finding stays cgroup2-denied with the program, not inferred,
// and says where they came from. Without the mark it says nothing of it.
func TestCgroup2DeniedAfterExit(t *testing.T) {
	s := lxcDenyUVM(t)
	s.CgroupV2.ReadAfterExit = true
	s.Process = snapshot.Process{PID: 639, UID: 0}
	a := Analyze(denyUVMEvents(), s)
	f := find(t, a, "cgroup2-denied")
	if f.Inferred || has(a, "cgroup-denied-inferred") {
		t.Errorf("inferred %v, findings %v: the program was read", f.Inferred, ids(a))
	}
	mustContain(t, "detail", detail(f), "Denied by cgroup v2 device program id 57",
		"The process had exited before its snapshot: the programs were queried on the cgroup it was in (/lxc/200/ns, as read while it ran) after its exit")
	mustContain(t, "verdict", a.Verdict, "denied by cgroup v2 device program 57")

	live := find(t, Analyze(denyUVMEvents(), lxcDenyUVM(t)), "cgroup2-denied")
	if strings.Contains(detail(live), "had exited") {
		t.Errorf("a live target's finding says it had exited:\n%s", detail(live))
	}
}

func TestCgroup1DeniedAfterExit(t *testing.T) {
	s := lxcDenyUVM(t)
	s.CgroupV2 = nil
	s.CgroupV1 = &snapshot.CgroupV1{Path: "/docker/abc", DevicesList: []string{"c 195:* rwm"}, ReadAfterExit: true}
	f := find(t, Analyze(denyUVMEvents(), s), "cgroup1-denied")
	mustContain(t, "detail", detail(f), "The process had exited before its snapshot: the devices.list was read from the cgroup it was in (/docker/abc")
}
