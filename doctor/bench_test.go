package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/snapshot"
)

// eightGPUHost is an HGX-like host: 8 GPUs, their nodes and /dev/char
// links, a device program, 50 Proxmox containers passing GPUs through and
// a CDI spec for all 8.
func eightGPUHost() *snapshot.Survey {
	sv := h200Survey()
	b := sv.Base
	b.Nodes, sv.GPUs, sv.CharLinks, sv.SMI = nil, nil, nil, nil
	add := func(p string, maj, min uint32) {
		b.Nodes = append(b.Nodes, snapshot.Node{Path: p, Exists: true, Type: "c", Major: maj, Minor: min, Mode: 0o666, MountPoint: "/dev"})
		sv.CharLinks = append(sv.CharLinks, snapshot.CharLink{Node: p, Link: fmt.Sprintf("/dev/char/%d:%d", maj, min), Exists: true, Resolves: true})
	}
	add("/dev/nvidiactl", 195, 255)
	add("/dev/nvidia-uvm", 238, 0)
	add("/dev/nvidia-uvm-tools", 238, 1)
	spec := snapshot.CDISpec{Path: "/etc/cdi/nvidia.yaml", Kind: "nvidia.com/gpu", Version: "0.5.0"}
	for i := range 8 {
		p := fmt.Sprintf("/dev/nvidia%d", i)
		add(p, 195, uint32(i))
		bus := fmt.Sprintf("0000:%02x:00.0", 0x18+i)
		sv.GPUs = append(sv.GPUs, snapshot.GPUInfo{Bus: bus, Model: "NVIDIA H200", Minor: i})
		sv.SMI = append(sv.SMI, snapshot.SMIGPU{Bus: bus, Persistence: "Enabled", ComputeMode: "Default"})
		spec.Nodes = append(spec.Nodes, snapshot.CDINode{Device: fmt.Sprint(i), Path: p, Major: 195, Minor: int64(i), Host: b.Nodes[len(b.Nodes)-1]})
	}
	sv.CDISpecs = []snapshot.CDISpec{spec}
	b.Driver.GPUs = nil
	for _, g := range sv.GPUs {
		b.Driver.GPUs = append(b.Driver.GPUs, g.Bus)
	}
	b.CgroupV2 = &snapshot.CgroupV2{Path: "/system.slice/x.scope", Programs: []snapshot.DeviceProgram{{ID: 1, AttachedTo: "/system.slice/x.scope", Instructions: runcDeny(999)}}}
	for i := range 50 {
		sv.Containers = append(sv.Containers, container("proxmox", fmt.Sprint(100+i), fmt.Sprintf("/etc/pve/lxc/%d.conf", 100+i), proxmoxConfig(i)))
	}
	return sv
}

func proxmoxConfig(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "arch: amd64\nhostname: ct%d\nmemory: 8192\nlxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 238:* rwm\n", i)
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", fmt.Sprintf("nvidia%d", i%8)} {
		fmt.Fprintf(&b, "lxc.mount.entry: /dev/%s dev/%s none bind,optional,create=file\n", n, n)
	}
	return b.String()
}

func TestEightGPUHostPasses(t *testing.T) {
	res := Run(eightGPUHost())
	if res.Status != Pass || len(res.Checks) < 8+50+9 {
		t.Fatalf("status %s, %d checks\n%s", res.Status, len(res.Checks), dump(res))
	}
}

// BenchmarkRunEightGPUsFiftyContainers times the checks alone (target of
// the whole doctor: < 1 s).
func BenchmarkRunEightGPUsFiftyContainers(b *testing.B) {
	sv := eightGPUHost()
	for b.Loop() {
		Run(sv)
	}
}

// BenchmarkSurveyAndRunFiftyContainers times the whole doctor path on this
// machine (every system read: /proc, cgroups, the loader cache, the
// kernel log) with 50 container configs and an 8-GPU CDI spec on disk.
func BenchmarkSurveyAndRunFiftyContainers(b *testing.B) {
	root := b.TempDir()
	for i := range 50 {
		p := filepath.Join(root, "etc/pve/lxc", fmt.Sprintf("%d.conf", 100+i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(proxmoxConfig(i)), 0o644)
	}
	var spec strings.Builder
	spec.WriteString("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/null\n    major: 1\n    minor: 3\ndevices:\n")
	for i := range 8 {
		fmt.Fprintf(&spec, "- name: \"%d\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia%d\n      hostPath: /dev/zero\n      major: 1\n      minor: 5\n", i, i)
	}
	os.MkdirAll(filepath.Join(root, "etc/cdi"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/cdi/nvidia.yaml"), []byte(spec.String()), 0o644)
	pd := filepath.Join(root, "devices")
	os.WriteFile(pd, []byte("Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n"), 0o644)
	opts := snapshot.SurveyOptions{HostRoot: root, ProcDevicesPath: pd, NvidiaSMI: "-"}
	if sv := snapshot.SurveyHost(opts); len(sv.Containers) != 50 || len(sv.CDISpecs) != 1 {
		b.Fatalf("survey read %d configs, %d specs", len(sv.Containers), len(sv.CDISpecs))
	}
	for b.Loop() {
		Run(snapshot.SurveyHost(opts))
	}
}
