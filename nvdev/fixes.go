package nvdev

import (
	"fmt"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
)

// RuntimeKind buckets snapshot.Container.Runtime into the families whose
// remedies differ.
func RuntimeKind(s *snapshot.Snapshot) string {
	switch strings.ToLower(s.Container.Runtime) {
	case "lxc", "lxd", "incus":
		return "lxc"
	case "docker", "podman":
		return "docker"
	case "kubernetes", "containerd", "cri-o", "crio":
		return "kubernetes"
	case "runc", "crun":
		return "oci"
	case "systemd":
		return "systemd"
	}
	return ""
}

// DynamicMajorNote explains that a non-195 major must be re-checked.
func DynamicMajorNote(major uint32, name string) string {
	if major == nvfile.Major || name == "" {
		return ""
	}
	return fmt.Sprintf("%d is %s's current major in /proc/devices (decimal; `stat -c %%t` prints it in hex). It is assigned dynamically and can change after a module reload, driver upgrade or new kernel, so re-check it then.", major, name)
}

// DeviceAllowFix is the remedy for a device cgroup that does not allow
// major (the CURRENT registered major of driver name, decimal). v is "v1" or
// "v2": LXC uses different config keys for them. node is the path, for
// Docker's --device and systemd's DeviceAllow.
func DeviceAllowFix(s *snapshot.Snapshot, v string, major uint32, name, node, cgroupPath string) string {
	rule := fmt.Sprintf("c %d:* rwm", major)
	var lines []string
	switch RuntimeKind(s) {
	case "lxc":
		key := "lxc.cgroup2.devices.allow"
		if v == "v1" {
			key = "lxc.cgroup.devices.allow"
		}
		lines = append(lines, fmt.Sprintf("Add `%s` to %s, then restart the container%s.", lxcLine(s, key, rule), lxcConfig(s), lxcRestart(s)))
		if v == "v2" {
			lines = append(lines, "On a cgroup v2 host the v1 key `lxc.cgroup.devices.allow` has no effect; use the cgroup2 key.")
		}
	case "docker":
		lines = append(lines, fmt.Sprintf("Run the container with `--device %s` or `--device-cgroup-rule '%s'`, or let the NVIDIA Container Toolkit add the devices (`--gpus all`, or CDI: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` then `--device nvidia.com/gpu=all`).", node, rule))
	case "oci":
		lines = append(lines, fmt.Sprintf("Allow the major in the bundle's config.json: add `{\"allow\": true, \"type\": \"c\", \"major\": %d, \"access\": \"rwm\"}` to linux.resources.devices, then recreate the container (%s run).", major, s.Container.Runtime))
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
	if n := DynamicMajorNote(major, name); n != "" {
		lines = append(lines, n)
	}
	return strings.Join(lines, "\n")
}

// NodeCreateFix is how to create a missing node on the host.
func NodeCreateFix(path string) string {
	switch {
	case path == "/dev/nvidia-uvm" || path == "/dev/nvidia-uvm-tools":
		return "On the host run `nvidia-modprobe -u -c=0` (loads nvidia_uvm and creates /dev/nvidia-uvm and /dev/nvidia-uvm-tools), and make it happen at boot (e.g. `nvidia_uvm` in /etc/modules-load.d/ plus a udev rule, or `ExecStartPre=-/usr/bin/nvidia-modprobe -c0 -u` in the runtime's unit) so containers started later see the node."
	case IsCapsNode(path):
		return "On the host run `nvidia-modprobe -f /proc/driver/nvidia/capabilities/mig/config -f /proc/driver/nvidia/capabilities/mig/monitor` (or `nvidia-ctk system create-device-nodes`) to create the capability nodes."
	default:
		return "On the host run `nvidia-modprobe -c=0` or `nvidia-ctk system create-device-nodes --control-devices` to create /dev/nvidiactl and /dev/nvidiaN."
	}
}

// BindNodeFix is how to pass a host node into the target's container.
func BindNodeFix(s *snapshot.Snapshot, path string) string {
	rel := strings.TrimPrefix(path, "/")
	switch RuntimeKind(s) {
	case "lxc":
		return fmt.Sprintf("Bind the host node into the container: add `%s` to %s and restart it%s (with `optional`, LXC silently skips a node that did not exist on the host when the container started).", lxcLine(s, "lxc.mount.entry", path+" "+rel+" none bind,optional,create=file"), lxcConfig(s), lxcRestart(s))
	case "oci":
		return fmt.Sprintf("Add the node to the bundle's config.json: `{\"path\": \"%s\", \"type\": \"c\", \"major\": M, \"minor\": N}` in linux.devices (M:N from `stat -c '%%t:%%T' %s` on the host, in hex), then recreate the container (%s run).", path, path, s.Container.Runtime)
	case "docker":
		return fmt.Sprintf("Pass the node into the container with `--device %s` (or use the NVIDIA Container Toolkit / CDI), and recreate the container after the node exists on the host.", path)
	case "kubernetes":
		return "Let the NVIDIA device plugin or CDI inject the nodes, and make sure they exist on the node before the pod starts."
	}
	return ""
}

// lxcLine is one config line in the syntax of the container's manager:
// Proxmox "key: value", LXC "key = value".
func lxcLine(s *snapshot.Snapshot, key, value string) string {
	return key + snapshot.ConfigSeparator(lxcManager(s)) + value
}

// lxcManager is "proxmox" or "lxc" (the default: LXC's own syntax).
func lxcManager(s *snapshot.Snapshot) string {
	if s.Container.Manager == "" && s.Container.ProxmoxCTID != "" {
		return "proxmox"
	}
	return s.Container.Manager
}

// lxcConfig names the file the line goes into.
func lxcConfig(s *snapshot.Snapshot) string {
	c := s.Container
	switch {
	case c.Config != "":
		return c.Config + " on the host"
	case lxcManager(s) == "proxmox" && c.ProxmoxCTID != "":
		return fmt.Sprintf("/etc/pve/lxc/%s.conf on the Proxmox host", c.ProxmoxCTID)
	case lxcManager(s) == "proxmox":
		return "/etc/pve/lxc/<CTID>.conf on the Proxmox host"
	case c.ID != "":
		return fmt.Sprintf("the container's config (/var/lib/lxc/%s/config, or the file given to lxc-start/lxc-execute -f)", c.ID)
	}
	return "the container's config (/var/lib/lxc/<name>/config, or the file given to lxc-start/lxc-execute -f)"
}

// lxcRestart is the restart command, when it is known.
func lxcRestart(s *snapshot.Snapshot) string {
	if id := s.Container.ProxmoxCTID; id != "" && lxcManager(s) == "proxmox" {
		return fmt.Sprintf(" (`pct reboot %s`)", id)
	}
	return ""
}
