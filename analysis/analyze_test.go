package analysis

import (
	"fmt"
	"reflect"

	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// TestDenyUVMRecording replays the nvidia lines of cuinit-deny-uvm.strace
// against an LXC whose device program allows only 195 and 226.
func TestDenyUVMRecording(t *testing.T) {
	evs := denyUVMEvents()
	a := Analyze(evs, lxcDenyUVM(t))

	if a.Failing == nil || a.Failing.Path != "/dev/nvidia-uvm" || a.Failing.Flags != unix.O_RDWR|unix.O_CLOEXEC || a.Failing.Errno() != unix.EPERM {
		t.Fatalf("failing = %+v, want the O_RDWR|O_CLOEXEC open of /dev/nvidia-uvm", a.Failing)
	}
	if a.Failing.Seq != 37 || a.Failing.PID != 639 {
		t.Errorf("failing seq/pid = %d/%d, want 37/639", a.Failing.Seq, a.Failing.PID)
	}
	if a.Findings[0].ID != "cgroup2-denied" || a.Findings[0].Severity != SeverityError {
		t.Fatalf("first finding = %s, want cgroup2-denied error (all: %v)", a.Findings[0].ID, ids(a))
	}
	f := a.Findings[0]
	mustContain(t, "detail", detail(f),
		"`openat(\"/dev/nvidia-uvm\", O_RDWR|O_CLOEXEC)` by python3[639] → EPERM",
		"Retried as `openat(\"/dev/nvidia-uvm\", O_RDWR)` → EPERM",
		"/dev/nvidia-uvm is c 238:0, owned by driver nvidia-uvm (/proc/devices).",
		"Mode 0666", "so permissions are not the cause",
		"Denied by cgroup v2 device program id 57 (lxc_devices) attached to /lxc/200.",
		"That program allows c 195:* rwm and c 226:* rwm only.",
		"c 238:0 rw")
	mustContain(t, "fix", f.Fix, "lxc.cgroup2.devices.allow: c 238:* rwm", "/etc/pve/lxc/200.conf", "restart", "dynamic")
	if !reflect.DeepEqual(f.Events, []uint64{37, 38}) {
		t.Errorf("events = %v, want [37 38]", f.Events)
	}
	want := `cuInit cannot succeed: openat("/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) by python3[639] → EPERM: denied by cgroup v2 device program 57.`
	if a.Verdict != want {
		t.Errorf("verdict\n got %s\nwant %s", a.Verdict, want)
	}
	ok := find(t, a, "calls-ok")
	mustContain(t, "calls-ok", detail(ok), "/dev/nvidiactl (c 195:255) opened 2x, allowed; 14 ioctls")
	if ok.Severity != SeverityInfo {
		t.Errorf("calls-ok severity %s", ok.Severity)
	}
	// The /dev/char and nvidia-modprobe ENOENTs and the EBADF ioctl are noise.
	for _, bad := range []string{"node-missing", "call-failed", "modprobe-failed", "mig-caps"} {
		if has(a, bad) {
			t.Errorf("unexpected finding %s", bad)
		}
	}
}

func TestCgroup2ANDAcrossPrograms(t *testing.T) {
	s := lxcDenyUVM(t)
	root := snapshot.DeviceProgram{ID: 12, AttachedTo: "/", Instructions: runcProgram(t, nil, true)}
	second := snapshot.DeviceProgram{ID: 60, AttachedTo: "/lxc/200/ns", Instructions: runcProgram(t, []devRule{{238, false}}, true)}
	s.CgroupV2.Programs = append([]snapshot.DeviceProgram{root}, append(s.CgroupV2.Programs, second)...)
	a := Analyze(denyUVMEvents(), s)
	f := find(t, a, "cgroup2-denied")
	mustContain(t, "summary", f.Summary, "programs 57, 60 deny")
	mustContain(t, "detail", detail(f), "program id 57", "program id 60", "Program id 12 attached to / allows it", "That program denies c 238:* rwm; allows everything else.")
	if strings.Contains(detail(f), "Denied by cgroup v2 device program id 12") {
		t.Error("the allowing program is named as a denier")
	}
	mustContain(t, "verdict", a.Verdict, "denied by cgroup v2 device programs 57, 60")
}

// The fix goes where the denying program is: one inherited from above the
// container (a slice, a parent the runtime does not manage) is named, and
// the container's own config is offered only where a program below can
// replace it (BPF_F_ALLOW_OVERRIDE).
func TestCgroup2FixWhereTheProgramIs(t *testing.T) {
	for _, c := range []struct {
		flags       uint32
		wants, nots []string
	}{
		{bpfAllowMulti, []string{"inherited from /machine.slice", "BPF_F_ALLOW_MULTI", "cannot lift it", "Allow `c 238:* rwm` in the device cgroup /machine.slice", "bpftool cgroup show /sys/fs/cgroup/machine.slice"}, []string{"/etc/pve/lxc/200.conf"}},
		{0, []string{"inherited from /machine.slice", "no device program can be attached below it", "the device cgroup /machine.slice"}, []string{"/etc/pve/lxc/200.conf"}},
		{bpfAllowOverride, []string{"inherited from /machine.slice", "BPF_F_ALLOW_OVERRIDE", "replaces it", "/etc/pve/lxc/200.conf"}, nil},
	} {
		s := lxcDenyUVM(t)
		s.CgroupV2.Programs[0].AttachedTo = "/machine.slice"
		s.CgroupV2.Programs[0].AttachFlags = c.flags
		f := find(t, Analyze(denyUVMEvents(), s), "cgroup2-denied")
		mustContain(t, fmt.Sprintf("fix (flags %d)", c.flags), f.Fix, c.wants...)
		for _, n := range c.nots {
			if strings.Contains(f.Fix, n) {
				t.Errorf("flags %d: fix offers %q, which cannot help:\n%s", c.flags, n, f.Fix)
			}
		}
	}
	// The container's own program (LXC's on /lxc/200, the payload in
	// /lxc/200/ns) keeps the container's fix.
	f := find(t, Analyze(denyUVMEvents(), lxcDenyUVM(t)), "cgroup2-denied")
	if strings.Contains(f.Fix, "inherited from") {
		t.Errorf("LXC's own program taken for an inherited one:\n%s", f.Fix)
	}
}

func TestCgroup2FixPerRuntime(t *testing.T) {
	cases := []struct {
		c     snapshot.Container
		wants []string
	}{
		{snapshot.Container{Runtime: "docker", ID: "abc"}, []string{"--device /dev/nvidia-uvm", "--device-cgroup-rule 'c 238:* rwm'", "nvidia-ctk cdi generate"}},
		{snapshot.Container{Runtime: "kubernetes", PodUID: "u"}, []string{"NVIDIA device plugin", "CDI"}},
		{snapshot.Container{Runtime: "systemd", Unit: "train.service"}, []string{"DeviceAllow=char-nvidia-uvm rw", "train.service"}},
		// Plain LXC writes "key = value"; Proxmox "key: value".
		{snapshot.Container{Runtime: "lxc", ID: "gpu1", Manager: "lxc"}, []string{"lxc.cgroup2.devices.allow = c 238:* rwm", "/var/lib/lxc/gpu1/config"}},
		{snapshot.Container{Runtime: "lxc", ID: "gpu1", Manager: "lxc", Config: "/srv/ct/gpu1.conf"}, []string{"lxc.cgroup2.devices.allow = c 238:* rwm", "/srv/ct/gpu1.conf on the host"}},
		{snapshot.Container{Runtime: "lxc", ID: "901", ProxmoxCTID: "901", Manager: "proxmox"}, []string{"lxc.cgroup2.devices.allow: c 238:* rwm", "/etc/pve/lxc/901.conf", "pct reboot 901"}},
		{snapshot.Container{Runtime: "runc", ID: "ct1"}, []string{`{"allow": true, "type": "c", "major": 238, "access": "rwm"}`, "linux.resources.devices", "runc run"}},
		{snapshot.Container{Runtime: "crun", ID: "ct1"}, []string{"linux.resources.devices", "crun run"}},
		{snapshot.Container{}, []string{"c 238:* rwm", "/lxc/200/ns"}},
	}
	for _, c := range cases {
		s := lxcDenyUVM(t)
		s.Container = c.c
		// Attached where that runtime attaches it: LXC on /lxc/ID (the
		// payload in /lxc/ID/ns), the others on the target's cgroup.
		s.CgroupV2.Programs[0].AttachedTo = s.CgroupV2.Path
		if c.c.Runtime == "lxc" {
			s.CgroupV2.Path = "/lxc/" + c.c.ID + "/ns"
			s.CgroupV2.Programs[0].AttachedTo = "/lxc/" + c.c.ID
		}
		f := find(t, Analyze(denyUVMEvents(), s), "cgroup2-denied")
		mustContain(t, "fix for "+c.c.Runtime, f.Fix, c.wants...)
		mustContain(t, "fix for "+c.c.Runtime, f.Fix, "238 is nvidia-uvm's current major")
	}
}

func TestCgroup2StaleMajor(t *testing.T) {
	s := lxcDenyUVM(t)
	s.ProcDevices[4].Major = 509 // nvidia-uvm moved
	s.Nodes[2].Major, s.Nodes[3].Major = 509, 509
	s.CgroupV2.Programs[0].Instructions = runcProgram(t, []devRule{{195, true}, {504, true}}, false)
	evs := denyUVMEvents()
	for i := range evs {
		if evs[i].Dev != nil && evs[i].Dev.Major == 238 {
			evs[i].Dev = dev(509, 0)
		}
	}
	a := Analyze(evs, s)
	if a.Findings[0].ID != "cgroup2-denied" || a.Findings[1].ID != "cgroup2-stale-major" {
		t.Fatalf("order %v", ids(a))
	}
	f := a.Findings[1]
	if f.Severity != SeverityError {
		t.Errorf("severity %s", f.Severity)
	}
	mustContain(t, "summary", f.Summary, "the rule allows 504, but nvidia-uvm is now 509")
	mustContain(t, "fix", f.Fix, "Replace c 504:* with c 509:*", "lxc.cgroup2.devices.allow: c 509:* rwm", "/etc/pve/lxc/200.conf")
	mustContain(t, "cgroup2-denied fix", a.Findings[0].Fix, "c 509:* rwm")

	// The same program against a host where 504 is still nvidia-uvm's is
	// not stale.
	s2 := lxcDenyUVM(t)
	s2.CgroupV2.Programs[0].Instructions = runcProgram(t, []devRule{{195, true}, {1, true}}, false)
	if a := Analyze(denyUVMEvents(), s2); has(a, "cgroup2-stale-major") {
		t.Errorf("major 1 (mem) is owned: not stale; got %v", ids(a))
	}
}

func TestCgroup2UnrecognisedProgram(t *testing.T) {
	s := lxcDenyUVM(t)
	// A computed verdict, r0 = major: odd majors pass. It emulates fine but
	// is no generator's block shape.
	s.CgroupV2.Programs[0].Instructions = assemble(t, append(runcPrologue(), asm.Mov.Reg(asm.R0, asm.R4), asm.Return()))
	f := find(t, Analyze(denyUVMEvents(), s), "cgroup2-denied")
	mustContain(t, "detail", detail(f), "program shape was not recognised; its emulated verdict is deny")
}

func TestDaemonReloadPattern(t *testing.T) {
	ctlDenied := func(runtime, cgPath string) (*snapshot.Snapshot, []tracer.Event) {
		s := h200()
		s.Container = snapshot.Container{Runtime: runtime, ID: "abc"}
		s.CgroupV1 = &snapshot.CgroupV1{Path: cgPath, DevicesList: []string{"c 1:3 rwm", "c 195:* m", "c 238:* rwm"}}
		b := newEvents(77, "nvidia-smi")
		b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.EPERM), nil)
		b.open("/dev/nvidiactl", unix.O_RDONLY, errno(unix.EPERM), nil)
		return s, b.evs
	}
	s, evs := ctlDenied("docker", "/docker/abc")
	a := Analyze(evs, s)
	c1 := find(t, a, "cgroup1-denied")
	if a.Findings[0].ID != "cgroup1-denied" {
		t.Fatalf("order %v", ids(a))
	}
	mustContain(t, "detail", detail(c1), "/docker/abc", "c 195:* m names this device but not the access rw", "Retried as `openat(\"/dev/nvidiactl\", O_RDONLY)` → EPERM")
	mustContain(t, "fix", c1.Fix, "--device-cgroup-rule 'c 195:* rwm'")
	if strings.Contains(c1.Fix, "dynamic") {
		t.Error("195 is a fixed major; the fix must not call it dynamic")
	}
	dr := find(t, a, "ctl-denied-daemon-reload")
	if !dr.Inferred || dr.Severity != SeverityWarning {
		t.Errorf("without a systemd cgroup: inferred=%v severity=%s", dr.Inferred, dr.Severity)
	}
	mustContain(t, "detail", detail(dr), "devices.list still allows c 238:0 rw (nvidia-uvm)", "daemon-reload", "docker update")
	mustContain(t, "fix", dr.Fix, "nvidia-ctk system create-dev-char-symlinks --create-all")
	mustContain(t, "verdict", a.Verdict, "by nvidia-smi[77] → EPERM: denied by the cgroup v1 devices list of /docker/abc")

	s, evs = ctlDenied("docker", "/system.slice/docker-abc.scope")
	dr = find(t, Analyze(evs, s), "ctl-denied-daemon-reload")
	if dr.Inferred || dr.Severity != SeverityError {
		t.Errorf("systemd scope: inferred=%v severity=%s", dr.Inferred, dr.Severity)
	}

	s, evs = ctlDenied("lxc", "/lxc/1")
	if a := Analyze(evs, s); has(a, "ctl-denied-daemon-reload") {
		t.Error("LXC has no daemon-reload pattern")
	}
	// cgroup v2 (cuinit-deny-195-smi): the program denies 195 only.
	s = h200()
	s.Container = snapshot.Container{Runtime: "kubernetes"}
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/kubepods.slice/pod.slice/cri-x.scope", Programs: []snapshot.DeviceProgram{
		{ID: 9, AttachedTo: "/kubepods.slice/pod.slice/cri-x.scope", Instructions: runcProgram(t, []devRule{{195, false}}, true)}}}
	_, evs = ctlDenied("kubernetes", "")
	a = Analyze(evs, s)
	find(t, a, "cgroup2-denied")
	dr = find(t, a, "ctl-denied-daemon-reload")
	mustContain(t, "detail", detail(dr), "the cgroup v2 programs still allow c 238:0 rw (nvidia-uvm)")
	if dr.Inferred {
		t.Error("systemd slice shown: not inferred")
	}
}

func TestCgroupDeniedInferred(t *testing.T) {
	s := h200()
	s.Container = snapshot.Container{Runtime: "lxc", ProxmoxCTID: "105"}
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/lxc/105/ns", QueryError: "BPF_PROG_QUERY: operation not permitted"}
	a := Analyze(denyUVMEvents(), s)
	f := a.Findings[0]
	if f.ID != "cgroup-denied-inferred" || !f.Inferred || f.Severity != SeverityError {
		t.Fatalf("first finding %+v", f)
	}
	mustContain(t, "detail", detail(f), "BPF_PROG_QUERY: operation not permitted", "inferred", "seccomp")
	mustContain(t, "fix", f.Fix, "lxc.cgroup2.devices.allow: c 238:* rwm", "/etc/pve/lxc/105.conf", "To confirm")
	mustContain(t, "verdict", a.Verdict, "probably denied by the device cgroup")

	// On /dev/nvidia0 the excluded-GPU alternative is spelled out.
	b := newEvents(5, "python3")
	b.open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.EPERM), nil)
	f = find(t, Analyze(b.evs, s), "cgroup-denied-inferred")
	mustContain(t, "detail", detail(f), "NVreg_ExcludedGpus", "not set")

	// Nothing collected at all (e.g. an imported strace log).
	f = find(t, Analyze(denyUVMEvents(), nil), "cgroup-denied-inferred")
	if !f.Inferred {
		t.Error("not inferred")
	}
}

func TestEPERMNotCgroup(t *testing.T) {
	s := h200()
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/user.slice"} // no programs: allows all
	s.Process.Seccomp = 2
	a := Analyze(denyUVMEvents(), s)
	f := find(t, a, "eperm-unexplained")
	mustContain(t, "detail", detail(f), "no cgroup v2 device program is attached", "Seccomp: 2")
	if has(a, "cgroup2-denied") || has(a, "cgroup-denied-inferred") {
		t.Errorf("cgroup blamed: %v", ids(a))
	}
}

func TestGPUExcluded(t *testing.T) {
	s := h200()
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/"}
	s.Driver.Params["ExcludedGpus"] = "0000:00:06.0"
	b := newEvents(5, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.EPERM), nil)
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "gpu-excluded" || f.Inferred {
		t.Fatalf("got %+v (%v)", f, ids(a))
	}
	mustContain(t, "detail", detail(f), "0000:00:06.0", "/dev/nvidia0 is c 195:0, owned by driver nvidia (/proc/devices)", "not a cgroup denial")
	mustContain(t, "fix", f.Fix, "NVreg_ExcludedGpus")
}

func TestNodeMissingNonRoot(t *testing.T) {
	s := h200()
	s.Nodes = s.Nodes[:2]
	s.Nodes = append(s.Nodes, snapshot.Node{Path: "/dev/nvidia-uvm"})
	s.Process = snapshot.Process{PID: 700, UID: 65534, GID: 65534}
	b := newEvents(700, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.stat("/dev/nvidia-uvm", errno(unix.ENOENT), nil)
	b.mknod("/dev/nvidia-uvm", errno(unix.EACCES), dev(238, 0))
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.ENOENT), nil)
	b.open("/dev/nvidia-uvm", unix.O_RDWR, errno(unix.ENOENT), nil)
	a := Analyze(b.evs, s)
	if a.Failing == nil || a.Failing.Seq != 4 {
		t.Fatalf("failing %+v, want the first ENOENT open (seq 4)", a.Failing)
	}
	f := a.Findings[0]
	if f.ID != "node-missing" || f.Severity != SeverityError {
		t.Fatalf("first %v", ids(a))
	}
	mustContain(t, "detail", detail(f),
		"Before that, `mknodat(\"/dev/nvidia-uvm\", S_IFCHR|0666, makedev(238, 0))` by python3[700] → EACCES.",
		"does not exist", "c 238:0", "no CAP_MKNOD",
		"nvidia-uvm is registered at major 238")
	mustContain(t, "fix", f.Fix, "nvidia-modprobe -u -c=0")
	if !reflect.DeepEqual(f.Events, []uint64{3, 4, 5}) {
		t.Errorf("events %v", f.Events)
	}
	mustContain(t, "verdict", a.Verdict, "→ ENOENT: /dev/nvidia-uvm does not exist.")

	// In an LXC, the fix binds the host node in.
	s.Container = snapshot.Container{Runtime: "lxc", ProxmoxCTID: "200"}
	f = find(t, Analyze(b.evs, s), "node-missing")
	mustContain(t, "fix", f.Fix, "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file", "/etc/pve/lxc/200.conf")
}

func TestNodeStaleMajor(t *testing.T) {
	s := h200()
	s.ProcDevices[4].Major = 509
	s.Process = snapshot.Process{UID: 1000, GID: 1000}
	b := newEvents(800, "python3")
	b.stat("/dev/nvidia-uvm", 0, dev(504, 0))
	b.unlink("/dev/nvidia-uvm", errno(unix.EACCES))
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.ENXIO), nil)
	b.open("/dev/nvidia-uvm", unix.O_RDWR, errno(unix.ENXIO), nil)
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "node-stale-major" || f.Severity != SeverityError || a.Failing.Seq != 3 {
		t.Fatalf("got %v failing %+v", ids(a), a.Failing)
	}
	mustContain(t, "summary", f.Summary, "c 504:0", "nvidia-uvm is now 509")
	mustContain(t, "detail", detail(f), "major 504", "registered at 509", "belongs to no driver", "`unlink(\"/dev/nvidia-uvm\")` by python3[800] → EACCES")
	mustContain(t, "fix", f.Fix, "mknod -m 666 /dev/nvidia-uvm c 509 0", "nvidia-modprobe -u -c=0")
	mustContain(t, "verdict", a.Verdict, "→ ENXIO: the node's major 504 is stale; nvidia-uvm is 509")
}

func TestNodeRepairedAsRoot(t *testing.T) {
	s := h200()
	s.ProcDevices[4].Major = 509
	s.Nodes[2].Major, s.Nodes[3].Major = 509, 509
	b := newEvents(900, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.stat("/dev/nvidia-uvm", 0, dev(504, 0))
	b.unlink("/dev/nvidia-uvm", 0)
	b.mknod("/dev/nvidia-uvm", 0, dev(509, 0))
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, 4, dev(509, 0))
	a := Analyze(b.evs, s)
	if a.Failing != nil {
		t.Fatalf("failing %+v on a repaired run", a.Failing)
	}
	f := find(t, a, "node-repaired")
	if f.Severity != SeverityWarning {
		t.Errorf("severity %s", f.Severity)
	}
	mustContain(t, "summary", f.Summary, "the run is not clean: the node was recreated by libcuda")
	mustContain(t, "detail", detail(f), "it was c 504:0; nvidia-uvm is 509", "makedev(509, 0)")
	if !strings.HasPrefix(a.Verdict, "No NVIDIA device call failed.") || !strings.Contains(a.Verdict, "not clean") {
		t.Errorf("verdict %q", a.Verdict)
	}
	if has(a, "node-stale-major") {
		t.Error("the snapshot node is current; no stale finding")
	}
}

func TestDriverNotLoaded(t *testing.T) {
	s := h200()
	s.ProcDevices = []snapshot.DriverMajor{{Major: 1, Name: "mem"}, {Major: 4, Name: "tty"}}
	s.Nodes = nil
	b := newEvents(1, "python3")
	b.stat("/dev/nvidiactl", errno(unix.ENOENT), nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.ENOENT), nil)
	a := Analyze(b.evs, s)
	find(t, a, "node-missing")
	f := find(t, a, "driver-not-loaded")
	if f.Severity != SeverityError {
		t.Errorf("severity %s", f.Severity)
	}
	mustContain(t, "detail", detail(f), "no major 195")
	mustContain(t, "fix", f.Fix, "modprobe nvidia")

	// nvidia-uvm not registered: ENOENT on its node says so.
	s = h200()
	s.ProcDevices = s.ProcDevices[:4]
	s.Nodes = s.Nodes[:2]
	b = newEvents(1, "python3")
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.ENOENT), nil)
	f = find(t, Analyze(b.evs, s), "driver-not-loaded")
	mustContain(t, "summary", f.Summary, "nvidia-uvm")
	mustContain(t, "fix", f.Fix, "nvidia-modprobe -u -c=0")

	// ENXIO on a major nobody owns.
	s = h200()
	s.ProcDevices = s.ProcDevices[:4]
	b = newEvents(1, "python3")
	b.open("/dev/nvidia-uvm", unix.O_RDWR, errno(unix.ENXIO), nil)
	a = Analyze(b.evs, s)
	f = a.Findings[0]
	if f.ID != "driver-not-loaded" {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "No driver owns major 238")
}

func TestNodev(t *testing.T) {
	s := h200()
	s.Mounts = []snapshot.Mount{{MountPoint: "/dev", FSType: "tmpfs", Source: "tmpfs", Options: []string{"rw", "nosuid", "nodev"}, NoDev: true}}
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.EACCES), nil)
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "nodev" {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "mounted nodev", "rw,nosuid,nodev")
	mustContain(t, "fix", f.Fix, "mount -o remount,dev /dev", "bind-mount")
}

func TestModeDenied(t *testing.T) {
	s := h200()
	s.Nodes[0].Mode, s.Nodes[0].GID = 0o660, 44
	s.Process = snapshot.Process{UID: 1000, GID: 1000, Groups: []uint32{1000, 27}}
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.EACCES), nil)
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "mode-denied" {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "uid 1000", "0660", "gid 44", "read/write")
	mustContain(t, "fix", f.Fix, "group 44", "NVreg_DeviceFileMode=0666")
	if strings.Contains(f.Fix, "keep-groups") {
		t.Error("rootless advice without a user namespace")
	}
	s.Process.UserNS = true
	f = find(t, Analyze(b.evs, s), "mode-denied")
	mustContain(t, "fix", f.Fix, "--group-add keep-groups", "--userns keep-id")

	// In the group: not a mode problem.
	s.Process.UserNS = false
	s.Process.Groups = append(s.Process.Groups, 44)
	a = Analyze(b.evs, s)
	if has(a, "mode-denied") || !has(a, "eacces-unexplained") {
		t.Errorf("member of the group: got %v", ids(a))
	}
}

func TestMIGCaps(t *testing.T) {
	s := h200()
	b := newEvents(3, "nvidia-smi")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia-caps/nvidia-cap1", unix.O_RDONLY|unix.O_CLOEXEC, errno(unix.ENOENT), nil)
	a := Analyze(b.evs, s)
	f := find(t, a, "mig-caps")
	mustContain(t, "detail", detail(f), "nvidia-cap1", "nvidia-caps is registered at major 241")
	mustContain(t, "fix", f.Fix, "nvidia-caps")
	if a.Failing == nil || a.Failing.Seq != 2 {
		t.Errorf("failing %+v", a.Failing)
	}
	// A core-node failure outranks a caps one.
	b.open("/dev/nvidia-uvm", unix.O_RDWR, errno(unix.ENOENT), nil)
	if a := Analyze(b.evs, s); a.Failing.Path != "/dev/nvidia-uvm" {
		t.Errorf("failing %s", a.Failing.Path)
	}
}

func TestLibcudaStubAndCompat(t *testing.T) {
	b := newEvents(3, "python3")
	b.open("/usr/local/cuda/lib64/stubs/libcuda.so", unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
	s := h200()
	s.Env = map[string]string{"LD_LIBRARY_PATH": "/usr/local/cuda/lib64/stubs"}
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "libcuda-stub" || f.Severity != SeverityError || a.Failing == nil || a.Failing.Seq != 1 {
		t.Fatalf("got %v failing %+v", ids(a), a.Failing)
	}
	mustContain(t, "verdict", a.Verdict, "stub libcuda", "34")
	mustContain(t, "fix", f.Fix, "LD_LIBRARY_PATH")

	b = newEvents(3, "python3")
	b.open("/usr/local/cuda/compat/libcuda.so.1", unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, 4, dev(195, 255))
	a = Analyze(b.evs, h200())
	f = find(t, a, "libcuda-compat")
	if f.Severity != SeverityWarning || a.Failing != nil {
		t.Errorf("compat: %s failing %v", f.Severity, a.Failing)
	}
	mustContain(t, "detail", detail(f), "804")
}

func TestVersionMismatch(t *testing.T) {
	s := h200()
	s.KernelLog = []snapshot.KernelLine{{Seq: 1, Text: "NVRM: API mismatch: the client has the version 580.159.04, but this kernel module has the version 580.142."}}
	s.Host.DriverVersion = "580.142"
	b := newEvents(3, "python3")
	b.open("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, 4, dev(195, 255))
	arg := make([]byte, 72)
	copy(arg[8:], "580.142")
	b.add(tracer.Event{Kind: tracer.KindIoctl, FD: 4, Request: 0xc04846d2, Ret: errno(unix.EINVAL), Dev: dev(195, 255), Arg: arg})
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "version-mismatch" || a.Failing == nil || a.Failing.Seq != 3 {
		t.Fatalf("got %v failing %+v", ids(a), a.Failing)
	}
	mustContain(t, "detail", detail(f), "ioctl(4, NV_ESC_CHECK_VERSION_STR)", "answered with its version: 580.142", "libcuda.so.580.159.04", "API mismatch")
	mustContain(t, "verdict", a.Verdict, "→ EINVAL: it loaded libcuda 580.159.04 from /usr/lib/x86_64-linux-gnu, and the kernel module is 580.142")
	// The installed driver, newer than the module: an upgrade not yet
	// rebooted into, not a library to remove.
	mustContain(t, "fix", f.Fix, "Reboot")
	// The kernel log alone is enough.
	b = newEvents(3, "python3")
	if a := Analyze(b.evs, s); !has(a, "version-mismatch") || !strings.Contains(a.Verdict, "do not match") {
		t.Errorf("log only: %v %q", ids(a), a.Verdict)
	}
}

func TestRMInitFailedAndGPULost(t *testing.T) {
	s := h200()
	s.KernelLog = []snapshot.KernelLine{{Seq: 1, Text: "NVRM: RmInitAdapter failed! (0x62:0x65:1792)"}}
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.EIO), nil)
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "rm-init-failed" || f.Severity != SeverityError {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "RmInitAdapter failed! (0x62:0x65:1792)", "→ EIO")
	mustContain(t, "fix", f.Fix, "GSP firmware", "580.159.04")

	s.KernelLog = []snapshot.KernelLine{{Seq: 2, Text: "NVRM: Xid (PCI:0000:00:06): 79, pid=1, GPU has fallen off the bus."}}
	b = newEvents(3, "python3")
	b.open("/dev/nvidia0", unix.O_RDWR, errno(unix.ENODEV), nil)
	a = Analyze(b.evs, s)
	f = a.Findings[0]
	if f.ID != "gpu-lost" {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "79, pid=1, GPU has fallen off the bus")
}

func TestSeccompMemfd(t *testing.T) {
	s := h200()
	s.Process.Seccomp = 2
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.add(tracer.Event{Kind: tracer.KindMemfd, Path: "cuda", Flags: 1, Ret: errno(unix.EPERM)})
	a := Analyze(b.evs, s)
	f := a.Findings[0]
	if f.ID != "seccomp-memfd" || f.Inferred || a.Failing.Kind != tracer.KindMemfd {
		t.Fatalf("got %+v", f)
	}
	mustContain(t, "detail", detail(f), "304")
	mustContain(t, "fix", f.Fix, "seccomp=unconfined")
	s.Process.Seccomp = 0
	if f := find(t, Analyze(b.evs, s), "seccomp-memfd"); !f.Inferred {
		t.Error("Seccomp 0 in the snapshot: inferred")
	}
}

func TestCudaVisibleDevices(t *testing.T) {
	for _, c := range []struct {
		v    string
		hide bool
	}{{"", true}, {"-1", true}, {"1", true}, {"0", false}, {"0,1", false}, {"GPU-8a1b", false}, {"x,0", true}, {" 0 ", false}} {
		s := h200()
		s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": c.v}
		b := newEvents(3, "python3")
		b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
		a := Analyze(b.evs, s)
		if has(a, "cuda-visible-devices-hides-all") != c.hide {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: hides=%v, want %v", c.v, !c.hide, c.hide)
		}
		if c.hide {
			mustContain(t, "verdict", a.Verdict, "hides every GPU")
			// A GPU node that was opened disproves it.
			b.open("/dev/nvidia0", unix.O_RDWR, 4, dev(195, 0))
			if has(Analyze(b.evs, s), "cuda-visible-devices-hides-all") {
				t.Errorf("%q: /dev/nvidia0 was opened", c.v)
			}
		}
	}
	// Unset: nothing.
	if has(Analyze(nil, h200()), "cuda-visible-devices-hides-all") {
		t.Error("unset variable flagged")
	}
}

func TestUVMInitFailure(t *testing.T) {
	s := h200()
	s.Driver.UVMParams = map[string]string{}
	b := newEvents(3, "python3")
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, 5, dev(238, 0))
	arg := make([]byte, 16)
	arg[8] = 0x40 // NV_ERR_INVALID_STATE
	b.add(tracer.Event{Kind: tracer.KindIoctl, FD: 5, Request: 0x30000001, Dev: dev(238, 0), Arg: arg})
	a := Analyze(b.evs, s)
	if a.Failing == nil || a.Failing.Request != 0x30000001 {
		t.Fatalf("failing %+v", a.Failing)
	}
	mustContain(t, "verdict", a.Verdict, "ioctl(5, UVM_INITIALIZE)", "NV_ERR_INVALID_STATE")
	f := find(t, a, "uvm-hmm")
	if !f.Inferred || f.Severity != SeverityWarning {
		t.Errorf("uvm-hmm %+v", f)
	}
	mustContain(t, "fix", f.Fix, "uvm_disable_hmm=1")
	s.Driver.UVMParams["uvm_disable_hmm"] = "Y"
	if has(Analyze(b.evs, s), "uvm-hmm") {
		t.Error("HMM already disabled")
	}
	// A successful UVM_INITIALIZE is not a hint.
	arg[8] = 0
	if a := Analyze(b.evs, h200()); has(a, "uvm-hmm") || a.Failing != nil {
		t.Errorf("ok init: %v", ids(a))
	}
}

func TestModprobeFailed(t *testing.T) {
	s := h200()
	s.Nodes = s.Nodes[:0]
	b := newEvents(10, "python3")
	b.stat("/dev/nvidiactl", errno(unix.ENOENT), nil)
	b.mknod("/dev/nvidiactl", errno(unix.EACCES), dev(195, 255))
	mp := newEvents(11, "nvidia-modprobe")
	mp.seq = b.seq
	mp.add(tracer.Event{Kind: tracer.KindExec, Path: "/usr/bin/nvidia-modprobe", Argv: []string{"nvidia-modprobe", "-c=0"}})
	mp.add(tracer.Event{Kind: tracer.KindExit, ExitCode: 1})
	b.seq = mp.seq
	b.evs = append(b.evs, mp.evs...)
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.ENOENT), nil)
	a := Analyze(b.evs, s)
	f := find(t, a, "modprobe-failed")
	mustContain(t, "detail", detail(f), "nvidia-modprobe[11] exited 1", `"-c=0"`)
	nm := find(t, a, "node-missing")
	mustContain(t, "node-missing", detail(nm), "libcuda ran `execve(\"/usr/bin/nvidia-modprobe\"", "exited 1", "mknodat(\"/dev/nvidiactl\"")
	mustContain(t, "fix", nm.Fix, "nvidia-modprobe -c=0")
}

func TestCleanRunNoise(t *testing.T) {
	b := newEvents(623, "python3")
	ctl := dev(195, 255)
	b.stat("/dev/nvidiactl", 0, ctl)
	b.unlink("/dev/char/195:255", errno(unix.ENOENT))
	b.symlink("../nvidiactl", "/dev/char/195:255", errno(unix.ENOENT))
	b.stat("/usr/bin/nvidia-modprobe", errno(unix.ENOENT), nil)
	b.open("/dev/shm/cuda_injection_path_shm", unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, errno(unix.ENOENT), nil)
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, ctl)
	// A retried open that then succeeds is recovered from.
	b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, errno(unix.EPERM), nil)
	b.open("/dev/nvidia-uvm", unix.O_RDWR, 4, dev(238, 0))
	b.ioctl(4, 0x30000001, 0, dev(238, 0))
	b.ioctl(4, 0x4b, 0, dev(238, 0))
	a := Analyze(b.evs, h200())
	if a.Failing != nil {
		t.Fatalf("failing %+v", a.Failing)
	}
	// Without CUDA's return code the headline must not claim CUDA started.
	if a.Verdict != "No NVIDIA device call failed. CUDA's own return code is unknown (this trace did not record it), so this does not show that CUDA started." {
		t.Errorf("verdict %q", a.Verdict)
	}
	if len(a.Findings) != 1 || a.Findings[0].ID != "calls-ok" {
		t.Fatalf("findings %v", ids(a))
	}
	mustContain(t, "calls-ok", detail(a.Findings[0]), "/dev/nvidiactl (c 195:255) opened 1x, allowed", "/dev/nvidia-uvm (c 238:0) opened 1x, allowed; 2 ioctls")

	if a := Analyze(nil, nil); a.Failing != nil || !strings.Contains(a.Verdict, "touched no /dev/nvidia* node") || a.Findings == nil {
		t.Errorf("empty: %+v", a)
	}
}

func TestOrderAndDeterminism(t *testing.T) {
	s := lxcDenyUVM(t)
	s.KernelLog = []snapshot.KernelLine{{Text: "NVRM: GSP firmware: Cannot initialize GSP firmware RM"}}
	s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0"}
	evs := denyUVMEvents()
	evs = append(evs, tracer.Event{Seq: 99, PID: 639, Kind: tracer.KindOpen, Path: "/usr/local/cuda/compat/libcuda.so.1", Ret: 3})
	before := append([]tracer.Event(nil), evs...)
	a := Analyze(evs, s)
	b := Analyze(evs, s)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs differ")
	}
	if !reflect.DeepEqual(evs, before) {
		t.Fatal("Analyze changed its input")
	}
	rank := -1
	for _, f := range a.Findings {
		r := severityRank(f.Severity)
		if r < rank {
			t.Fatalf("out of order: %v", ids(a))
		}
		rank = r
	}
	if a.Findings[0].ID != "cgroup2-denied" {
		t.Errorf("first %v", ids(a))
	}
	for _, id := range []string{"rm-init-failed", "libcuda-compat", "calls-ok"} {
		find(t, a, id)
	}
	// Failing is a copy: changing it leaves the input alone.
	a.Failing.Path = "x"
	if evs[36].Path != "/dev/nvidia-uvm" {
		t.Error("Failing aliases the input")
	}
}

func TestStaleNodeInSnapshotOnly(t *testing.T) {
	s := h200()
	s.ProcDevices[4].Major = 509
	s.Nodes[2].Major = 509 // uvm was fixed, uvm-tools still has 238
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	a := Analyze(b.evs, s)
	f := find(t, a, "node-stale-major")
	if f.Severity != SeverityWarning || a.Failing != nil {
		t.Errorf("severity %s failing %v", f.Severity, a.Failing)
	}
	mustContain(t, "summary", f.Summary, "/dev/nvidia-uvm-tools is c 238:1, but nvidia-uvm is now 509")
	mustContain(t, "fix", f.Fix, "mknod -m 666 /dev/nvidia-uvm-tools c 509 1")
	// Without CUDA's return code the headline must not claim CUDA started.
	if a.Verdict != "No NVIDIA device call failed. CUDA's own return code is unknown (this trace did not record it), so this does not show that CUDA started." {
		t.Errorf("verdict %q", a.Verdict)
	}
}

func TestEACCESUnexplained(t *testing.T) {
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.EACCES), nil)
	a := Analyze(b.evs, h200()) // mode 0666, /dev not nodev
	f := a.Findings[0]
	if f.ID != "eacces-unexplained" || !f.Inferred {
		t.Fatalf("got %+v", f)
	}
	mustContain(t, "detail", detail(f), "AppArmor")
}

// BenchmarkAnalyze runs a torch-sized trace: ~2,000 events, mostly ioctls
// on nvidiactl/nvidia0/nvidia-uvm, ending in the deny-uvm failure.
func BenchmarkAnalyze(b *testing.B) {
	s := lxcDenyUVM(b)
	eb := newEvents(639, "python3")
	eb.open("/dev/nvidiactl", unix.O_RDWR, 8, dev(195, 255))
	eb.open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 9, dev(195, 0))
	for i := 0; i < 1600; i++ {
		eb.ioctl(8, 0xc020462a, 0, dev(195, 255))
		if i%8 == 0 {
			eb.ioctl(9, 0xc00446c9, 0, dev(195, 0))
			eb.stat("/dev/nvidiactl", 0, dev(195, 255))
			eb.open("/dev/char/195:255", unix.O_RDONLY, errno(unix.ENOENT), nil)
		}
	}
	eb.evs = append(eb.evs, denyUVMEvents()...)
	for i := range eb.evs {
		eb.evs[i].Seq = uint64(i + 1)
	}
	if len(eb.evs) < 1900 {
		b.Fatalf("only %d events", len(eb.evs))
	}
	b.ReportAllocs()
	for b.Loop() {
		a := Analyze(eb.evs, s)
		if a.Failing == nil || a.Failing.Path != "/dev/nvidia-uvm" {
			b.Fatal("wrong failing call")
		}
	}
}

func TestDeferredOpenFailure(t *testing.T) {
	b := newEvents(3, "python3")
	b.open("/dev/nvidia0", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 5, dev(195, 0))
	arg := []byte{0xfb, 0xff, 0xff, 0xff, 0x62, 0, 0, 0} // rc -5 (EIO), adapterStatus 0x62
	b.add(tracer.Event{Kind: tracer.KindIoctl, FD: 5, Request: 0xc00846da, Dev: dev(195, 0), Arg: arg})
	a := Analyze(b.evs, h200())
	if a.Failing == nil || a.Failing.Seq != 2 {
		t.Fatalf("failing %+v", a.Failing)
	}
	f := a.Findings[0]
	if f.ID != "rm-init-failed" {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "ioctl(5, NV_ESC_WAIT_OPEN_COMPLETE)", "rc -5 (EIO)", "adapterStatus")
	// rc 0: the deferred open worked.
	arg[0], arg[1], arg[2], arg[3] = 0, 0, 0, 0
	if a := Analyze(b.evs, h200()); a.Failing != nil {
		t.Errorf("rc 0 flagged: %v", ids(a))
	}
}

func TestUVMModuleNotLoadedWarning(t *testing.T) {
	s := h200()
	s.ProcDevices = s.ProcDevices[:4] // nvidia, nvidiactl, drm: no nvidia-uvm
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	a := Analyze(b.evs, s)
	f := find(t, a, "driver-not-loaded")
	if f.Severity != SeverityWarning || a.Failing != nil {
		t.Errorf("severity %s failing %v", f.Severity, a.Failing)
	}
	mustContain(t, "summary", f.Summary, "nvidia-uvm")
}

func TestPre545FrontendName(t *testing.T) {
	s := h200()
	s.ProcDevices = []snapshot.DriverMajor{{Major: 195, Name: "nvidia-frontend"}, {Major: 511, Name: "nvidia-uvm"}}
	s.Nodes = nil
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/docker/x", Programs: []snapshot.DeviceProgram{{ID: 3, AttachedTo: "/docker/x", Instructions: runcProgram(t, []devRule{{511, true}}, false)}}}
	s.Container = snapshot.Container{Runtime: "docker"}
	b := newEvents(3, "python3")
	b.stat("/dev/nvidiactl", 0, dev(195, 255))
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.EPERM), nil)
	a := Analyze(b.evs, s)
	f := find(t, a, "cgroup2-denied")
	mustContain(t, "detail", detail(f), "/dev/nvidiactl is c 195:255, owned by driver nvidia-frontend (/proc/devices).")
	mustContain(t, "fix", f.Fix, "--device-cgroup-rule 'c 195:* rwm'")
	// The 195 split (>= 545) names the region by minor.
	s2 := h200()
	s2.ProcDevices = append(s2.ProcDevices, snapshot.DriverMajor{Major: 195, Name: "nvidia-modeset"})
	for minor, want := range map[uint32]string{255: "nvidiactl", 254: "nvidia-modeset", 0: "nvidia", 7: "nvidia"} {
		if got := nvdev.DriverName(s2, 195, minor); got != want {
			t.Errorf("driverName(195, %d) = %q, want %q", minor, got, want)
		}
	}
	if got := nvdev.DriverName(s2, 238, 0); got != "nvidia-uvm" {
		t.Errorf("uvm: %q", got)
	}
	if got := nvdev.DriverName(s2, 100, 0); got != "" {
		t.Errorf("unowned: %q", got)
	}
}

func TestNvidiaSmiVerdict(t *testing.T) {
	s := h200()
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/x", Programs: []snapshot.DeviceProgram{{ID: 4, Instructions: runcProgram(t, []devRule{{195, false}}, true)}}}
	b := newEvents(651, "nvidia-smi")
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.EPERM), nil)
	b.open("/dev/nvidiactl", unix.O_RDONLY, errno(unix.EPERM), nil)
	want := `nvidia-smi (NVML) cannot initialise: openat("/dev/nvidiactl", O_RDWR) by nvidia-smi[651] → EPERM: denied by cgroup v2 device program 4.`
	if a := Analyze(b.evs, s); a.Verdict != want {
		t.Errorf("verdict\n got %s\nwant %s", a.Verdict, want)
	}
}

func TestRepairFailedWithoutOpen(t *testing.T) {
	s := h200()
	s.Process = snapshot.Process{PID: 9, UID: 1000, GID: 1000}
	s.Nodes = s.Nodes[:2]
	b := newEvents(9, "python3")
	b.stat("/dev/nvidia-uvm", errno(unix.ENOENT), nil)
	b.mknod("/dev/nvidia-uvm", errno(unix.EPERM), dev(238, 0))
	a := Analyze(b.evs, s)
	if a.Failing == nil || a.Failing.Kind != tracer.KindMknod {
		t.Fatalf("failing %+v", a.Failing)
	}
	f := a.Findings[0]
	if f.ID != "node-missing" {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "mknodat(\"/dev/nvidia-uvm\", S_IFCHR|0666, makedev(238, 0))", "no CAP_MKNOD")
	mustContain(t, "verdict", a.Verdict, "→ EPERM: libcuda could not recreate /dev/nvidia-uvm")
}

func TestUnrecognisedFailureStillExplained(t *testing.T) {
	b := newEvents(9, "python3")
	b.open("/dev/nvidia0", unix.O_RDWR, errno(unix.EBUSY), nil)
	a := Analyze(b.evs, h200())
	f := a.Findings[0]
	if f.ID != "call-failed" || f.Severity != SeverityError {
		t.Fatalf("got %v", ids(a))
	}
	mustContain(t, "detail", detail(f), "sequestered", "/dev/nvidia0 is c 195:0")
	mustContain(t, "verdict", a.Verdict, "→ EBUSY")
}

func TestNodevByMountPrefix(t *testing.T) {
	s := h200()
	s.Nodes = nil // mount found by path prefix, not by the node's entry
	s.Mounts = []snapshot.Mount{
		{MountPoint: "/", FSType: "overlay"},
		{MountPoint: "/dev", FSType: "tmpfs", Options: []string{"nodev"}, NoDev: true},
		{MountPoint: "/dev/shm", FSType: "tmpfs"},
	}
	b := newEvents(9, "python3")
	b.open("/dev/nvidiactl", unix.O_RDONLY, errno(unix.EACCES), nil)
	f := find(t, Analyze(b.evs, s), "nodev")
	mustContain(t, "summary", f.Summary, "(/dev)")
}

// A target that dies on another device before touching NVIDIA nodes
// (PyTorch on /dev/urandom) still learns that its /dev is nodev.
func TestNodevWithoutFailedNVIDIAOpen(t *testing.T) {
	s := &snapshot.Snapshot{
		Nodes: []snapshot.Node{
			{Path: "/dev/nvidia-caps/nvidia-cap1", Exists: true, Type: "c", Major: 241, Minor: 1, Mode: 0o400, MountPoint: "/dev"},
			{Path: "/dev/nvidiactl", Exists: true, Type: "c", Major: 195, Minor: 255, Mode: 0o666, MountPoint: "/dev"},
		},
		Mounts: []snapshot.Mount{{MountPoint: "/dev", FSType: "tmpfs", Options: []string{"rw", "nodev"}, NoDev: true}},
	}
	a := Analyze(nil, s)
	f := find(t, a, "nodev")
	if f.Severity != SeverityError || !strings.Contains(f.Summary, "/dev/nvidiactl") || !strings.Contains(f.Fix, "remount,dev /dev") {
		t.Fatalf("nodev finding = %+v", f)
	}
	if a.Failing != nil {
		t.Fatalf("no call failed, but Failing = %+v", a.Failing)
	}
}

// When a major carries a non-NVIDIA name too, the NVIDIA one names the owner.
func TestDriverNamePrefersNVIDIA(t *testing.T) {
	s := &snapshot.Snapshot{ProcDevices: []snapshot.DriverMajor{{Major: 7, Name: "vcs"}, {Major: 7, Name: "nvidia-uvm"}}}
	if got := nvdev.DriverName(s, 7, 0); got != "nvidia-uvm" {
		t.Fatalf("driverName = %q, want nvidia-uvm", got)
	}
	s.ProcDevices = []snapshot.DriverMajor{{Major: 4, Name: "tty"}, {Major: 4, Name: "ttyS"}}
	if got := nvdev.DriverName(s, 4, 0); got != "tty/ttyS" {
		t.Fatalf("driverName = %q, want tty/ttyS", got)
	}
}

// Under ptrace the target's only filter is cudatrace's own: never reported
// as the target's, in any finding.
func TestOwnSeccompFilterNotTargets(t *testing.T) {
	s := h200()
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/user.slice"}
	s.Process.Seccomp, s.Process.SeccompFilters = 2, 1
	own := Facts{OwnSeccompFilters: 1}
	check := func(a Result) {
		t.Helper()
		for _, f := range a.Findings {
			if text := detail(f); strings.Contains(text, "runs under") || strings.Contains(text, "Seccomp: 2") {
				t.Errorf("%s reports cudatrace's filter as the target's:\n%s", f.ID, text)
			}
		}
	}
	a := AnalyzeFacts(denyUVMEvents(), s, own)
	mustContain(t, "detail", detail(find(t, a, "eperm-unexplained")), "cudatrace's own")
	check(a)
	b := newEvents(3, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	b.add(tracer.Event{Kind: tracer.KindMemfd, Path: "cuda", Flags: 1, Ret: errno(unix.EPERM)})
	a = AnalyzeFacts(b.evs, s, own)
	if f := find(t, a, "seccomp-memfd"); !f.Inferred {
		t.Error("seccomp-memfd with only cudatrace's filter: not inferred")
	}
	check(a)
	// And a filter of the target's own beside cudatrace's is reported.
	s.Process.SeccompFilters = 2
	mustContain(t, "detail", detail(find(t, AnalyzeFacts(denyUVMEvents(), s, own), "eperm-unexplained")), "1 seccomp filter(s) of its own")
}

// Another driver's node at an NVIDIA path (a bind mount of /dev/null over
// /dev/nvidia-uvm): the open works, UVM_INITIALIZE gets ENOTTY. The node's
// major is the headline and the error; no HMM hint outranks or joins it.
func TestForeignNodeAtNVIDIAPath(t *testing.T) {
	for _, c := range []struct {
		path string
		req  uint32
		d    *tracer.Dev
	}{
		{"/dev/nvidia-uvm", nvdev.UVMInitialize, dev(1, 3)},
		{"/dev/nvidiactl", 0xc00846d6, dev(1, 5)},
	} {
		t.Run(c.path, func(t *testing.T) {
			b := newEvents(8, "python3")
			if c.path != "/dev/nvidiactl" {
				b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
			}
			b.open(c.path, unix.O_RDWR|unix.O_CLOEXEC, 4, c.d)
			b.ioctl(4, c.req, errno(unix.ENOTTY), c.d)
			b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Ret: 999})
			a := AnalyzeFacts(b.evs, h200(), Facts{APIReturns: true})
			if a.Failing == nil || a.Failing.Kind != tracer.KindIoctl {
				t.Fatalf("failing %+v", a.Failing)
			}
			if a.Findings[0].ID != "wrong-driver" || a.Findings[0].Severity != SeverityError {
				t.Errorf("findings %v", ids(a))
			}
			f := find(t, a, "wrong-driver")
			mustContain(t, "summary", f.Summary, c.path, fmt.Sprintf("c %d:%d", c.d.Major, c.d.Minor), "mem")
			mustContain(t, "fix", f.Fix, "findmnt "+c.path)
			mustContain(t, "verdict", a.Verdict, c.path+" is a node of mem (major 1)")
			if has(a, "uvm-hmm") {
				t.Errorf("HMM hint for another driver's node: %v", ids(a))
			}
		})
	}
}
