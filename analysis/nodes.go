package analysis

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// isNvidiaNode is whether p is an NVIDIA device node path (not a /dev/char
// link, which libcuda creates best-effort and whose failures are noise).
var isNvidiaNode = nvfile.IsNode

// nodeFacts is what is known about one node at the time of a call.
type nodeFacts struct {
	path string
	// dev is the node's device number: from the event, else the latest
	// stat of the path in the trace (the target's view at that moment), else
	// the snapshot.
	dev       *tracer.Dev
	devSource string
	// snapNode is the snapshot's entry, nil when the path was not collected.
	snapNode *snapshot.Node
	// exists: 1 yes, 0 no, -1 unknown.
	exists    int
	modeKnown bool
	mode      uint32
	ownerKnow bool
	uid, gid  uint32
	driver    string // /proc/devices owner of dev's major ("" if none or unknown)
	exp       nvdev.NodeExpectation
	expOK     bool
	regMajor  uint32 // registered major of the expected driver
	regName   string
	regOK     bool
}

// factsFor collects facts about path as of event index upto (exclusive)
// in evs; e is the call being explained (may be nil).
func factsFor(s *snapshot.Snapshot, evs []tracer.Event, upto int, e *tracer.Event, path string) nodeFacts {
	f := nodeFacts{path: path, exists: -1}
	f.exp, f.expOK = nvdev.ExpectedNode(path)
	if f.expOK {
		f.regMajor, f.regName, f.regOK = f.exp.Registered(s)
	}
	if n := s.Node(path); n != nil {
		f.snapNode = n
		if n.Exists {
			f.exists = 1
			f.modeKnown, f.mode = true, n.Mode&0o7777
			f.ownerKnow, f.uid, f.gid = true, n.UID, n.GID
			if n.Type == "c" || n.Type == "b" {
				f.dev, f.devSource = &tracer.Dev{Major: n.Major, Minor: n.Minor}, "snapshot"
			}
		} else {
			f.exists = 0
		}
	}
	// The trace's own stat is the view at the moment of the call; it wins
	// over a snapshot taken later.
	pid := 0
	if e != nil {
		pid = e.PID
	}
	for i := upto - 1; i >= 0; i-- {
		st := &evs[i]
		if st.Kind != tracer.KindStat || st.Path != path || (pid != 0 && st.PID != pid) {
			continue
		}
		if st.Failed() {
			if st.Errno() == unix.ENOENT {
				f.exists = 0
			}
			break
		}
		f.exists = 1
		if st.Dev != nil {
			f.dev, f.devSource = st.Dev, "trace"
		}
		if st.Mode != 0 {
			f.modeKnown, f.mode = true, st.Mode&0o7777
		}
		break
	}
	if e != nil && e.Dev != nil && e.Kind != tracer.KindMknod {
		f.dev, f.devSource = e.Dev, "trace"
		if !e.Failed() {
			f.exists = 1
		}
	}
	if f.dev != nil {
		f.driver = nvdev.DriverName(s, f.dev.Major, f.dev.Minor)
	}
	return f
}

// nodeType is "c" unless the snapshot says block.
func (f nodeFacts) nodeType() string {
	if f.snapNode != nil && f.snapNode.Type == "b" {
		return "b"
	}
	return "c"
}

// requestDev is the device number the kernel checks for this path: the
// node's own, else the one the driver would give it.
func (f nodeFacts) requestDev() (tracer.Dev, bool) {
	if f.dev != nil {
		return *f.dev, true
	}
	if f.regOK && f.exp.MinorKnown {
		return tracer.Dev{Major: f.regMajor, Minor: f.exp.Minor}, true
	}
	return tracer.Dev{}, false
}

// describe is a Detail line: "/dev/nvidia-uvm is c 238:0, owned by driver
// nvidia-uvm (/proc/devices)."
func (f nodeFacts) describe(s *snapshot.Snapshot) string {
	if f.exists == 0 {
		msg := fmt.Sprintf("%s does not exist in the target's /dev", f.path)
		if f.regOK && f.exp.MinorKnown {
			msg += fmt.Sprintf(" (it would be c %d:%d: %s is registered at major %d in /proc/devices)", f.regMajor, f.exp.Minor, f.regName, f.regMajor)
		}
		return msg + "."
	}
	if f.dev == nil {
		if f.regOK && f.exp.MinorKnown {
			return fmt.Sprintf("%s: its device number is not in the trace or snapshot; %s is registered at major %d in /proc/devices, so it should be c %d:%d.", f.path, f.regName, f.regMajor, f.regMajor, f.exp.Minor)
		}
		return fmt.Sprintf("%s: its device number is not in the trace or snapshot.", f.path)
	}
	msg := fmt.Sprintf("%s is %s %d:%d", f.path, f.nodeType(), f.dev.Major, f.dev.Minor)
	switch {
	case f.driver != "":
		msg += fmt.Sprintf(", owned by driver %s (/proc/devices)", f.driver)
	case len(s.ProcDevices) > 0:
		msg += fmt.Sprintf("; no driver owns major %d in /proc/devices", f.dev.Major)
	}
	return msg + "."
}

// modeText is "Mode 0666, owner 0:0" or "" when unknown.
func (f nodeFacts) modeText() string {
	if !f.modeKnown {
		return ""
	}
	s := fmt.Sprintf("Mode %04o", f.mode)
	if f.ownerKnow {
		s += fmt.Sprintf(", owner uid %d gid %d", f.uid, f.gid)
	}
	return s
}

// stale reports whether the node's major differs from the one its driver
// is registered at now.
func (f nodeFacts) stale() bool {
	return f.dev != nil && f.regOK && f.dev.Major != f.regMajor
}

// dacAllows applies the permission bits to the process for the access an
// open asks for. ok is false when mode or owner are unknown.
func dacAllows(f nodeFacts, p snapshot.Process, flags uint64) (allowed, ok bool) {
	if !f.modeKnown || !f.ownerKnow {
		return false, false
	}
	const capDacOverride = 1 << 1
	if p.UID == 0 && p.CapEff&capDacOverride != 0 && !p.UserNS {
		return true, true
	}
	var want uint32
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		want = 4
	case unix.O_WRONLY:
		want = 2
	default:
		want = 6
	}
	var bits uint32
	switch {
	case p.UID == f.uid:
		bits = (f.mode >> 6) & 7
	case inGroups(p, f.gid):
		bits = (f.mode >> 3) & 7
	default:
		bits = f.mode & 7
	}
	return bits&want == want, true
}

func inGroups(p snapshot.Process, gid uint32) bool {
	if p.GID == gid {
		return true
	}
	for _, g := range p.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// mountOf finds the mount holding path: the node's recorded mount point,
// else the longest mount-point prefix.
func mountOf(s *snapshot.Snapshot, n *snapshot.Node, path string) *snapshot.Mount {
	if n != nil && n.MountPoint != "" {
		for i := range s.Mounts {
			if s.Mounts[i].MountPoint == n.MountPoint {
				return &s.Mounts[i]
			}
		}
	}
	var best *snapshot.Mount
	for i := range s.Mounts {
		m := &s.Mounts[i]
		mp := strings.TrimSuffix(m.MountPoint, "/")
		if path == m.MountPoint || strings.HasPrefix(path, mp+"/") {
			if best == nil || len(m.MountPoint) > len(best.MountPoint) {
				best = m
			}
		}
	}
	return best
}
