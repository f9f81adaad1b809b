package snapshot

import (
	"reflect"
	"strings"
	"testing"
)

// procDevices580 is /proc/devices on the H200 host of the recordings
// (driver 580.159.04), with the block section that must be ignored.
const procDevices580 = `Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
 10 misc
195 nvidia
195 nvidiactl
195 nvidia-modeset
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels
511 nvidia-uvm-ghost

Block devices:
  7 loop
195 notachardev
259 blkext
`

const procDevices535 = `Character devices:
  1 mem
195 nvidia-frontend
509 nvidia-uvm
510 nvidia-caps

Block devices:
  8 sd
`

func TestParseProcDevices(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []DriverMajor
	}{
		{"545+ three 195 lines", procDevices580, []DriverMajor{
			{1, "mem"}, {4, "/dev/vc/0"}, {4, "tty"}, {5, "/dev/tty"}, {10, "misc"},
			{195, "nvidia"}, {195, "nvidiactl"}, {195, "nvidia-modeset"}, {238, "nvidia-uvm"},
			{239, "nvidia-nvswitch"}, {240, "nvidia-nvlink"}, {241, "nvidia-caps"},
			{242, "nvidia-caps-imex-channels"}, {511, "nvidia-uvm-ghost"},
		}},
		{"535 nvidia-frontend", procDevices535, []DriverMajor{
			{1, "mem"}, {195, "nvidia-frontend"}, {509, "nvidia-uvm"}, {510, "nvidia-caps"},
		}},
		{"no header: whole text is the char section", "195 nvidia-frontend\n", []DriverMajor{{195, "nvidia-frontend"}}},
		{"garbage lines skipped", "Character devices:\nxx nvidia\n195\n-1 neg\n4294967296 big\n 10 misc extra\n 10 misc\n", []DriverMajor{{10, "misc"}}},
		{"only block devices", "Character devices:\n\nBlock devices:\n  7 loop\n", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseProcDevices(tt.text)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestProcDevicesHelpers(t *testing.T) {
	s := &Snapshot{ProcDevices: ParseProcDevices(procDevices580)}
	if m, ok := s.MajorOf("nvidia-uvm"); !ok || m != 238 {
		t.Errorf("MajorOf(nvidia-uvm) = %d, %v", m, ok)
	}
	if got := expectedNodes(s.ProcDevices); !reflect.DeepEqual(got, []string{"/dev/nvidiactl", "/dev/nvidia-uvm"}) {
		t.Errorf("expectedNodes(580) = %v", got)
	}
	if got := expectedNodes(ParseProcDevices(procDevices535)); !reflect.DeepEqual(got, []string{"/dev/nvidiactl", "/dev/nvidia-uvm"}) {
		t.Errorf("expectedNodes(535) = %v", got)
	}
	if got := expectedNodes(ParseProcDevices("Character devices:\n  1 mem\n")); got != nil {
		t.Errorf("expectedNodes(no driver) = %v", got)
	}
}

// A container's mountinfo: /dev is a nodev tmpfs, /dev/nvidia0 a bind
// mount of a single host node, a directory name with a space in it.
const mountinfoContainer = `1021 980 0:120 / / rw,relatime master:301 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
1022 1021 0:123 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1023 1021 0:124 / /dev rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k,mode=755,inode64
1024 1023 0:125 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620,ptmxmode=666
1030 1023 0:5 /nvidia0 /dev/nvidia0 rw,nosuid,noexec,relatime master:2 - devtmpfs udev rw,size=4027780k,nr_inodes=1006945,mode=755
1031 1021 252:1 /srv/my\040data /mnt/my\040data rw,relatime shared:1 master:7 - ext4 /dev/vda1 rw
garbage line
1032 1021 0:126 / /x rw - 
`

func TestParseMountinfo(t *testing.T) {
	got := ParseMountinfo(mountinfoContainer)
	want := []Mount{
		{MountPoint: "/", Root: "/", FSType: "overlay", Source: "overlay", Options: []string{"rw", "relatime"}},
		{MountPoint: "/proc", Root: "/", FSType: "proc", Source: "proc", Options: []string{"rw", "nosuid", "nodev", "noexec", "relatime"}, NoDev: true},
		{MountPoint: "/dev", Root: "/", FSType: "tmpfs", Source: "tmpfs", Options: []string{"rw", "nosuid", "nodev"}, NoDev: true},
		{MountPoint: "/dev/pts", Root: "/", FSType: "devpts", Source: "devpts", Options: []string{"rw", "nosuid", "noexec", "relatime"}},
		{MountPoint: "/dev/nvidia0", Root: "/nvidia0", FSType: "devtmpfs", Source: "udev", Options: []string{"rw", "nosuid", "noexec", "relatime"}, Bind: true},
		{MountPoint: "/mnt/my data", Root: "/srv/my data", FSType: "ext4", Source: "/dev/vda1", Options: []string{"rw", "relatime"}, Bind: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	for _, tc := range []struct {
		path, mount string
	}{
		{"/dev/nvidia0", "/dev/nvidia0"},
		{"/dev/nvidiactl", "/dev"},
		{"/dev/nvidia0x", "/dev"}, // a prefix of the name is not a parent
		{"/dev/pts/0", "/dev/pts"},
		{"/etc/passwd", "/"},
	} {
		if i := mountOf(got, tc.path); i < 0 || got[i].MountPoint != tc.mount {
			t.Errorf("mountOf(%s) = %d, want %s", tc.path, i, tc.mount)
		}
	}
}

func TestMountOfStacked(t *testing.T) {
	// Two mounts on /dev: the later one is on top and is what paths resolve to.
	ms := ParseMountinfo("1 0 0:1 / / rw - ext4 /dev/vda rw\n2 1 0:2 / /dev rw - devtmpfs udev rw\n3 1 0:3 / /dev rw,nodev - tmpfs none rw\n")
	if i := mountOf(ms, "/dev/nvidiactl"); i != 2 || !ms[i].NoDev {
		t.Fatalf("mountOf = %d, want the stacked nodev tmpfs (2)", i)
	}
	if mountOf(nil, "/dev") != -1 {
		t.Fatal("mountOf(nil) should be -1")
	}
}

func TestSuperOptions(t *testing.T) {
	ms := parseSelfMounts("36 31 0:33 / /sys/fs/cgroup/devices rw,nosuid,relatime shared:17 - cgroup cgroup rw,devices\n41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate\n")
	if len(ms) != 2 || !contains(ms[0].Super, "devices") || ms[1].FSType != "cgroup2" || ms[1].Super[1] != "nsdelegate" {
		t.Fatalf("parseSelfMounts = %+v", ms)
	}
}

// Lines as /proc/driver/nvidia/params prints them (580.159.04).
const paramsText = `ResmanDebugLevel: 4294967295
RmLogonRC: 1
ModifyDeviceFiles: 1
DeviceFileUID: 0
DeviceFileGID: 0
DeviceFileMode: 438
InitializeSystemMemoryAllocations: 1
EnableGpuFirmware: 18
RegistryDwords: ""
RegistryDwordsPerDevice: ""
RmMsg: ""
GpuBlacklist: ""
TemporaryFilePath: ""
ExcludedGpus: "GPU-5b9c1a44"
`

func TestParseNVIDIAParams(t *testing.T) {
	got := ParseNVIDIAParams(paramsText)
	for k, v := range map[string]string{
		"DeviceFileMode": "438", "ModifyDeviceFiles": "1", "ResmanDebugLevel": "4294967295",
		"RegistryDwords": "", "ExcludedGpus": "GPU-5b9c1a44", "EnableGpuFirmware": "18",
	} {
		if gv, ok := got[k]; !ok || gv != v {
			t.Errorf("%s = %q (present %v), want %q", k, gv, ok, v)
		}
	}
	if len(got) != 14 {
		t.Errorf("got %d keys, want 14", len(got))
	}
	if got := ParseNVIDIAParams("no colon here\n: empty key\nTwo words: x\n"); len(got) != 0 {
		t.Errorf("malformed lines parsed: %v", got)
	}
}

func TestParseDriverVersion(t *testing.T) {
	for line, want := range map[string]string{
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Jan 22 00:00:00 UTC 2026": "580.159.04",
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023":                                                         "535.129.03",
		"NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54  Tue Feb 20 00:00:00 UTC 2024":                                                            "550.54",
		"garbage": "",
	} {
		if got := parseDriverVersion(line); got != want {
			t.Errorf("parseDriverVersion(%q) = %q, want %q", line, got, want)
		}
	}
}

const statusNobody = `Name:	python3
Umask:	0022
State:	S (sleeping)
Tgid:	639
NSpid:	639
Uid:	65534	65534	65534	65534
Gid:	65534	65534	65534	65534
FDSize:	64
Groups:	44 65534 
NoNewPrivs:	1
Seccomp:	2
Seccomp_filters:	1
CapInh:	0000000000000000
CapPrm:	0000000000000000
CapEff:	0000000008000000
CapBnd:	000001ffffffffff
CapAmb:	0000000000000000
`

func TestParseStatus(t *testing.T) {
	got := parseStatus(statusNobody)
	want := procStatus{Name: "python3", UID: 65534, GID: 65534, Groups: []uint32{44, 65534},
		CapEff: 1 << 27, CapBnd: 0x1ffffffffff, NoNewPrivs: true, Seccomp: 2, SeccompFilters: 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	p := Process{CapEff: got.CapEff}
	if !p.CanMknod() {
		t.Error("CAP_MKNOD in CapEff should allow mknod")
	}
	// Setuid: the effective id is the one access checks use.
	if st := parseStatus("Uid:\t1000\t0\t0\t0\n"); st.UID != 0 {
		t.Errorf("effective uid = %d, want 0", st.UID)
	}
}

func TestParseKmsgRecord(t *testing.T) {
	rec, ok := parseKmsgRecord("4,1623,8273941,-;NVRM: Xid (PCI:0000:00:06): 79, pid=1234, GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:06.0")
	if !ok || rec.Seq != 1623 || rec.Usec != 8273941 || rec.Text != "NVRM: Xid (PCI:0000:00:06): 79, pid=1234, GPU has fallen off the bus." {
		t.Fatalf("got %+v %v", rec, ok)
	}
	if !kmsgInteresting(rec.Text) {
		t.Error("Xid line should be kept")
	}
	for _, bad := range []string{"", "no semicolon", "4,x,1,-;t", "4,1;t"} {
		if _, ok := parseKmsgRecord(bad); ok {
			t.Errorf("parseKmsgRecord(%q) accepted", bad)
		}
	}
	if kmsgInteresting("usb 1-1: new high-speed USB device") {
		t.Error("unrelated line kept")
	}
}

func TestDiagnosticEnv(t *testing.T) {
	env := parseEnviron([]byte("PATH=/bin\x00CUDA_VISIBLE_DEVICES=-1\x00NVIDIA_VISIBLE_DEVICES=all\x00AWS_SECRET_ACCESS_KEY=s3cr3t\x00" +
		"LD_LIBRARY_PATH=/usr/local/cuda/lib64/stubs\x00CUDA_MODULE_LOADING=LAZY\x00LD_PRELOAD=x\x00=bad\x00" +
		"NVIDIA_API_KEY=nvapi-s3cr3t\x00CUDA_AUTH_TOKEN=t0k3n\x00NVIDIA_DRIVER_CAPABILITIES=compute,utility\x00CUDA_CACHE_PATH=/home/u\x00"))
	got := DiagnosticEnv(env)
	want := map[string]string{"CUDA_VISIBLE_DEVICES": "-1", "NVIDIA_VISIBLE_DEVICES": "all", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64/stubs",
		"CUDA_MODULE_LOADING": "LAZY", "LD_PRELOAD": "x", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("kept %v\nwant %v", got, want)
	}
	if DiagnosticEnv(map[string]string{"PATH": "/bin"}) != nil {
		t.Error("nothing kept should be nil, so the report has no env")
	}
	// A listed name that looks like a credential is kept masked: the rule
	// holds even if the list grows one.
	diagnosticEnv["NVIDIA_API_KEY"] = true
	defer delete(diagnosticEnv, "NVIDIA_API_KEY")
	if v := DiagnosticEnv(env)["NVIDIA_API_KEY"]; v != MaskedValue {
		t.Errorf("NVIDIA_API_KEY = %q, want it masked", v)
	}
	for name, want := range map[string]bool{"NVIDIA_API_KEY": true, "hf_token": true, "DB_PASSWORD": true, "GH_AUTH": true,
		"AWS_SECRET_ACCESS_KEY": true, "CUDA_VISIBLE_DEVICES": false, "LD_PRELOAD": false, "NVIDIA_DRIVER_CAPABILITIES": false} {
		if looksLikeCredential(name) != want {
			t.Errorf("looksLikeCredential(%s) = %v", name, !want)
		}
	}
}

func FuzzParseProcDevices(f *testing.F) {
	f.Add(procDevices580)
	f.Add(procDevices535)
	f.Add("Character devices:\n195 \n")
	f.Fuzz(func(t *testing.T, text string) {
		for _, d := range ParseProcDevices(text) {
			if d.Name == "" || strings.ContainsAny(d.Name, " \t\n") {
				t.Fatalf("bad name %q", d.Name)
			}
		}
	})
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add(mountinfoContainer)
	f.Add(`1 0 0:1 /a\ /b\134 rw - x y z`)
	f.Fuzz(func(t *testing.T, text string) {
		for _, m := range ParseMountinfo(text) {
			if m.Bind != (m.Root != "/") {
				t.Fatalf("Bind inconsistent: %+v", m)
			}
		}
		mountOf(ParseMountinfo(text), "/dev/nvidiactl")
	})
}

// /dev/kmsg escapes the driver's multi-line messages (\x0a): read back as
// one line, as the H200's "API mismatch" record came.
func TestKmsgUnescape(t *testing.T) {
	rec, ok := parseKmsgRecord(`4,1234,5678,-;NVRM: API mismatch: the client 'rmprobe' (pid 3228)\x0aNVRM: has the version 0.0.0\x5c`)
	if !ok || rec.Text != `NVRM: API mismatch: the client 'rmprobe' (pid 3228) NVRM: has the version 0.0.0\` {
		t.Fatalf("%q", rec.Text)
	}
}

// Each driver mark keeps a line wherever it appears; case matters, as it
// did in the regexp this replaced.
func TestKmsgInterestingMarks(t *testing.T) {
	for _, line := range []string{"[x] NVRM: loading", "a Xid b", "nvidia-uvm: Loaded", "nvidia-modeset: x",
		"NVIDIA: API mismatch", "RmInitAdapter failed", "GSP timeout", "nvidia-nvlink: Nvlink Core", "NVIDIA GPU"} {
		if !kmsgInteresting(line) {
			t.Errorf("%q dropped", line)
		}
	}
	for _, line := range []string{"nvidia: module verification failed", "xid", "gsp", "nvidia-drm"} {
		if kmsgInteresting(line) {
			t.Errorf("%q kept", line)
		}
	}
}
