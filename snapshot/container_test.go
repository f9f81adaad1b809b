package snapshot

import (
	"strings"
	"testing"
)

func TestDetectContainer(t *testing.T) {
	const dockerID = "4f1c2b3a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b"
	const ctrID = "8a7e2c1d0f9b8a7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
	tests := []struct {
		name    string
		cgroup  string
		initEnv map[string]string
		want    Container
	}{
		{"host shell, cgroup v2", "0::/user.slice/user-1000.slice/session-3.scope\n", nil,
			Container{Runtime: "systemd", Unit: "session-3.scope"}},
		{"systemd service, hybrid v1", "12:devices:/system.slice/ollama.service\n1:name=systemd:/system.slice/ollama.service\n0::/system.slice/ollama.service\n", nil,
			Container{Runtime: "systemd", Unit: "ollama.service"}},
		{"root cgroup, nothing", "0::/\n", nil, Container{}},
		{"proxmox lxc v2 nested ns", "0::/lxc/200/ns/system.slice/jupyter.service\n", nil,
			Container{Runtime: "lxc", ID: "200", ProxmoxCTID: "200", Unit: "jupyter.service"}},
		{"lxc 4+ payload", "0::/lxc.payload.gpu-box/init.scope\n", nil,
			Container{Runtime: "lxc", ID: "gpu-box", Unit: "init.scope"}},
		{"lxc v1 devices hierarchy", "11:devices:/lxc/101\n1:name=systemd:/lxc/101\n", nil,
			Container{Runtime: "lxc", ID: "101", ProxmoxCTID: "101"}},
		{"docker cgroupfs v1", "12:devices:/docker/" + dockerID + "\n0::/docker/" + dockerID + "\n", nil,
			Container{Runtime: "docker", ID: dockerID}},
		{"docker systemd driver v2", "0::/system.slice/docker-" + dockerID + ".scope\n", nil,
			Container{Runtime: "docker", ID: dockerID, Unit: "docker-" + dockerID + ".scope"}},
		{"docker inside proxmox lxc", "0::/lxc/300/ns/system.slice/docker-" + dockerID + ".scope\n", nil,
			Container{Runtime: "docker", ID: dockerID, ProxmoxCTID: "300", Unit: "docker-" + dockerID + ".scope"}},
		{"rootless podman", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + ctrID + ".scope/container\n", nil,
			Container{Runtime: "podman", ID: ctrID, Unit: "libpod-" + ctrID + ".scope"}},
		{"containerd systemd driver, no k8s", "0::/system.slice/cri-containerd-" + ctrID + ".scope\n", nil,
			Container{Runtime: "containerd", ID: ctrID, Unit: "cri-containerd-" + ctrID + ".scope"}},
		{"kubernetes systemd driver v2", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5e3c1a2b_7d4f_4e1a_9b2c_0d1e2f3a4b5c.slice/cri-containerd-" + ctrID + ".scope\n", nil,
			Container{Runtime: "kubernetes", ID: ctrID, PodUID: "5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c", Unit: "cri-containerd-" + ctrID + ".scope"}},
		{"kubernetes cgroupfs driver v1", "11:devices:/kubepods/besteffort/pod5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c/" + dockerID + "\n", nil,
			Container{Runtime: "kubernetes", ID: dockerID, PodUID: "5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c"}},
		{"kubernetes cri-o", "0::/kubepods.slice/kubepods-pod5e3c1a2b_7d4f_4e1a_9b2c_0d1e2f3a4b5c.slice/crio-" + ctrID + ".scope\n", nil,
			Container{Runtime: "kubernetes", ID: ctrID, PodUID: "5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c", Unit: "crio-" + ctrID + ".scope"}},
		{"cgroup namespace hides path, init says lxc", "0::/\n", map[string]string{"container": "lxc"},
			Container{Runtime: "lxc"}},
		{"inside lxc with cgroupns, a service", "0::/system.slice/train.service\n", map[string]string{"container": "lxc"},
			Container{Runtime: "lxc", Unit: "train.service"}},
		{"cgroup path beats init env", "0::/docker/" + dockerID + "\n", map[string]string{"container": "podman"},
			Container{Runtime: "docker", ID: dockerID}},
		{"lxc monitor is not the container", "0::/lxc.monitor.gpu-box\n", nil, Container{}},
		{"garbage", "not a cgroup file\n::\n", nil, Container{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectContainer(tt.cgroup, tt.initEnv); got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Whose config an LXC container lives in decides the fix's syntax:
// Proxmox "key: value", LXC "key = value".
func TestLXCManager(t *testing.T) {
	cases := []struct {
		id      string
		host    []string
		manager string
		config  string
		ctid    string
	}{
		{"901", []string{"/etc/pve/lxc/901.conf", "/etc/pve/"}, "proxmox", "/etc/pve/lxc/901.conf", "901"},
		{"901", []string{"/etc/pve/"}, "proxmox", "", "901"},
		{"ct901", []string{"/var/lib/lxc/ct901/config", "/var/lib/lxc/"}, "lxc", "/var/lib/lxc/ct901/config", ""},
		{"ct901", nil, "lxc", "", ""}, // lxc-execute -f FILE: no config dir, but no CTID either
		{"901", []string{"/var/lib/lxc/"}, "lxc", "", ""},
		{"901", nil, "", "", "901"}, // nothing says: the numeric guess stands
	}
	for _, c := range cases {
		host := map[string]bool{}
		for _, p := range c.host {
			host[p] = true
		}
		ct := Container{Runtime: "lxc", ID: c.id}
		if strings.Trim(c.id, "0123456789") == "" {
			ct.ProxmoxCTID = c.id
		}
		placeLXC(&ct, func(p string) bool { return host[p] })
		if ct.Manager != c.manager || ct.Config != c.config || ct.ProxmoxCTID != c.ctid {
			t.Errorf("%s on %v: got %+v, want manager %q config %q ctid %q", c.id, c.host, ct, c.manager, c.config, c.ctid)
		}
	}
}

func TestRuntimeFromAncestors(t *testing.T) {
	cases := map[string][]string{
		"runc":       {"sh", "runc", "bash"},
		"crun":       {"crun", "runc"},
		"podman":     {"conmon"},
		"containerd": {"containerd-shim-runc-v2"},
		"lxc":        {"lxc-execute"},
		"":           {"bash", "sshd"},
	}
	for want, comms := range cases {
		if got := RuntimeFromAncestors(comms); got != want {
			t.Errorf("%v: %q, want %q", comms, got, want)
		}
	}
}
