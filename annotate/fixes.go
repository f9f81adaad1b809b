package annotate

import (
	"fmt"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
)

// runtimeKind buckets snapshot.Container.Runtime into the families whose
// remedies differ.
func runtimeKind(s *snapshot.Snapshot) string {
	switch strings.ToLower(s.Container.Runtime) {
	case "lxc", "lxd", "incus":
		return "lxc"
	case "docker", "podman":
		return "docker"
	case "kubernetes", "containerd", "cri-o", "crio":
		return "kubernetes"
	case "systemd":
		return "systemd"
	}
	return ""
}

// dynamicMajorNote explains that a non-195 major must be re-checked.
func dynamicMajorNote(major uint32, name string) string {
	if major == nvdev.Major || name == "" {
		return ""
	}
	return fmt.Sprintf("%d is %s's current major in /proc/devices (decimal; `stat -c %%t` prints it in hex). It is assigned dynamically and can change after a module reload, driver upgrade or new kernel, so re-check it then.", major, name)
}

// deviceAllowFix is the remedy for a device cgroup that does not allow
// major (the CURRENT registered major of driver name, decimal). v is "v1" or
// "v2": LXC uses different config keys for them. node is the path, for
// Docker's --device and systemd's DeviceAllow.
func deviceAllowFix(s *snapshot.Snapshot, v string, major uint32, name, node, cgroupPath string) string {
	rule := fmt.Sprintf("c %d:* rwm", major)
	var lines []string
	switch runtimeKind(s) {
	case "lxc":
		key := "lxc.cgroup2.devices.allow"
		if v == "v1" {
			key = "lxc.cgroup.devices.allow"
		}
		if id := s.Container.ProxmoxCTID; id != "" {
			lines = append(lines, fmt.Sprintf("Add `%s: %s` to /etc/pve/lxc/%s.conf on the Proxmox host, then restart the container (`pct reboot %s`).", key, rule, id, id))
		} else {
			lines = append(lines, fmt.Sprintf("Add `%s: %s` to the container's config (e.g. /var/lib/lxc/<name>/config), then restart the container.", key, rule))
		}
		if v == "v2" {
			lines = append(lines, "On a cgroup v2 host the v1 key `lxc.cgroup.devices.allow` has no effect; use the cgroup2 key.")
		}
	case "docker":
		lines = append(lines, fmt.Sprintf("Run the container with `--device %s` or `--device-cgroup-rule '%s'`, or let the NVIDIA Container Toolkit add the devices (`--gpus all`, or CDI: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` then `--device nvidia.com/gpu=all`).", node, rule))
	case "kubernetes":
		lines = append(lines, "Request the GPU through the NVIDIA device plugin (`resources.limits: nvidia.com/gpu`) or CDI rather than hand-written device rules; if a CDI spec is in use, regenerate it (`nvidia-ctk cdi generate`) so it carries the current majors.")
	case "systemd":
		unit := s.Container.Unit
		if unit == "" {
			unit = "<unit>"
		}
		dn := name
		if dn == "" {
			dn = fmt.Sprintf("%d", major)
		}
		lines = append(lines, fmt.Sprintf("Add `DeviceAllow=char-%s rw` to %s (`systemctl edit %s`), then restart it.", dn, unit, unit))
	default:
		where := "the device cgroup that holds the target"
		if cgroupPath != "" {
			where = fmt.Sprintf("the device cgroup %s", cgroupPath)
		}
		if v == "v1" && cgroupPath != "" {
			lines = append(lines, fmt.Sprintf("Allow `%s` in %s, e.g. `echo '%s' > /sys/fs/cgroup/devices%s/devices.allow`, and fix whatever manages that cgroup so it keeps the rule.", rule, where, rule, cgroupPath))
		} else {
			lines = append(lines, fmt.Sprintf("Allow `%s` in %s (whatever manages that cgroup must add the rule to its device program).", rule, where))
		}
	}
	if n := dynamicMajorNote(major, name); n != "" {
		lines = append(lines, n)
	}
	return strings.Join(lines, "\n")
}

// nodeCreateFix is how to create a missing node on the host.
func nodeCreateFix(path string) string {
	switch {
	case path == "/dev/nvidia-uvm" || path == "/dev/nvidia-uvm-tools":
		return "On the host run `nvidia-modprobe -u -c=0` (loads nvidia_uvm and creates /dev/nvidia-uvm and /dev/nvidia-uvm-tools), and make it happen at boot (e.g. `nvidia_uvm` in /etc/modules-load.d/ plus a udev rule, or `ExecStartPre=-/usr/bin/nvidia-modprobe -c0 -u` in the runtime's unit) so containers started later see the node."
	case isCapsNode(path):
		return "On the host run `nvidia-modprobe -f /proc/driver/nvidia/capabilities/mig/config -f /proc/driver/nvidia/capabilities/mig/monitor` (or `nvidia-ctk system create-device-nodes`) to create the capability nodes."
	default:
		return "On the host run `nvidia-modprobe -c=0` or `nvidia-ctk system create-device-nodes --control-devices` to create /dev/nvidiactl and /dev/nvidiaN."
	}
}

// bindNodeFix is how to pass a host node into the target's container.
func bindNodeFix(s *snapshot.Snapshot, path string) string {
	rel := strings.TrimPrefix(path, "/")
	switch runtimeKind(s) {
	case "lxc":
		conf := "the container's config"
		if id := s.Container.ProxmoxCTID; id != "" {
			conf = fmt.Sprintf("/etc/pve/lxc/%s.conf", id)
		}
		return fmt.Sprintf("Bind the host node into the container: add `lxc.mount.entry: %s %s none bind,optional,create=file` to %s and restart it (with `optional`, LXC silently skips a node that did not exist on the host when the container started).", path, rel, conf)
	case "docker":
		return fmt.Sprintf("Pass the node into the container with `--device %s` (or use the NVIDIA Container Toolkit / CDI), and recreate the container after the node exists on the host.", path)
	case "kubernetes":
		return "Let the NVIDIA device plugin or CDI inject the nodes, and make sure they exist on the node before the pod starts."
	}
	return ""
}
