package snapshot

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeTree writes files (path → content; a value starting with "->" makes a
// symlink) under dir.
func fakeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(strings.TrimPrefix(content, "->"), full)
		case strings.HasSuffix(p, "/"):
			err = os.MkdirAll(full, 0o755)
		default:
			err = os.WriteFile(full, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCollectFakeProc runs the whole collector over a fake /proc and /sys of
// an H200 host whose target runs in a Proxmox LXC container as nobody.
func TestCollectFakeProc(t *testing.T) {
	dir := t.TempDir()
	proc, sys, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "sys"), filepath.Join(dir, "cgroup")
	fakeTree(t, dir, map[string]string{
		"proc/devices":                               procDevices580,
		"proc/self/ns/user":                          "->user:[4026531837]",
		"proc/self/ns/pid":                           "->pid:[4026531836]",
		"proc/4242/status":                           statusNobody,
		"proc/4242/comm":                             "python3\n",
		"proc/4242/uid_map":                          "         0     100000      65536\n",
		"proc/4242/ns/user":                          "->user:[4026532400]",
		"proc/4242/ns/pid":                           "->pid:[4026532401]",
		"proc/4242/cgroup":                           "12:devices:/lxc/200\n0::/lxc/200/ns/user.slice\n",
		"proc/4242/environ":                          "PATH=/bin\x00CUDA_VISIBLE_DEVICES=0\x00HF_TOKEN=hf_secret\x00",
		"proc/4242/mountinfo":                        "1 0 0:1 / / rw - zfs rpool/subvol-200 rw\n2 1 0:2 / /dev rw,nosuid,nodev - tmpfs none rw\n3 2 0:5 /nvidia0 /dev/nvidia0 rw,nosuid - devtmpfs udev rw\n",
		"proc/4242/root/etc/passwd":                  "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
		"proc/4242/root/dev/nvidia0":                 "",
		"proc/4242/root/dev/nvidiactl":               "",
		"proc/4242/root/dev/nvidia-caps/nvidia-cap1": "",
		"proc/4242/root/dev/char/195:255":            "->../nvidiactl",
		"proc/4242/root/dev/char/1:3":                "->../null",
		"proc/4242/root/dev/null":                    "",
		// The container's init (PID 1 in its namespace) says container=lxc.
		"proc/900/ns/pid":                                  "->pid:[4026532401]",
		"proc/900/status":                                  "Name:\tinit\nNSpid:\t900\t1\n",
		"proc/900/environ":                                 "container=lxc\x00TERM=linux\x00",
		"proc/driver/nvidia/version":                       "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)  Thu Jan 1 00:00:00 UTC 2026\nGCC version:  gcc 12\n",
		"proc/driver/nvidia/params":                        paramsText,
		"proc/driver/nvidia/gpus/0000:00:06.0/":            "",
		"proc/modules":                                     "nvidia_uvm 1794048 0 - Live 0x0 (POE)\nnvidia 14381056 1 nvidia_uvm, Live 0x0 (POE)\next4 1 0 - Live 0x0\n",
		"sys/module/nvidia/":                               "",
		"sys/module/nvidia_uvm/parameters/uvm_disable_hmm": "N\n",
		"sys/module/nvidia_uvm/parameters/uvm_perf_prefetch_enable": "1\n",
		"cgroup/devices/lxc/200/devices.list":                       "c 195:* rwm\nc 509:* rwm\n",
		"cgroup/unified/lxc/200/ns/user.slice/":                     "",
		// The GSP firmware as the driver package installs it (file names
		// from open-gpu-kernel-modules' README, "GSP firmware").
		"lib/firmware/nvidia/580.159.04/gsp_ga10x.bin": "x",
		"lib/firmware/nvidia/580.159.04/gsp_tu10x.bin": "x",
		"sys/module/nvidia/version":                    "580.159.04\n",
		"kmsg": "6,100,1000000,-;usb 1-1: new device\n" +
			"3,99,3000000,-;NVRM: RmInitAdapter failed! (0x62:0x65:1792)\n" +
			"4,101,2000000,-;NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04\n SUBSYSTEM=module\n" +
			"3,102,50000000,-;NVRM: Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.\n",
	})

	var queried []string
	c := newCollector(Options{
		PID:        4242,
		ExtraPaths: []string{"/dev/nvidia-uvm-tools"},
		KmsgSince:  time.Unix(1000+40, 0),
		QueryCgroupPrograms: func(cgroupDir, cgroupRoot string) ([]DeviceProgram, error) {
			queried = append(queried, cgroupDir, cgroupRoot)
			return []DeviceProgram{{ID: 7, AttachedTo: "/lxc/200"}}, nil
		},
	})
	c.proc, c.sys, c.kmsgPath, c.hostRoot = proc, sys, filepath.Join(dir, "kmsg"), dir
	fakeTree(t, c.hostRoot, map[string]string{"etc/pve/lxc/200.conf": "arch: amd64\n"})
	c.selfMountinfo = func() (string, error) {
		return "36 31 0:33 / " + cg + "/devices rw - cgroup cgroup rw,devices\n" +
			"41 31 0:38 / " + cg + "/unified rw - cgroup2 cgroup2 rw\n", nil
	}
	c.mountCgroup2 = func() (string, func() error, error) {
		t.Error("cgroup2 is mounted; the collector must not mount another")
		return "", nil, errors.New("unexpected")
	}
	c.bootTime = func() time.Time { return time.Unix(1000, 0) }
	s := c.run()

	if s.Host.DriverVersion != "580.159.04" || !strings.HasPrefix(s.Host.DriverLine, "NVRM version:") {
		t.Errorf("host = %+v", s.Host)
	}
	if m, _ := s.MajorOf("nvidia-uvm"); m != 238 || len(s.ProcDevices) != 14 {
		t.Errorf("proc devices = %v", s.ProcDevices)
	}
	wantProc := Process{PID: 4242, Comm: "python3", UID: 65534, GID: 65534, Groups: []uint32{44, 65534},
		User: "nobody", CapEff: 1 << 27, CapBnd: 0x1ffffffffff, NoNewPrivs: true, Seccomp: 2, SeccompFilters: 1, UserNS: true}
	if !reflect.DeepEqual(s.Process, wantProc) {
		t.Errorf("process = %+v\nwant      %+v", s.Process, wantProc)
	}

	var paths []string
	for _, n := range s.Nodes {
		paths = append(paths, n.Path)
	}
	wantPaths := []string{"/dev/char/195:255", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl"}
	if !reflect.DeepEqual(paths, wantPaths) {
		t.Errorf("node paths = %v\nwant %v", paths, wantPaths)
	}
	if n := s.Node("/dev/char/195:255"); n == nil || n.Type != "l" || n.LinkDest != "../nvidiactl" || n.MountPoint != "/dev" {
		t.Errorf("char link = %+v", n)
	}
	if n := s.Node("/dev/nvidia-uvm"); n == nil || n.Exists || n.MountPoint != "/dev" {
		t.Errorf("expected-but-missing uvm node = %+v", n)
	}
	if n := s.Node("/dev/nvidia0"); n == nil || !n.Exists || n.Type != "f" || n.MountPoint != "/dev/nvidia0" {
		t.Errorf("nvidia0 = %+v", n)
	}
	if len(s.Mounts) != 2 || s.Mounts[0].MountPoint != "/dev" || !s.Mounts[0].NoDev || !s.Mounts[1].Bind {
		t.Errorf("mounts = %+v", s.Mounts)
	}

	if s.CgroupV1 == nil || s.CgroupV1.Path != "/lxc/200" || !reflect.DeepEqual(s.CgroupV1.DevicesList, []string{"c 195:* rwm", "c 509:* rwm"}) {
		t.Errorf("cgroup v1 = %+v", s.CgroupV1)
	}
	wantQuery := []string{filepath.Join(cg, "unified/lxc/200/ns/user.slice"), cg + "/unified"}
	if !reflect.DeepEqual(queried, wantQuery) {
		t.Errorf("query args = %v, want %v", queried, wantQuery)
	}
	if s.CgroupV2 == nil || s.CgroupV2.Path != "/lxc/200/ns/user.slice" || len(s.CgroupV2.Programs) != 1 || s.CgroupV2.MountPoint != cg+"/unified" {
		t.Errorf("cgroup v2 = %+v", s.CgroupV2)
	}
	if s.Container != (Container{Runtime: "lxc", ID: "200", ProxmoxCTID: "200", Manager: "proxmox", Config: "/etc/pve/lxc/200.conf"}) {
		t.Errorf("container = %+v", s.Container)
	}

	d := s.Driver
	if !d.Loaded || d.Params["DeviceFileMode"] != "438" || d.UVMParams["uvm_disable_hmm"] != "N" ||
		!reflect.DeepEqual(d.Modules, []string{"nvidia_uvm", "nvidia"}) || !reflect.DeepEqual(d.GPUs, []string{"0000:00:06.0"}) {
		t.Errorf("driver = %+v", d)
	}
	// Boot at t=1000s, window from 1040s (less 1s slack): the Xid at
	// 1050s, 10s into the trace, and the error at 1003s as older; the
	// older notice at 1002s is not an error.
	if len(s.KernelLog) != 2 || s.KernelLog[1].Seq != 102 || !strings.Contains(s.KernelLog[1].Text, "Xid") ||
		s.KernelLog[1].Older || s.KernelLog[1].T == nil || *s.KernelLog[1].T != 10*time.Second {
		t.Errorf("kernel log = %+v", s.KernelLog)
	}
	if l := s.KernelLog[0]; l.Seq != 99 || !l.Older || l.T == nil || *l.T != -37*time.Second {
		t.Errorf("older line = %+v", l)
	}
	ds := s.DriverState
	if ds == nil || ds.ModuleVersion != "580.159.04" || ds.Firmware.Version != "580.159.04" ||
		!reflect.DeepEqual(ds.Firmware.Files, []string{"/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin", "/lib/firmware/nvidia/580.159.04/gsp_tu10x.bin"}) {
		t.Errorf("driver state = %+v", ds)
	}
	if !reflect.DeepEqual(s.Env, map[string]string{"CUDA_VISIBLE_DEVICES": "0"}) {
		t.Errorf("env = %v", s.Env)
	}
	if len(s.Unavailable) != 0 {
		t.Errorf("unavailable = %q", s.Unavailable)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
}

// TestCollectNoDriver: a host without NVIDIA anything gives empty driver
// fields and no complaints about the driver's files.
func TestCollectNoDriver(t *testing.T) {
	dir := t.TempDir()
	fakeTree(t, dir, map[string]string{
		"proc/devices":         "Character devices:\n  1 mem\n\nBlock devices:\n",
		"proc/modules":         "ext4 1 0 - Live 0x0\n",
		"proc/self/ns/user":    "->user:[1]",
		"proc/7/ns/user":       "->user:[1]",
		"proc/7/status":        "Name:\tsh\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n",
		"proc/7/uid_map":       "0 0 4294967295\n",
		"proc/7/cgroup":        "0::/\n",
		"proc/7/environ":       "",
		"proc/7/mountinfo":     "1 0 0:1 / / rw - ext4 /dev/vda rw\n",
		"proc/7/root/dev/null": "",
		"sys/module/ext4/":     "",
	})
	c := newCollector(Options{PID: 7, KmsgSince: time.Now()})
	c.proc, c.sys, c.kmsgPath = filepath.Join(dir, "proc"), filepath.Join(dir, "sys"), filepath.Join(dir, "no-kmsg")
	c.readSyslog = func() ([]byte, error) { return nil, unix.EPERM }
	c.selfMountinfo = func() (string, error) { return "", nil }
	c.mountCgroup2 = func() (string, func() error, error) { return "", nil, errors.New("operation not permitted") }
	s := c.run()
	if s.Driver.Loaded || s.Driver.Params != nil || s.Driver.Modules != nil || len(s.Nodes) != 0 || s.Host.DriverVersion != "" {
		t.Errorf("driver facts on a host without one: %+v nodes %v", s.Driver, s.Nodes)
	}
	if s.Process.UserNS || s.Process.UID != 0 {
		t.Errorf("process = %+v", s.Process)
	}
	// What could not be read is said, once each: the cgroup2 mount and the kernel log.
	want := []string{
		"cgroup v2 device programs: cgroup2 is not mounted and mounting it failed: operation not permitted",
		"kernel log: " + c.kmsgPath + ": no such file or directory; syslog(2): operation not permitted (needs root or CAP_SYSLOG when kernel.dmesg_restrict=1)", // names the path
	}
	if !reflect.DeepEqual(s.Unavailable, want) {
		t.Errorf("unavailable = %q\nwant %q", s.Unavailable, want)
	}
	if s.CgroupV2 == nil || !strings.Contains(s.CgroupV2.QueryError, "mounting it failed") {
		t.Errorf("cgroup v2 = %+v", s.CgroupV2)
	}
}

// TestCollectExitedTarget: a PID that is gone is said so, and no
// credentials are invented for it.
func TestCollectExitedTarget(t *testing.T) {
	dir := t.TempDir()
	fakeTree(t, dir, map[string]string{
		"proc/devices":                 "Character devices:\n195 nvidia-frontend\n",
		"proc/self/status":             "Name:\tcudatrace\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
		"proc/self/cgroup":             "0::/\n",
		"proc/self/mountinfo":          "1 0 0:1 / / rw - ext4 /dev/vda rw\n",
		"proc/self/root/dev/nvidiactl": "",
	})
	c := newCollector(Options{PID: 999999, ExtraPaths: []string{"dev/nvidia-uvm"}})
	c.proc, c.sys = filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
	c.selfMountinfo = func() (string, error) { return "41 31 0:38 / /nonexistent/unified rw - cgroup2 cgroup2 rw\n", nil }
	s := c.run()
	if s.Process.PID != 999999 || s.Process.CapEff != 0 || s.Process.Comm != "" {
		t.Errorf("process facts invented for an exited target: %+v", s.Process)
	}
	if len(s.Unavailable) == 0 || !strings.HasPrefix(s.Unavailable[0], "target had exited") {
		t.Errorf("unavailable = %q", s.Unavailable)
	}
	if n := s.Node("/dev/nvidiactl"); n == nil || !n.Exists {
		t.Errorf("own view of nodes missing: %+v", s.Nodes)
	}
	if n := s.Node("/dev/nvidia-uvm"); n == nil || n.Exists {
		t.Errorf("relative extra path not recorded as missing /dev/nvidia-uvm: %+v", s.Nodes)
	}
	// cudatrace's own cgroup (here the root: no device program) must not
	// pass for the target's: a denial there would read as allowed.
	if s.CgroupV2 == nil || s.CgroupV2.QueryError == "" || len(s.CgroupV2.Programs) != 0 || s.CgroupV2.Path != "" {
		t.Errorf("cgroup v2 of an exited target = %+v, want unknown (a query error)", s.CgroupV2)
	}
	if s.CgroupV1 != nil {
		t.Errorf("cgroup v1 of an exited target = %+v, want none read", s.CgroupV1)
	}
}

// TestContainerMarkers: /.dockerenv names docker only where a container is
// plausible; VM images built from container images keep the file too.
func TestContainerMarkers(t *testing.T) {
	for _, tc := range []struct {
		name, rootFS, targetPidNS string
		marker                    string
		want                      string
	}{
		{"VM built from a docker image", "ext4", "pid:[1]", ".dockerenv", ""},
		{"docker, cgroup namespace, overlay root", "overlay", "pid:[1]", ".dockerenv", "docker"},
		{"other pid namespace", "ext4", "pid:[2]", ".dockerenv", "docker"},
		{"podman", "overlay", "pid:[2]", "run/.containerenv", "podman"},
		{"no marker", "overlay", "pid:[2]", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{
				"proc/self/ns/pid": "->pid:[1]",
				"proc/5/ns/pid":    "->" + tc.targetPidNS,
				"proc/5/cgroup":    "0::/\n",
				"proc/5/mountinfo": "1 0 0:1 / / rw - " + tc.rootFS + " x rw\n",
			}
			if tc.marker != "" {
				files["proc/5/root/"+tc.marker] = ""
			}
			fakeTree(t, dir, files)
			c := newCollector(Options{PID: 5})
			c.proc, c.sys = filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
			c.selfMountinfo = func() (string, error) { return "", nil }
			c.mountCgroup2 = func() (string, func() error, error) { return "", nil, errors.New("no") }
			if got := c.run().Container.Runtime; got != tc.want {
				t.Errorf("runtime = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRecordedH200Snapshot reads back a snapshot Collect took on the H200
// host of the recordings (driver 580.159.04, root target, cgroup2 only), so
// a change to the JSON shape that would break stored reports shows here.
func TestRecordedH200Snapshot(t *testing.T) {
	data, err := os.ReadFile("testdata/h200-root.json")
	if err != nil {
		t.Fatal(err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.Host.DriverVersion != "580.159.04" || !s.Driver.Loaded || s.Driver.Params["DeviceFileMode"] != "438" ||
		s.Driver.UVMParams["uvm_disable_hmm"] != "N" || len(s.Driver.GPUs) != 1 {
		t.Errorf("driver facts: %+v %+v", s.Host, s.Driver.GPUs)
	}
	if m, _ := s.MajorOf("nvidia-uvm"); m != 238 || s.MajorName(195) != "nvidia" {
		t.Errorf("majors: %v", s.ProcDevices)
	}
	for p, w := range map[string][2]uint32{"/dev/nvidiactl": {195, 255}, "/dev/nvidia-uvm": {238, 0}, "/dev/nvidia-caps/nvidia-cap1": {241, 1}} {
		if n := s.Node(p); n == nil || !n.Exists || n.Major != w[0] || n.Minor != w[1] {
			t.Errorf("%s = %+v", p, n)
		}
	}
	if s.CgroupV1 != nil || s.CgroupV2 == nil || s.CgroupV2.MountPoint != "/sys/fs/cgroup" {
		t.Errorf("cgroups: v1 %+v v2 %+v", s.CgroupV1, s.CgroupV2)
	}
	// Recorded with the wider capture of an earlier version (every CUDA_*
	// and NVIDIA_* variable): the policy keeps only what a diagnosis uses.
	env := DiagnosticEnv(s.Env)
	if len(env) != 3 || env["NVIDIA_VISIBLE_DEVICES"] != "0" || env["LD_LIBRARY_PATH"] == "" || env["NVIDIA_DRIVER_CAPABILITIES"] == "" {
		t.Errorf("env kept %v", env)
	}
}

// TestCollectZombie: a target that has exited but is not yet reaped keeps
// its credentials in status, but its root is gone; nodes then come from
// cudatrace's own view, and that is said.
func TestCollectZombie(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// Wait for the exit without reaping, so the child stays a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	s := Collect(Options{PID: cmd.Process.Pid, ExtraPaths: []string{"/dev/null"}})
	if n := s.Node("/dev/null"); n == nil || !n.Exists || n.Major != 1 {
		t.Errorf("/dev/null from cudatrace's view = %+v", n)
	}
	if s.Process.UID != uint32(os.Geteuid()) || s.Process.Comm != "true" {
		t.Errorf("zombie's credentials lost: %+v", s.Process)
	}
	found := false
	for _, u := range s.Unavailable {
		found = found || strings.HasPrefix(u, "target has exited (its root is gone)")
	}
	if !found || len(s.Mounts) == 0 {
		t.Errorf("unavailable = %q, mounts %+v", s.Unavailable, s.Mounts)
	}
}

// BenchmarkCollectSelf measures a full collection of this process's view
// (taken twice per trace: at the first failure and at exit).
func BenchmarkCollectSelf(b *testing.B) {
	opts := Options{PID: os.Getpid(), KmsgSince: time.Now().Add(-time.Hour)}
	for b.Loop() {
		Collect(opts)
	}
}
