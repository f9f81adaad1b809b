package snapshot

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The ld.so.cache reader must give the loader's answer: the first
// `ldconfig -p` entry of this machine's ABI, for a few libraries every
// system has.
func TestLdCacheMatchesLdconfig(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("ABI flags known for amd64 and arm64 only")
	}
	data, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skip("no /etc/ld.so.cache: ", err)
	}
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		t.Skip("ldconfig -p: ", err)
	}
	abi := map[string]string{"amd64": "x86-64", "arm64": "AArch64"}[runtime.GOARCH]
	for _, lib := range []string{"libc.so.6", "libm.so.6", "libz.so.1"} {
		want := ""
		for _, line := range strings.Split(string(out), "\n") {
			// "	libc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6"
			f := strings.Fields(line)
			if len(f) >= 4 && f[0] == lib && strings.Contains(f[1], abi) && f[2] == "=>" {
				want = f[3]
				break
			}
		}
		if want == "" {
			continue
		}
		got, err := parseLdCache(data, lib)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || got[0] != want {
			t.Errorf("%s: parsed %v, ldconfig -p says %s first", lib, got, want)
		}
	}
	if _, err := parseLdCache(data[:40], "libc.so.6"); err == nil {
		t.Error("a cut cache parsed without error")
	}
	if _, err := parseLdCache([]byte("ld.so-1.7.0\x00\x00\x00\x00"), "x"); err == nil || !strings.Contains(err.Error(), "pre-2.32") {
		t.Errorf("old format: %v", err)
	}
}

// findLibrary takes the loader's order (LD_LIBRARY_PATH first, non-ELF and
// wrong files skipped) and follows symlinks inside the root, not the host.
func TestFindLibraryInRoot(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	elfBytes, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	fakeTree(t, root, map[string]string{
		"opt/notelf/libcuda.so.1":                       "not an ELF file",
		"usr/local/cuda/lib64/stubs/libcuda.so.1":       "->libcuda.so",
		"usr/lib/x86_64-linux-gnu/libcuda.so.1":         "->/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
		"usr/lib64/libcuda.so.1":                        "->../lib/x86_64-linux-gnu/libcuda.so.1",
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1":    "->/etc/escape",
		"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1.ok": "",
	})
	for _, p := range []string{"usr/local/cuda/lib64/stubs/libcuda.so", "usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "etc/escape"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), elfBytes[:4096], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := openRootFS(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	lib := findLibrary(r, "libcuda.so.1", "/opt/notelf:relative/dir:/usr/local/cuda/lib64/stubs", []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1"})
	if lib.Path != "/usr/local/cuda/lib64/stubs/libcuda.so.1" || lib.Via != "LD_LIBRARY_PATH" {
		t.Errorf("first: %+v", lib)
	}
	if len(lib.Shadowed) != 2 || lib.Shadowed[0] != "/usr/lib/x86_64-linux-gnu/libcuda.so.1" || lib.Shadowed[1] != "/usr/lib64/libcuda.so.1" {
		t.Errorf("shadowed: %v", lib.Shadowed)
	}
	lib = findLibrary(r, "libcuda.so.1", "", []string{"/usr/lib/x86_64-linux-gnu/libcuda.so.1"})
	if lib.Via != "ld.so.cache" || lib.Resolved != "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04" || lib.Version != "580.159.04" {
		t.Errorf("cache: %+v", lib)
	}
	lib = findLibrary(r, "libcuda.so.1", "", nil)
	if lib.Path != "/usr/lib64/libcuda.so.1" || lib.Via != "default path" || lib.Version != "580.159.04" {
		t.Errorf("default: %+v", lib)
	}
	// An absolute link resolves inside the root: the root's /etc/escape,
	// which exists there, and never the host's.
	lib = findLibrary(r, "libnvidia-ml.so.1", "/usr/lib/x86_64-linux-gnu", nil)
	if lib.Resolved != "/etc/escape" {
		t.Errorf("nvml: %+v", lib)
	}
	if data, _, err := r.readFile("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", 10); err != nil || len(data) != 10 {
		t.Errorf("read through an absolute link in the root: %v", err)
	}
}

// The LXC and Proxmox syntaxes, with only the device lines kept and the
// Proxmox snapshot sections left out.
func TestParseContainerConfig(t *testing.T) {
	pve := "arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n# lxc.cgroup2.devices.allow: c 1:1 rwm\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\ndev0: /dev/nvidia-uvm,gid=44\n\n[snap1]\nlxc.cgroup2.devices.allow: c 509:* rwm\n"
	got := ParseContainerConfig(pve, true)
	want := []ConfigLine{
		{N: 2, Key: "lxc.cgroup2.devices.allow", Value: "c 195:* rwm", Raw: "lxc.cgroup2.devices.allow: c 195:* rwm"},
		{N: 4, Key: "lxc.mount.entry", Value: "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file", Raw: "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"},
		{N: 5, Key: "dev0", Value: "/dev/nvidia-uvm,gid=44", Raw: "dev0: /dev/nvidia-uvm,gid=44"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v want %+v", i, got[i], want[i])
		}
	}
	lxc := "lxc.cgroup.devices.allow = c 195:* rwm\r\nlxc.mount.entry=/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\nlxc.net.0.type = veth\n"
	got = ParseContainerConfig(lxc, false)
	if len(got) != 2 || got[0].Value != "c 195:* rwm" || got[0].Raw != "lxc.cgroup.devices.allow = c 195:* rwm" || got[1].Key != "lxc.mount.entry" {
		t.Errorf("lxc: %+v", got)
	}
}

// cdiSpecToolkit is a spec in the layout `nvidia-ctk cdi generate` writes,
// here with the device numbers recorded (as in the spec of
// nvidia-container-toolkit #1934).
const cdiSpecToolkit = `---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidia-uvm
    hostPath: %UVM%
    type: c
    major: 510
    minor: 0
  - path: /dev/nvidiactl
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - args:
    - nvidia-cdi-hook
    - create-symlinks
    - --link
    - libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  mounts:
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
    options:
    - ro
    - nosuid
    - nodev
    - bind
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
`

// SurveyHost reads container configs and CDI specs under HostRoot, bounded
// and inside the root: a FIFO, an oversized file and a link out of the
// tree do not block it, exhaust it or lead it to host files.
func TestSurveyHostConfigsAndCDI(t *testing.T) {
	root := t.TempDir()
	big := strings.Repeat("lxc.cgroup2.devices.allow: c 195:* rwm\n", maxConfigBytes/30)
	fakeTree(t, root, map[string]string{
		"etc/pve/lxc/101.conf":          "lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n",
		"etc/pve/lxc/102.conf":          big,
		"etc/pve/lxc/notes.txt":         "not a config",
		"etc/pve/lxc/escape.conf":       "->/etc/hostname-of-root",
		"etc/hostname-of-root":          "lxc.cgroup2.devices.allow: c 7:* rwm\n",
		"var/lib/lxc/cuda/config":       "lxc.cgroup2.devices.allow = c 195:* rwm\n",
		"var/lib/lxc/nocfg/rootfs/":     "",
		"etc/cdi/nvidia.yaml":           strings.ReplaceAll(cdiSpecToolkit, "%UVM%", "/dev/null"),
		"etc/cdi/broken.yaml":           "cdiVersion: [\n",
		"etc/cdi/README":                "ignored",
		"var/run/cdi/nvidia-other.json": `{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/null","major":1,"minor":3}]}}]}`,
	})
	if err := unix.Mkfifo(filepath.Join(root, "etc/pve/lxc/fifo.conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Survey, 1)
	go func() { done <- SurveyHost(SurveyOptions{HostRoot: root, NvidiaSMI: "-"}) }()
	var sv *Survey
	select {
	case sv = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("SurveyHost blocked (on the FIFO?)")
	}
	byName := map[string]ContainerConfig{}
	for _, c := range sv.Containers {
		byName[c.Manager+"/"+c.Name] = c
	}
	if c := byName["proxmox/101"]; len(c.Lines) != 2 || c.Path != "/etc/pve/lxc/101.conf" {
		t.Errorf("101: %+v", c)
	}
	if c := byName["proxmox/102"]; !c.Truncated {
		t.Errorf("102 not marked truncated (%d lines)", len(c.Lines))
	}
	if c := byName["proxmox/escape"]; len(c.Lines) != 1 || c.Lines[0].Value != "c 7:* rwm" {
		t.Errorf("escape.conf did not resolve inside the root: %+v", c)
	}
	if c := byName["proxmox/fifo"]; c.ReadError == "" {
		t.Errorf("fifo: %+v", c)
	}
	if _, ok := byName["lxc/nocfg"]; ok || len(byName["lxc/cuda"].Lines) != 1 {
		t.Errorf("lxc: %+v %+v (unavailable %q)", byName["lxc/nocfg"], byName["lxc/cuda"], sv.Unavailable)
	}
	if len(sv.CDISpecs) != 3 {
		t.Fatalf("CDI specs: %+v", sv.CDISpecs)
	}
	specs := map[string]CDISpec{}
	for _, s := range sv.CDISpecs {
		specs[s.Path] = s
	}
	if s := specs["/etc/cdi/broken.yaml"]; s.ParseError == "" {
		t.Errorf("broken spec parsed: %+v", s)
	}
	s := specs["/etc/cdi/nvidia.yaml"]
	if s.Kind != "nvidia.com/gpu" || s.Version != "0.5.0" || len(s.Nodes) != 4 {
		t.Fatalf("toolkit spec: %+v", s)
	}
	uvm := s.Nodes[0]
	if uvm.Path != "/dev/nvidia-uvm" || uvm.Major != 510 || !uvm.Host.Exists || uvm.Host.Major != 1 || uvm.Host.Minor != 3 {
		t.Errorf("uvm entry (host path /dev/null): %+v", uvm)
	}
	if s.Nodes[2].Device != "0" || s.Nodes[2].Path != "/dev/nvidia0" {
		t.Errorf("device entry: %+v", s.Nodes[2])
	}
	if j := specs["/var/run/cdi/nvidia-other.json"]; len(j.Nodes) != 1 || j.Nodes[0].Major != 1 {
		t.Errorf("json spec: %+v", j)
	}
	if !sv.MemfdProbed {
		t.Error("memfd_create not probed for this process")
	}
}

func TestLookupCreds(t *testing.T) {
	root := t.TempDir()
	fakeTree(t, root, map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
		"etc/group":  "root:x:0:\nvideo:x:44:alice,bob\nalice:x:1000:\n",
	})
	r, err := openRootFS(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	c, err := lookupCreds(r, "alice")
	if err != nil || c.UID != 1000 || c.GID != 1000 || len(c.Groups) != 1 || c.Groups[0] != 44 {
		t.Errorf("alice: %+v %v", c, err)
	}
	if c, err := lookupCreds(r, "65534:65534"); err != nil || c.UID != 65534 || c.GID != 65534 || c.Groups != nil {
		t.Errorf("numeric: %+v %v", c, err)
	}
	if _, err := lookupCreds(r, "mallory"); err == nil {
		t.Error("unknown user resolved")
	}
}

// Past the caps (4,096 container configs, 256 CDI specs) the survey says
// it checked only part of the directory, not nothing.
func TestSurveyHostSaysWhatItLeft(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{}
	for i := range maxCDIFiles + 3 {
		files[fmt.Sprintf("etc/cdi/x%04d.json", i)] = `{"cdiVersion":"0.6.0","kind":"example.com/x","devices":[]}`
	}
	fakeTree(t, root, files)
	sv := SurveyHost(SurveyOptions{HostRoot: root, NvidiaSMI: "-"})
	want := fmt.Sprintf("/etc/cdi: more than %d entries; only the first %d", maxCDIFiles, maxCDIFiles)
	if !slices.ContainsFunc(sv.Unavailable, func(s string) bool { return strings.Contains(s, want) }) {
		t.Errorf("Unavailable %q does not say %q", sv.Unavailable, want)
	}
}
