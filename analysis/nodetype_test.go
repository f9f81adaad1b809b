package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// lxcPlaceholderRun is lxc-execute's start as traced from the host: the
// container's setup process makes the bind-mount target with
// mknodat(S_IFREG|0), then execs the program, which stats and opens it.
func lxcPlaceholderRun(placeholderStays bool) []tracer.Event {
	b := newEvents(4689, "lxc-execute")
	b.add(tracer.Event{Kind: tracer.KindMknod, Syscall: "mknodat", Path: "/dev/nvidia-uvm", Mode: unix.S_IFREG})
	b.add(tracer.Event{Kind: tracer.KindExec, Syscall: "execve", Path: "/fakecuda", Argv: []string{"/fakecuda"}})
	b.comm = "fakecuda"
	b.open("/dev/nvidiactl", unix.O_RDWR, 3, dev(195, 255))
	if placeholderStays {
		b.add(tracer.Event{Kind: tracer.KindStat, Path: "/dev/nvidia-uvm", Mode: unix.S_IFREG})
		b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, 4, nil)
	} else {
		b.stat("/dev/nvidia-uvm", 0, dev(238, 0))
		b.open("/dev/nvidia-uvm", unix.O_RDWR|unix.O_CLOEXEC, 4, dev(238, 0))
	}
	b.open("/dev/nvidia0", unix.O_RDWR|unix.O_CLOEXEC, 5, dev(195, 0))
	return b.evs
}

func plainLXC(s *snapshot.Snapshot) *snapshot.Snapshot {
	s.Container = snapshot.Container{Runtime: "lxc", ID: "ct901", Manager: "lxc"}
	return s
}

// LXC's own mknodat of a mount placeholder is not libcuda repairing a node.
func TestLXCPlaceholderIsNotARepair(t *testing.T) {
	a := Analyze(lxcPlaceholderRun(false), plainLXC(h200()))
	if has(a, "node-repaired") || has(a, "node-not-device") {
		t.Fatalf("clean LXC start reported: %+v", a.Findings)
	}
	if strings.Contains(a.Verdict, "recreated") || !strings.HasPrefix(a.Verdict, "No NVIDIA device call failed") {
		t.Errorf("verdict %q", a.Verdict)
	}
	// A device node made before the process's own exec is the runtime's
	// setup (runc's linux.devices), not libcuda's either.
	b := newEvents(7, "runc:[2:INIT]")
	b.mknod("/dev/nvidia-uvm", 0, dev(238, 0))
	b.add(tracer.Event{Kind: tracer.KindExec, Path: "/app"})
	b.open("/dev/nvidia-uvm", unix.O_RDWR, 3, dev(238, 0))
	if a := Analyze(b.evs, h200()); has(a, "node-repaired") {
		t.Errorf("runtime's mknod before exec reported as a repair: %+v", a.Findings)
	}
	// The same mknod by the program itself still is one.
	b = newEvents(8, "python3")
	b.stat("/dev/nvidia-uvm", errno(unix.ENOENT), nil)
	b.mknod("/dev/nvidia-uvm", 0, dev(238, 0))
	b.open("/dev/nvidia-uvm", unix.O_RDWR, 3, dev(238, 0))
	if a := Analyze(b.evs, h200()); !has(a, "node-repaired") {
		t.Errorf("libcuda's own repair not reported: %+v", a.Findings)
	}
}

// The placeholder LXC leaves when the host node was missing at container
// start opens fine but is a regular file: an error, with the reason and
// the fix in plain LXC's syntax.
func TestLXCPlaceholderLeftBehind(t *testing.T) {
	s := plainLXC(h200())
	for i := range s.Nodes {
		if s.Nodes[i].Path == "/dev/nvidia-uvm" {
			s.Nodes[i] = snapshot.Node{Path: "/dev/nvidia-uvm", Exists: true, Type: "f", MountPoint: "/dev"}
		}
	}
	for _, snap := range []*snapshot.Snapshot{s, plainLXC(h200())} { // the trace's stat alone suffices
		a := Analyze(lxcPlaceholderRun(true), snap)
		f := find(t, a, "node-not-device")
		if f.Severity != SeverityError {
			t.Errorf("severity %s", f.Severity)
		}
		mustContain(t, "summary", f.Summary, "/dev/nvidia-uvm is a regular file, not a character device")
		mustContain(t, "detail", strings.Join(f.Detail, "\n"), "lxc-execute[4689] created it as an empty file", "did not exist when the container started", "so LXC bound nothing over it", "fails (ENOTTY)")
		mustContain(t, "fix", f.Fix, "nvidia-modprobe -u -c=0", "restart the container", "`lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file`", "/var/lib/lxc/ct901/config")
		if !strings.HasPrefix(a.Verdict, "cuInit cannot succeed: /dev/nvidia-uvm is a regular file") {
			t.Errorf("verdict %q", a.Verdict)
		}
		if c := findOpt(a, "calls-ok"); c != nil && strings.Contains(c.Summary, "nvidia-uvm") {
			t.Errorf("calls-ok still lists the placeholder: %s", c.Summary)
		}
		if has(a, "node-repaired") {
			t.Error("placeholder reported as a repair")
		}
	}
	// Proxmox syntax for a Proxmox container.
	s.Container = snapshot.Container{Runtime: "lxc", ID: "901", ProxmoxCTID: "901", Manager: "proxmox"}
	f := find(t, Analyze(lxcPlaceholderRun(true), s), "node-not-device")
	mustContain(t, "proxmox fix", f.Fix, "`lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file`", "/etc/pve/lxc/901.conf", "pct reboot 901")
}

// Any /dev/nvidia* path that is not a character device is a finding,
// whoever made it: a directory, a symlink loop.
func TestNvidiaPathNotADevice(t *testing.T) {
	b := newEvents(9, "python3")
	b.add(tracer.Event{Kind: tracer.KindStat, Path: "/dev/nvidia0", Mode: unix.S_IFDIR | 0o755})
	f := find(t, Analyze(b.evs, h200()), "node-not-device")
	mustContain(t, "dir", f.Summary, "/dev/nvidia0 is a directory")
	mustContain(t, "dir fix", f.Fix, "`rm -r /dev/nvidia0`")

	b = newEvents(9, "python3")
	b.open("/dev/nvidiactl", unix.O_RDWR, errno(unix.ELOOP), nil)
	f = find(t, Analyze(b.evs, h200()), "node-not-device")
	mustContain(t, "loop", f.Summary, "/dev/nvidiactl is a symlink loop")

	// A character device is not.
	b = newEvents(9, "python3")
	b.stat("/dev/nvidia0", 0, dev(195, 0))
	b.open("/dev/nvidia0", unix.O_RDWR, 3, dev(195, 0))
	if a := Analyze(b.evs, h200()); has(a, "node-not-device") {
		t.Errorf("char device flagged: %+v", a.Findings)
	}
}

func findOpt(a Result, id string) *Finding {
	for i := range a.Findings {
		if a.Findings[i].ID == id {
			return &a.Findings[i]
		}
	}
	return nil
}
