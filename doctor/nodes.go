package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
)

// checkNodes: one row per node CUDA opens.
func checkNodes(h *host) []Check {
	needs := h.needs()
	if len(needs) == 0 {
		return []Check{{ID: "nodes", Category: CatNodes, Status: Skip, Subject: "/dev/nvidia*",
			Summary: "no NVIDIA driver registered in /proc/devices and no /dev/nvidia* nodes: nothing to check (see driver checks)"}}
	}
	var out []Check
	for _, nd := range needs {
		out = append(out, checkNode(h, nd))
	}
	return out
}

func checkNode(h *host, nd need) Check {
	c := Check{ID: "node", Category: CatNodes, Status: Pass, Subject: nd.path}
	n := nd.node
	if n == nil || !n.Exists {
		c.ID = "node-missing"
		if !nd.required {
			c.Status = Pass
			c.Summary = "absent (not needed to start CUDA)"
			return c
		}
		c.Status = Fail
		c.Summary = "missing: CUDA cannot start without it"
		if nd.known {
			c.Detail = append(c.Detail, fmt.Sprintf("It would be %s: %s is registered at major %d in /proc/devices.", devText(nd.major, nd.minor), nd.driver, nd.regMajor))
		} else if !nd.regOK {
			c.Detail = append(c.Detail, "Its driver is not registered in /proc/devices either: the kernel module is not loaded.")
		}
		fix := nvdev.BindNodeFix(h.b, nd.path)
		if fix == "" {
			fix = nvdev.NodeCreateFix(nd.path)
		} else {
			fix = nvdev.NodeCreateFix(nd.path) + "\n" + fix
		}
		c.Fix = fix
		return c
	}
	var problems []string
	var fixes []string
	bad := func(st Status, summary, fix string) {
		c.Status = worst(c.Status, st)
		problems = append(problems, summary)
		if fix != "" {
			fixes = append(fixes, fix)
		}
	}
	if n.Type != "c" {
		bad(Fail, fmt.Sprintf("is %s, not a character device", typeWord(n.Type)),
			fmt.Sprintf("Remove %s and recreate it: %s", nd.path, nvdev.NodeCreateFix(nd.path)))
	} else {
		owner := nvdev.DriverName(h.b, n.Major, n.Minor)
		if nd.regOK && n.Major != nd.regMajor {
			bad(Fail, fmt.Sprintf("is %s but %s is at major %d now (a stale node from before a driver reload)", devText(n.Major, n.Minor), nd.driver, nd.regMajor),
				fmt.Sprintf("Recreate it with the current major: `rm %s && mknod -m 0666 %s c %d %d` (or reload the driver's node creation: %s)", nd.path, nd.path, nd.regMajor, expectMinor(nd, n), strings.TrimSuffix(nvdev.NodeCreateFix(nd.path), ".")))
		} else if !nd.regOK && owner == "" && len(h.b.ProcDevices) > 0 {
			bad(Fail, fmt.Sprintf("is %s, and no driver holds major %d in /proc/devices", devText(n.Major, n.Minor), n.Major), nvdev.NodeCreateFix(nd.path))
		}
		if x, ok := nvdev.ExpectedNode(nd.path); ok && x.MinorKnown && n.Minor != x.Minor && (!nd.regOK || n.Major == nd.regMajor) {
			bad(Fail, fmt.Sprintf("has minor %d; %s must be minor %d", n.Minor, nd.path, x.Minor),
				fmt.Sprintf("Recreate it: `rm %s && mknod -m 0666 %s c %d %d`", nd.path, nd.path, n.Major, x.Minor))
		}
	}
	if m := mountOf(h.b, n); m != nil && m.NoDev {
		bad(Fail, fmt.Sprintf("is on the nodev mount %s: every device open there fails with EACCES", m.MountPoint),
			fmt.Sprintf("Remount %s without nodev (`mount -o remount,dev %s`), or bind-mount the host's nodes there.", m.MountPoint, m.MountPoint))
	}
	// MIG capability nodes are root-only by design; only CUDA's own
	// nodes must be usable by the user.
	if !nvdev.IsCapsNode(nd.path) && !h.root && n.Type == "c" {
		if !dacAllowsRW(n, h.user) {
			bad(Fail, fmt.Sprintf("mode %04o owner %d:%d does not let %s open it read-write (EACCES)", n.Mode, n.UID, n.GID, h.userText()),
				fmt.Sprintf("Make it usable by the user: `chmod 0666 %s` now, and for good set the driver's NVreg_DeviceFileMode=0666 (or NVreg_DeviceFileGID to a group the user is in); nvidia-modprobe creates the uvm nodes 0666 root:root.", nd.path))
		}
	}
	desc := fmt.Sprintf("%s, mode %04o, owner %d:%d", devText(n.Major, n.Minor), n.Mode, n.UID, n.GID)
	if name := nvdev.DriverName(h.b, n.Major, n.Minor); name != "" && n.Type == "c" {
		desc += ", driver " + name
	}
	if len(problems) == 0 {
		c.Summary = desc
		if h.root && !nvdev.IsCapsNode(nd.path) {
			c.Detail = append(c.Detail, "Permissions checked for root, which bypasses the mode; use -u USER for the user who runs CUDA.")
		}
		return c
	}
	c.Summary = problems[0]
	c.Detail = append([]string{nd.path + " is " + desc + "."}, problems[1:]...)
	c.Fix = strings.Join(fixes, "\n")
	return c
}

func expectMinor(nd need, n *snapshot.Node) uint32 {
	if x, ok := nvdev.ExpectedNode(nd.path); ok && x.MinorKnown {
		return x.Minor
	}
	return n.Minor
}

func typeWord(t string) string {
	switch t {
	case "b":
		return "a block device"
	case "l":
		return "a symlink"
	case "f":
		return "a regular file"
	case "d":
		return "a directory"
	}
	return "not a device node"
}

// mountOf is the mount holding n: its recorded mount point, else the
// longest prefix.
func mountOf(s *snapshot.Snapshot, n *snapshot.Node) *snapshot.Mount {
	var best *snapshot.Mount
	for i := range s.Mounts {
		m := &s.Mounts[i]
		if n.MountPoint != "" {
			if m.MountPoint == n.MountPoint {
				best = m
			}
			continue
		}
		if mp := strings.TrimSuffix(m.MountPoint, "/"); n.Path == m.MountPoint || strings.HasPrefix(n.Path, mp+"/") {
			if best == nil || len(m.MountPoint) >= len(best.MountPoint) {
				best = m
			}
		}
	}
	return best
}

// dacAllowsRW applies the mode bits to a read-write open by u.
func dacAllowsRW(n *snapshot.Node, u snapshot.Creds) bool {
	var bits uint32
	switch {
	case u.UID == n.UID:
		bits = n.Mode >> 6
	case u.GID == n.GID || slices.Contains(u.Groups, n.GID):
		bits = n.Mode >> 3
	default:
		bits = n.Mode
	}
	return bits&6 == 6
}

// checkCharLinks: the /dev/char/MAJ:MIN links runc's systemd driver
// resolves device rules through (nvidia-container-toolkit #48).
func checkCharLinks(h *host) []Check {
	c := Check{ID: "dev-char-links", Category: CatNodes, Status: Pass, Subject: "/dev/char"}
	if len(h.sv.CharLinks) == 0 {
		c.Status = Skip
		c.Summary = "no NVIDIA character nodes to link"
		return c.one()
	}
	var missing, broken []string
	for _, l := range h.sv.CharLinks {
		switch {
		case !l.Exists:
			missing = append(missing, l.Link+" → "+l.Node)
		case !l.Resolves:
			broken = append(broken, fmt.Sprintf("%s → %s does not lead to %s", l.Link, l.Dest, l.Node))
		}
	}
	if len(missing)+len(broken) == 0 {
		c.Summary = fmt.Sprintf("%s present", plural(len(h.sv.CharLinks), "link", "links"))
		return c.one()
	}
	c.Detail = append(append(c.Detail, missing...), broken...)
	c.Detail = append(c.Detail, "runc's systemd cgroup driver turns device rules into systemd DeviceAllow= entries through /dev/char/MAJ:MIN; without the link, `systemctl daemon-reload` re-applies the rules without the GPU and running containers lose it (\"Failed to initialize NVML: Unknown Error\"; nvidia-container-toolkit #48).")
	c.Fix = "Create them now and at every boot: `nvidia-ctk system create-dev-char-symlinks --create-all`, and a udev rule such as `ACTION==\"add\", DEVPATH==\"/bus/pci/drivers/nvidia\", RUN+=\"/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all\"` (/lib/udev/rules.d/71-nvidia-dev-char.rules)."
	what := fmt.Sprintf("%d of %d NVIDIA /dev/char links missing or wrong", len(missing)+len(broken), len(h.sv.CharLinks))
	switch {
	case h.b.Container.Runtime != "":
		c.Summary = what + " (inside a container they do not matter)"
		c.Fix = ""
	case len(h.sv.SystemdRuntimes) > 0:
		c.Status = Warn
		c.Summary = what + "; " + strings.Join(h.sv.SystemdRuntimes, ", ") + " runs under systemd here, so a daemon-reload strips GPUs from its containers"
	default:
		c.Summary = what + "; harmless here (no runc-based runtime under systemd)"
		c.Fix = ""
	}
	return c.one()
}

func (c Check) one() []Check { return []Check{c} }
