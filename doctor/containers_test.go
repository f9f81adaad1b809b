package doctor

import (
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/snapshot"
)

// A Proxmox container config as the field stories had it: GPU nodes bound
// in, 195 allowed, and the uvm and caps majors of the previous kernel (504,
// 507) while the driver now has uvm at 509 and caps at 237. The snapshot
// section at the end must not count.
const proxmoxStale = `arch: amd64
cores: 8
hostname: llm
memory: 32768
net0: name=eth0,bridge=vmbr0,ip=dhcp,type=veth
ostype: debian
rootfs: local-lvm:vm-101-disk-0,size=64G
unprivileged: 0
lxc.cgroup2.devices.allow: c 195:* rwm
lxc.cgroup2.devices.allow: c 504:* rwm
lxc.cgroup2.devices.allow: c 507:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file

[before-upgrade]
lxc.cgroup2.devices.allow: c 509:* rwm
`

// An LXC config ("key = value") after a reboot: 195 allowed, uvm (511) not.
const lxcMissingUVM = `lxc.include = /usr/share/lxc/config/common.conf
lxc.arch = linux64
lxc.rootfs.path = dir:/var/lib/lxc/cuda/rootfs
lxc.uts.name = cuda
lxc.cgroup2.devices.allow = c 195:* rwm
lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file
lxc.mount.entry = /dev/nvidiactl dev/nvidiactl none bind,optional,create=file
lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file
`

func fieldHost(uvm, caps string, v1 bool) *snapshot.Survey {
	sv := h200Survey()
	sv.Base.ProcDevices = snapshot.ParseProcDevices("195 nvidia\n195 nvidiactl\n" + uvm + " nvidia-uvm\n" + caps + " nvidia-caps\n")
	for i := range sv.Base.Nodes {
		n := &sv.Base.Nodes[i]
		if strings.HasPrefix(n.Path, "/dev/nvidia-uvm") {
			n.Major = atoi(uvm)
		}
		if strings.HasPrefix(n.Path, "/dev/nvidia-caps") {
			n.Major = atoi(caps)
		}
	}
	sv.CgroupDevicesV1 = v1
	return sv
}

func atoi(s string) uint32 {
	n := uint32(0)
	for _, c := range s {
		n = n*10 + uint32(c-'0')
	}
	return n
}

func container(manager, name, path, text string) snapshot.ContainerConfig {
	return snapshot.ContainerConfig{Manager: manager, Name: name, Path: path, Lines: snapshot.ParseContainerConfig(text, manager == "proxmox")}
}

func TestProxmoxStaleMajors(t *testing.T) {
	sv := fieldHost("509", "237", false)
	sv.Containers = []snapshot.ContainerConfig{container("proxmox", "101", "/etc/pve/lxc/101.conf", proxmoxStale)}
	c := mustCheck(t, Run(sv), "container", "proxmox container 101", Fail)
	// The line to change, by number and text, and what to change it to.
	if !strings.Contains(c.Summary, "line 10 `lxc.cgroup2.devices.allow: c 504:* rwm`") || !strings.Contains(c.Summary, "nvidia-uvm is major 509") {
		t.Errorf("summary: %q", c.Summary)
	}
	if !strings.Contains(c.Fix, "In /etc/pve/lxc/101.conf change line 10 `lxc.cgroup2.devices.allow: c 504:* rwm` to `lxc.cgroup2.devices.allow: c 509:* rwm`") ||
		!strings.Contains(c.Fix, "pct reboot 101") {
		t.Errorf("fix: %q", c.Fix)
	}
	// The [before-upgrade] snapshot's 509 line is not the container's.
	sv.Containers[0].Lines = snapshot.ParseContainerConfig(strings.Replace(proxmoxStale, "c 504:* rwm", "c 509:* rwm", 1), true)
	mustCheck(t, Run(sv), "container", "proxmox container 101", Pass)
}

func TestLXCMissingUVMAfterReboot(t *testing.T) {
	sv := fieldHost("511", "237", false)
	sv.Containers = []snapshot.ContainerConfig{container("lxc", "cuda", "/var/lib/lxc/cuda/config", lxcMissingUVM)}
	c := mustCheck(t, Run(sv), "container", "lxc container cuda", Fail)
	if !strings.Contains(c.Summary, "no line allows nvidia-uvm (c 511:*)") ||
		!strings.Contains(c.Fix, "Add `lxc.cgroup2.devices.allow = c 511:* rwm` to /var/lib/lxc/cuda/config") {
		t.Errorf("summary %q fix %q", c.Summary, c.Fix)
	}
}

func TestLXCKeyForTheHostsCgroupVersion(t *testing.T) {
	// A v1 key on a v2 host does nothing: the line must change key.
	text := strings.ReplaceAll(lxcMissingUVM, "lxc.cgroup2.devices.allow = c 195:* rwm", "lxc.cgroup.devices.allow = c 195:* rwm\nlxc.cgroup.devices.allow = c 238:* rwm")
	sv := fieldHost("238", "241", false)
	sv.Containers = []snapshot.ContainerConfig{container("lxc", "cuda", "/var/lib/lxc/cuda/config", text)}
	c := mustCheck(t, Run(sv), "container", "lxc container cuda", Fail)
	if !strings.Contains(c.Summary, "lxc.cgroup.devices.allow, which this cgroup v2 host ignores") ||
		!strings.Contains(c.Fix, "to `lxc.cgroup2.devices.allow = c 195:* rwm`") || !strings.Contains(c.Fix, "to `lxc.cgroup2.devices.allow = c 238:* rwm`") {
		t.Errorf("summary %q fix %q", c.Summary, c.Fix)
	}
	// On a host whose devices controller is v1 the same config is right.
	sv.CgroupDevicesV1 = true
	mustCheck(t, Run(sv), "container", "lxc container cuda", Pass)
}

func TestLXCOptionalMountOfMissingNode(t *testing.T) {
	sv := fieldHost("238", "241", false)
	for i := range sv.Base.Nodes {
		if sv.Base.Nodes[i].Path == "/dev/nvidia-uvm" {
			sv.Base.Nodes[i] = snapshot.Node{Path: "/dev/nvidia-uvm"}
		}
	}
	text := strings.ReplaceAll(lxcMissingUVM, "c 195:* rwm", "c 195:* rwm\nlxc.cgroup2.devices.allow = c 238:* rwm")
	sv.Containers = []snapshot.ContainerConfig{container("lxc", "cuda", "/var/lib/lxc/cuda/config", text)}
	c := mustCheck(t, Run(sv), "container", "lxc container cuda", Fail)
	if !strings.Contains(c.Summary, "line 9") || !strings.Contains(c.Summary, "LXC skips it without a word") {
		t.Errorf("%q", c.Summary)
	}
}

func TestContainerWithoutGPUAndDeviceEntries(t *testing.T) {
	sv := fieldHost("238", "241", false)
	sv.Containers = []snapshot.ContainerConfig{
		container("proxmox", "200", "/etc/pve/lxc/200.conf", "hostname: web\nmemory: 512\n"),
		// Proxmox 8 devN passthrough: the node and rule follow the host.
		container("proxmox", "201", "/etc/pve/lxc/201.conf", "dev0: /dev/nvidia0,gid=44\ndev1: /dev/nvidiactl\ndev2: /dev/nvidia-uvm\n"),
	}
	res := Run(sv)
	if c := mustCheck(t, res, "container", "proxmox container 200", Pass); !strings.Contains(c.Summary, "no NVIDIA devices") {
		t.Errorf("%q", c.Summary)
	}
	mustCheck(t, res, "container", "proxmox container 201", Pass)
}

func TestIncusGeneratedConfig(t *testing.T) {
	sv := fieldHost("509", "237", false)
	sv.Containers = []snapshot.ContainerConfig{container("incus", "ml", "/var/log/incus/ml/lxc.conf",
		"lxc.cgroup2.devices.allow = c 195:* rwm\nlxc.cgroup2.devices.allow = c 504:0 rwm\nlxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,create=file 0 0\n")}
	c := mustCheck(t, Run(sv), "container", "incus container ml", Fail)
	if !strings.Contains(c.Fix, "incus restart ml") {
		t.Errorf("%q", c.Fix)
	}
}

func TestCDISpecs(t *testing.T) {
	sv := h200Survey()
	host := func(maj, min uint32) snapshot.Node {
		return snapshot.Node{Exists: true, Type: "c", Major: maj, Minor: min}
	}
	sv.CDISpecs = []snapshot.CDISpec{
		{Path: "/etc/cdi/nvidia.yaml", Kind: "nvidia.com/gpu", Version: "0.5.0", Nodes: []snapshot.CDINode{
			{Device: "0", Path: "/dev/nvidia0", Major: 195, Minor: 0, Host: host(195, 0)},
			{Path: "/dev/nvidia-uvm", Major: 510, Minor: 0, Host: host(238, 0)},
			{Path: "/dev/nvidiactl", Major: 195, Minor: 255, Host: host(195, 255)},
		}},
		{Path: "/var/run/cdi/nvidia.yaml", Kind: "nvidia.com/gpu", Version: "0.5.0", Nodes: []snapshot.CDINode{
			{Device: "0", Path: "/dev/nvidia0", Major: 195, Minor: 0, Host: host(195, 0)},
			{Path: "/dev/nvidia-uvm", Major: 238, Minor: 0, Host: host(238, 0)},
		}},
		{Path: "/etc/cdi/broken.yaml", ParseError: "error converting YAML to JSON: yaml: line 3: did not find expected key"},
	}
	res := Run(sv)
	c := mustCheck(t, res, "cdi-spec", "CDI /etc/cdi/nvidia.yaml", Fail)
	if !strings.Contains(c.Summary, "records c 510:0 for /dev/nvidia-uvm, which is c 238:0 now") || !strings.Contains(c.Fix, "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml") {
		t.Errorf("%q %q", c.Summary, c.Fix)
	}
	mustCheck(t, res, "cdi-spec", "CDI /var/run/cdi/nvidia.yaml", Pass)
	mustCheck(t, res, "cdi-spec", "CDI /etc/cdi/broken.yaml", Warn)
}

// Both dynamic majors moved (uvm 504 → 509, caps 507 → 237) and the config
// still allows both old ones: each stale line is named with its own
// replacement, not the first line twice.
func TestProxmoxEveryStaleLine(t *testing.T) {
	sv := fieldHost("509", "237", false)
	conf := strings.Replace(proxmoxStale, "lxc.mount.entry: /dev/nvidia0 ", "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir\nlxc.mount.entry: /dev/nvidia0 ", 1)
	sv.Containers = []snapshot.ContainerConfig{container("proxmox", "101", "/etc/pve/lxc/101.conf", conf)}
	c := mustCheck(t, Run(sv), "container", "proxmox container 101", Fail)
	all := c.Summary + "\n" + strings.Join(c.Detail, "\n")
	for _, w := range []string{"line 10 `lxc.cgroup2.devices.allow: c 504:* rwm`", "line 11 `lxc.cgroup2.devices.allow: c 507:* rwm`"} {
		if !strings.Contains(all, w) {
			t.Errorf("lacks %q:\n%s", w, all)
		}
	}
	for _, w := range []string{"change line 10 `lxc.cgroup2.devices.allow: c 504:* rwm` to `lxc.cgroup2.devices.allow: c 509:* rwm`",
		"change line 11 `lxc.cgroup2.devices.allow: c 507:* rwm` to `lxc.cgroup2.devices.allow: c 237:* rwm`"} {
		if !strings.Contains(c.Fix, w) {
			t.Errorf("fix lacks %q:\n%s", w, c.Fix)
		}
	}
}
