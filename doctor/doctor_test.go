package doctor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/cudatrace/cudatrace/snapshot"
)

// h200Survey is the recorded H200 host (testdata/gpu/host.txt): driver
// 580.159.04, uvm at 238, caps at 241, one GPU, no device policy, root. It
// must pass with no WARN.
func h200Survey() *snapshot.Survey {
	node := func(p string, maj, min, mode uint32) snapshot.Node {
		return snapshot.Node{Path: p, Exists: true, Type: "c", Major: maj, Minor: min, Mode: mode, MountPoint: "/dev"}
	}
	b := &snapshot.Snapshot{
		TakenAt: time.Date(2026, 12, 1, 13, 27, 42, 0, time.UTC),
		Host: snapshot.Host{Kernel: "6.18.44-fc-v973-gpu", Hostname: "h200", DriverVersion: "580.159.04",
			DriverLine: "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)"},
		ProcDevices: snapshot.ParseProcDevices("195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n239 nvidia-nvswitch\n240 nvidia-nvlink\n241 nvidia-caps\n242 nvidia-caps-imex-channels\n"),
		Nodes: []snapshot.Node{
			node("/dev/nvidia-caps/nvidia-cap1", 241, 1, 0o400), node("/dev/nvidia-caps/nvidia-cap2", 241, 2, 0o444),
			node("/dev/nvidia-uvm", 238, 0, 0o666), node("/dev/nvidia-uvm-tools", 238, 1, 0o666),
			node("/dev/nvidia0", 195, 0, 0o666), node("/dev/nvidiactl", 195, 255, 0o666),
		},
		Mounts:   []snapshot.Mount{{MountPoint: "/dev", FSType: "devtmpfs", Options: []string{"rw", "nosuid"}}},
		Process:  snapshot.Process{PID: 100, Comm: "cudatrace", CapEff: 0x1ffffffffff, User: "root"},
		CgroupV2: &snapshot.CgroupV2{Path: "/", MountPoint: "/sys/fs/cgroup"},
		Driver: snapshot.Driver{Loaded: true, Modules: []string{"nvidia_uvm", "nvidia"}, GPUs: []string{"0000:00:06.0"},
			Params:    map[string]string{"ModifyDeviceFiles": "1", "DeviceFileMode": "438", "ExcludedGpus": `""`},
			UVMParams: map[string]string{"uvm_disable_hmm": "N"}},
		KernelLog: []snapshot.KernelLine{{Seq: 1, Text: "nvidia-uvm: Loaded the UVM driver, major device number 238."}},
	}
	return &snapshot.Survey{
		Base: b, Subject: "this process",
		CharDir: true,
		CharLinks: []snapshot.CharLink{
			{Node: "/dev/nvidia0", Link: "/dev/char/195:0", Exists: true, Dest: "../nvidia0", Resolves: true},
			{Node: "/dev/nvidiactl", Link: "/dev/char/195:255", Exists: true, Dest: "../nvidiactl", Resolves: true},
		},
		Libraries: []snapshot.Library{
			{Name: "libcuda.so.1", Path: "/usr/local/nvidia/lib64/libcuda.so.1", Via: "LD_LIBRARY_PATH", Resolved: "/usr/local/nvidia/lib64/libcuda.so.580.159.04", Version: "580.159.04"},
			{Name: "libnvidia-ml.so.1", Path: "/usr/local/nvidia/lib64/libnvidia-ml.so.1", Via: "LD_LIBRARY_PATH", Resolved: "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04", Version: "580.159.04"},
		},
		DriverState: snapshot.DriverState{
			GPUs:          []snapshot.GPUInfo{{Bus: "0000:00:06.0", Model: "NVIDIA H200", Minor: 0}},
			ModuleVersion: "580.159.04",
			// The H200 has no /lib/firmware/nvidia: the firmware lives with the driver.
			Firmware:     snapshot.Firmware{Version: "580.159.04", Searched: []string{"/lib/firmware/nvidia/580.159.04"}},
			KernelConfig: map[string]string{"CONFIG_HMM_MIRROR": "y", "CONFIG_DEVICE_PRIVATE": "y"},
			SMI:          []snapshot.SMIGPU{{Bus: "00000000:00:06.0", Persistence: "Disabled", ComputeMode: "Default"}},
		},
		MemfdProbed: true,
	}
}

func byID(res *Result, id, subject string) *Check {
	for i := range res.Checks {
		if c := &res.Checks[i]; c.ID == id && (subject == "" || c.Subject == subject) {
			return c
		}
	}
	return nil
}

func mustCheck(t *testing.T, res *Result, id, subject string, want Status) *Check {
	t.Helper()
	c := byID(res, id, subject)
	if c == nil {
		t.Fatalf("no %s check for %q; checks:\n%s", id, subject, dump(res))
	}
	if c.Status != want {
		t.Fatalf("%s %s: status %s, want %s: %s\n%s", id, subject, c.Status, want, c.Summary, dump(res))
	}
	return c
}

func dump(res *Result) string {
	var b strings.Builder
	for _, c := range res.Checks {
		fmt.Fprintf(&b, "  %s %s %s: %s | fix: %s\n", c.Status, c.ID, c.Subject, c.Summary, c.Fix)
	}
	return b.String()
}

func TestHealthyH200Passes(t *testing.T) {
	res := Run(h200Survey())
	if res.Status != Pass || res.Counts.Warn != 0 || res.Counts.Fail != 0 {
		t.Fatalf("healthy H200: status %s, counts %+v\n%s", res.Status, res.Counts, dump(res))
	}
	for _, want := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"} {
		mustCheck(t, res, "node", want, Pass)
		mustCheck(t, res, "device-policy", want, Pass)
	}
	if res.Schema != Schema || res.User != "root (0:0)" {
		t.Errorf("schema %q user %q", res.Schema, res.User)
	}
}

// runcDeny is a device program in runc's shape that allows everything but
// c major:* (what scripts/gpu-acceptance.sh's --deny-v2 attaches).
func runcDeny(major int32) []byte {
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
		asm.JNE.Imm(asm.R2, 2, "next"),
		asm.JNE.Imm(asm.R4, major, "next"),
		asm.Mov.Imm32(asm.R0, 0),
		asm.Return(),
		asm.Mov.Imm32(asm.R0, 1).WithSymbol("next"),
		asm.Return(),
	}
	return marshal(insns)
}

func marshal(insns asm.Instructions) []byte {
	var b strings.Builder
	if err := insns.Marshal(&b, binary.LittleEndian); err != nil {
		panic(err)
	}
	return []byte(b.String())
}

// The broken states of scripts/gpu-acceptance.sh, applied to the H200.
func TestAcceptanceStates(t *testing.T) {
	t.Run("2-deny-uvm", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.CgroupV2 = &snapshot.CgroupV2{Path: "/cudatrace-scenario-1", Programs: []snapshot.DeviceProgram{{ID: 35, AttachedTo: "/cudatrace-scenario-1", Instructions: runcDeny(238)}}}
		res := Run(sv)
		c := mustCheck(t, res, "device-policy", "/dev/nvidia-uvm", Fail)
		if !strings.Contains(c.Summary, "35") || !strings.Contains(c.Fix, "c 238:* rwm") {
			t.Errorf("summary %q fix %q", c.Summary, c.Fix)
		}
		mustCheck(t, res, "device-policy", "/dev/nvidiactl", Pass)
		if res.Status != Fail {
			t.Errorf("status %s", res.Status)
		}
	})
	t.Run("4-deny-195", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.CgroupV2 = &snapshot.CgroupV2{Path: "/x", Programs: []snapshot.DeviceProgram{{ID: 7, AttachedTo: "/x", Instructions: runcDeny(195)}}}
		res := Run(sv)
		mustCheck(t, res, "device-policy", "/dev/nvidiactl", Fail)
		mustCheck(t, res, "device-policy", "/dev/nvidia0", Fail)
		mustCheck(t, res, "device-policy", "/dev/nvidia-uvm", Pass)
	})
	t.Run("5-uvm-missing", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.Nodes[2].Exists, sv.Base.Nodes[2].Type = false, ""
		sv.Base.Nodes[3].Exists, sv.Base.Nodes[3].Type = false, ""
		res := Run(sv)
		c := mustCheck(t, res, "node-missing", "/dev/nvidia-uvm", Fail)
		if !strings.Contains(c.Detail[0], "c 238:0") || !strings.Contains(c.Fix, "nvidia-modprobe -u") {
			t.Errorf("detail %q fix %q", c.Detail, c.Fix)
		}
		// A missing node's cgroup verdict is still judged, at its driver's number.
		mustCheck(t, res, "device-policy", "/dev/nvidia-uvm", Pass)
		if c := byID(res, "node-missing", "/dev/nvidia-uvm-tools"); c != nil {
			t.Errorf("uvm-tools is not needed to start CUDA: %+v", c)
		}
	})
	t.Run("6-uvm-stale", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.Nodes[2].Major = 504
		res := Run(sv)
		c := mustCheck(t, res, "node", "/dev/nvidia-uvm", Fail)
		if !strings.Contains(c.Summary, "c 504:0") || !strings.Contains(c.Summary, "238") || !strings.Contains(c.Fix, "mknod -m 0666 /dev/nvidia-uvm c 238 0") {
			t.Errorf("summary %q fix %q", c.Summary, c.Fix)
		}
	})
	t.Run("7-nodev", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.Mounts[0].NoDev = true
		res := Run(sv)
		c := mustCheck(t, res, "node", "/dev/nvidiactl", Fail)
		if !strings.Contains(c.Summary, "nodev") || !strings.Contains(c.Fix, "remount,dev /dev") {
			t.Errorf("%q %q", c.Summary, c.Fix)
		}
	})
	t.Run("nobody-mode-0660", func(t *testing.T) {
		sv := h200Survey()
		sv.User = &snapshot.Creds{Name: "nobody", UID: 65534, GID: 65534}
		for i := range sv.Base.Nodes {
			sv.Base.Nodes[i].Mode, sv.Base.Nodes[i].GID = 0o660, 44
		}
		res := Run(sv)
		c := mustCheck(t, res, "node", "/dev/nvidiactl", Fail)
		if !strings.Contains(c.Summary, "nobody (65534:65534)") {
			t.Errorf("%q", c.Summary)
		}
		// A user in the node's group may open it.
		sv.User.Groups = []uint32{44}
		mustCheck(t, Run(sv), "node", "/dev/nvidiactl", Pass)
	})
	t.Run("v1-deny", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.CgroupV2 = nil
		sv.Base.CgroupV1 = &snapshot.CgroupV1{Path: "/docker/abc", DevicesList: []string{"c 1:3 rwm", "c 195:* rwm"}}
		res := Run(sv)
		c := mustCheck(t, res, "device-policy", "/dev/nvidia-uvm", Fail)
		if !strings.Contains(c.Summary, "/docker/abc") || !strings.Contains(c.Fix, "c 238:* rwm") {
			t.Errorf("%q %q", c.Summary, c.Fix)
		}
	})
	t.Run("programs-unreadable", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.CgroupV2.QueryError = "query device programs of /sys/fs/cgroup: operation not permitted (needs root, or CAP_BPF and CAP_SYS_ADMIN)"
		res := Run(sv)
		c := mustCheck(t, res, "device-policy", "/dev/nvidia-uvm", Skip)
		if !strings.Contains(c.Summary, "needs root") {
			t.Errorf("%q", c.Summary)
		}
		if res.Status != Pass {
			t.Errorf("a SKIP must not fail the run: %s", res.Status)
		}
	})
	t.Run("nested-programs", func(t *testing.T) {
		// Two programs, the inherited one allowing all, the inner one
		// denying uvm: the AND denies.
		sv := h200Survey()
		sv.Base.CgroupV2 = &snapshot.CgroupV2{Path: "/a/b", Programs: []snapshot.DeviceProgram{
			{ID: 1, AttachedTo: "/a", Instructions: runcDeny(999)},
			{ID: 2, AttachedTo: "/a/b", Instructions: runcDeny(238)},
		}}
		c := mustCheck(t, Run(sv), "device-policy", "/dev/nvidia-uvm", Fail)
		if !strings.Contains(c.Summary, "2 (attached to /a/b)") || strings.Contains(c.Summary, "1 (attached") {
			t.Errorf("%q", c.Summary)
		}
	})
}

func TestDriverChecks(t *testing.T) {
	t.Run("version-mismatch", func(t *testing.T) {
		sv := h200Survey()
		sv.Libraries[0].Version, sv.Libraries[0].Resolved = "580.65.06", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"
		c := mustCheck(t, Run(sv), "driver-version", "", Fail)
		if !strings.Contains(c.Summary, "803") || !strings.Contains(c.Summary, "580.65.06") {
			t.Errorf("%q", c.Summary)
		}
	})
	t.Run("nvswitch-without-fm", func(t *testing.T) {
		sv := h200Survey()
		sv.NVSwitches = []string{"0000:05:00.0", "0000:06:00.0"}
		mustCheck(t, Run(sv), "fabric-manager", "", Fail)
		sv.Daemons = []string{"nv-fabricmanager"}
		mustCheck(t, Run(sv), "fabric-manager", "", Pass)
	})
	t.Run("excluded", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.Driver.Params["ExcludedGpus"] = "0000:00:06.0"
		mustCheck(t, Run(sv), "excluded-gpu", "", Warn)
	})
	t.Run("kernel-log", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.KernelLog = append(sv.Base.KernelLog,
			snapshot.KernelLine{Text: "NVRM: Xid (PCI:0000:00:06.0): 13, pid=1234, Graphics Exception"},
			snapshot.KernelLine{Text: "NVRM: Xid (PCI:0000:00:06.0): 13, pid=1235, Graphics Exception"})
		c := mustCheck(t, Run(sv), "kernel-log", "", Warn)
		if !strings.HasPrefix(c.Summary, "1 driver warning since boot") {
			t.Errorf("%q", c.Summary)
		}
		// A client of another version refused since boot is a warning: on
		// the H200 our own rmprobe left exactly such lines, and the host was
		// healthy (the library-version check FAILs a current mismatch).
		sv.Base.KernelLog = append(sv.Base.KernelLog, snapshot.KernelLine{Text: "NVRM: API mismatch: the client has the version 580.65.06, but this kernel module has the version 580.159.04."})
		mustCheck(t, Run(sv), "kernel-log", "", Warn)
		sv.Base.KernelLog = append(sv.Base.KernelLog, snapshot.KernelLine{Text: "NVRM: RmInitAdapter failed! (0x62:0x65:1856)"})
		mustCheck(t, Run(sv), "kernel-log", "", Fail)
		sv.Base.KernelLog = nil
		sv.Base.Unavailable = []string{"kernel log: operation not permitted (needs root or CAP_SYSLOG when kernel.dmesg_restrict=1)"}
		mustCheck(t, Run(sv), "kernel-log", "", Skip)
	})
	t.Run("compute-mode", func(t *testing.T) {
		sv := h200Survey()
		sv.SMI[0].ComputeMode = "Exclusive_Process"
		mustCheck(t, Run(sv), "compute-mode", "", Warn)
		sv.SMI[0].ComputeMode = "Prohibited"
		mustCheck(t, Run(sv), "compute-mode", "", Fail)
		sv.SMI, sv.SMIError = nil, "nvidia-smi not found on PATH"
		mustCheck(t, Run(sv), "compute-mode", "", Skip)
	})
	t.Run("firmware-missing-and-failing", func(t *testing.T) {
		sv := h200Survey()
		sv.Base.KernelLog = append(sv.Base.KernelLog, snapshot.KernelLine{Text: "NVRM: RmInitAdapter: Cannot initialize GSP firmware RM"})
		mustCheck(t, Run(sv), "gsp-firmware", "", Fail)
	})
	t.Run("no-driver", func(t *testing.T) {
		sv := &snapshot.Survey{Base: &snapshot.Snapshot{}, Subject: "this process"}
		res := Run(sv)
		mustCheck(t, res, "driver-modules", "", Fail)
		mustCheck(t, res, "nodes", "", Skip)
	})
}

func TestEnvironmentChecks(t *testing.T) {
	sv := h200Survey()
	sv.Base.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "-1", "NVIDIA_VISIBLE_DEVICES": "void"}
	res := Run(sv)
	mustCheck(t, res, "cuda-visible-devices", "", Fail)
	mustCheck(t, res, "nvidia-visible-devices", "", Warn)
	sv.Base.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0"}
	mustCheck(t, Run(sv), "cuda-visible-devices", "", Pass)

	sv.Libraries[0] = snapshot.Library{Name: "libcuda.so.1", Path: "/usr/local/cuda/lib64/stubs/libcuda.so.1", Via: "LD_LIBRARY_PATH"}
	mustCheck(t, Run(sv), "libcuda", "", Fail)
	sv.Libraries[0] = snapshot.Library{Name: "libcuda.so.1", Path: "/usr/local/cuda/compat/libcuda.so.1", Via: "ld.so.cache", Version: "590.1"}
	res = Run(sv)
	mustCheck(t, res, "libcuda", "", Warn)
	mustCheck(t, res, "driver-version", "", Pass) // compat is newer by design
	// Older than the module (the H200's CUDA 13.0 compat on 580.159.04):
	// cuInit 803.
	sv.Libraries[0].Version, sv.Libraries[0].VersionFrom = "580.95.05", "contents"
	c := mustCheck(t, Run(sv), "driver-version", "", Fail)
	if !strings.Contains(c.Summary, "forward-compatibility copy 580.95.05") || !strings.Contains(c.Summary, "from its contents") {
		t.Errorf("%q", c.Summary)
	}
	// The stub by its contents, under a name and directory that do not say.
	sv.Libraries[0] = snapshot.Library{Name: "libcuda.so.1", Path: "/opt/app/lib/libcuda.so.1", Via: "LD_LIBRARY_PATH", Stub: true}
	mustCheck(t, Run(sv), "libcuda", "", Fail)
	sv.Libraries[0] = snapshot.Library{Name: "libcuda.so.1"}
	mustCheck(t, Run(sv), "libcuda", "", Fail)

	sv = h200Survey()
	sv.Base.Process.Seccomp = 2
	mustCheck(t, Run(sv), "seccomp", "", Pass)
	sv.MemfdError = "operation not permitted"
	c = mustCheck(t, Run(sv), "seccomp", "", Fail)
	if !strings.Contains(c.Summary, "304") {
		t.Errorf("%q", c.Summary)
	}
	sv.MemfdProbed = false
	mustCheck(t, Run(sv), "seccomp", "", Skip)
}

func TestCharLinks(t *testing.T) {
	sv := h200Survey()
	sv.CharLinks[1].Exists, sv.CharLinks[1].Resolves = false, false
	mustCheck(t, Run(sv), "dev-char-links", "", Pass) // no systemd-managed runtime here
	sv.SystemdRuntimes = []string{"docker"}
	c := mustCheck(t, Run(sv), "dev-char-links", "", Warn)
	if !strings.Contains(c.Fix, "create-dev-char-symlinks") || !strings.Contains(strings.Join(c.Detail, " "), "/dev/char/195:255") {
		t.Errorf("%q %q", c.Fix, c.Detail)
	}
}

func TestEscapesSystemText(t *testing.T) {
	sv := h200Survey()
	sv.Containers = []snapshot.ContainerConfig{{Manager: "lxc", Name: "evil\x1b]0;pwned\x07", Path: "/var/lib/lxc/evil\x1b/config",
		Lines: snapshot.ParseContainerConfig("lxc.cgroup2.devices.allow = c 195:* rwm\nlxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n", false)}}
	res := Run(sv)
	for _, c := range res.Checks {
		for _, s := range append([]string{c.Subject, c.Summary, c.Fix}, c.Detail...) {
			for _, r := range s {
				if r < 0x20 && r != '\n' || r == 0x7f {
					t.Fatalf("control character %q reached the result: %q", r, s)
				}
			}
		}
	}
	if c := byID(res, "container", ""); c == nil || !strings.Contains(c.Subject, `evil\x1b]0;pwned\a`) {
		t.Errorf("container subject not escaped as expected: %+v", c)
	}
	if got := Escape("a\\b\xff\u202e"); got != `a\\b\xff\u202e` {
		t.Errorf("Escape: %q", got)
	}
}

// What was asked for and does not exist is the request's fault (exit 2
// in cmd), said before anything is surveyed.
func TestHostRequestErrors(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{PID: 1 << 30}, "no process 1073741824"},
		{Options{Cgroup: "/lxc/../../etc"}, `--cgroup "/lxc/../../etc": .. is not allowed`},
	} {
		_, err := Host(tc.opts)
		if _, ok := errors.AsType[*RequestError](err); !ok || err.Error() != tc.want {
			t.Errorf("Host(%+v) = %v, want a RequestError %q", tc.opts, err, tc.want)
		}
	}
}
