// Package reportfixture builds the reports the archive and renderer tests
// share: real H200 event streams (the strace recordings, imported as
// `cudatrace explain` does) paired with snapshot literals of hosts where
// those streams happen. It is imported by tests only, from a package one
// directory below the repository root (the recordings are ../testdata).
package reportfixture

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// Each fixture is fed through the Recorder, as a live trace is, and
// analysed.

// fixedCreated and fixedStart keep the golden files stable.
var (
	fixedCreated = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)
	fixedStart   = time.Date(2026, 3, 14, 14, 58, 43, 0, time.UTC)
)

// Fixture is one recording and the host it ran on.
type Fixture struct {
	Name   string
	strace string // under ../testdata/strace/h200
	argv   []string
	user   string
	uid    int
	snap   func(t testing.TB) *snapshot.Snapshot
}

var cuInitArgv = []string{"python3", "-c", `import ctypes; c=ctypes.CDLL("libcuda.so.1"); print("cuInit", c.cuInit(0))`}

// All are the fixtures: a refused UVM node under LXC, a healthy run, and
// nvidia-smi refused 195 under Docker.
var All = []Fixture{
	{Name: "lxc-deny-uvm", strace: "cuinit-deny-uvm.strace", argv: cuInitArgv, user: "root", snap: lxcDenyUVMSnapshot},
	{Name: "ok-root", strace: "cuinit-ok-root.strace", argv: cuInitArgv, user: "root", snap: healthySnapshot},
	{Name: "docker-deny-195-smi", strace: "cuinit-deny-195-smi.strace", argv: []string{"nvidia-smi", "-L"}, user: "root", snap: dockerDeny195Snapshot},
}

// Build imports the fixture's recording and builds the report the live
// path (cmd/cudatrace buildReport) would have written.
func Build(t testing.TB, fx Fixture) *report.Report {
	t.Helper()
	log := importLog(t, fx.strace)
	rec := record.New()
	for i := range log.Events {
		rec.Event(&log.Events[i])
	}
	snap := fx.snap(t)
	var dur time.Duration
	if n := len(log.Events); n > 0 {
		dur = log.Events[n-1].Time
	}
	rep := &report.Report{
		Schema:  report.SchemaVersion,
		Tool:    report.Tool{Name: "cudatrace", Version: "test"},
		Created: fixedCreated,
		Target:  report.Target{Argv: fx.argv, User: fx.user, UID: fx.uid, Exit: log.Exit},
		Trace: report.Trace{
			Source:   "live",
			Backend:  "ebpf",
			Started:  fixedStart,
			Duration: dur,
			Events:   rec.Seen,
			Stored:   len(rec.Events()),
			Complete: true,
		},
		Events:   rec.Events(),
		Ioctls:   rec.Ioctls(),
		Folded:   rec.Folded(),
		Snapshot: snap,
	}
	rep.Analysis = analysis.AnalyzeFacts(rep.Events, snap, rep.Facts())
	return rep
}

// importLog parses one of the H200 recordings.
func importLog(t testing.TB, name string) *stracelog.Log {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "strace", "h200", name))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	log, err := stracelog.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return log
}

// h200Base is the recorded host (testdata/strace/h200/README.md): open
// kernel module 580.159.04, majors 195 nvidia/nvidiactl, 238 nvidia-uvm,
// 241 nvidia-caps; every node 0666 except the caps.
func h200Base(pid int, comm string) *snapshot.Snapshot {
	node := func(p string, maj, min, mode uint32) snapshot.Node {
		return snapshot.Node{Path: p, Exists: true, Type: "c", Major: maj, Minor: min, Mode: mode, MountPoint: "/dev"}
	}
	return &snapshot.Snapshot{
		TakenAt: fixedStart.Add(2 * time.Second),
		Host: snapshot.Host{
			Kernel: "6.8.12-4-pve", Arch: "x86_64", Hostname: "gpu-node-7",
			DriverVersion: "580.159.04",
			DriverLine:    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-B16-02-3)  Thu Jan 29 02:13:27 UTC 2026",
		},
		ProcDevices: []snapshot.DriverMajor{
			{Major: 1, Name: "mem"}, {Major: 4, Name: "/dev/vc/0"}, {Major: 4, Name: "tty"},
			{Major: 5, Name: "/dev/tty"}, {Major: 5, Name: "/dev/console"}, {Major: 5, Name: "/dev/ptmx"},
			{Major: 10, Name: "misc"}, {Major: 136, Name: "pts"},
			{Major: 195, Name: "nvidia"}, {Major: 195, Name: "nvidiactl"},
			{Major: 226, Name: "drm"}, {Major: 238, Name: "nvidia-uvm"}, {Major: 239, Name: "nvidia-nvswitch"},
			{Major: 240, Name: "nvidia-nvlink"}, {Major: 241, Name: "nvidia-caps"},
			{Major: 242, Name: "nvidia-caps-imex-channels"},
		},
		Nodes: []snapshot.Node{
			node("/dev/nvidia0", 195, 0, 0o666), node("/dev/nvidiactl", 195, 255, 0o666),
			node("/dev/nvidia-uvm", 238, 0, 0o666), node("/dev/nvidia-uvm-tools", 238, 1, 0o666),
			node("/dev/nvidia-caps/nvidia-cap1", 241, 1, 0o400), node("/dev/nvidia-caps/nvidia-cap2", 241, 2, 0o444),
		},
		Mounts: []snapshot.Mount{{MountPoint: "/dev", Root: "/", FSType: "devtmpfs", Source: "udev",
			Options: []string{"rw", "nosuid", "relatime"}}},
		Process: snapshot.Process{PID: pid, Comm: comm, UID: 0, GID: 0, User: "root",
			CapEff: 0x1ffffffffff, CapBnd: 0x1ffffffffff},
		Driver: snapshot.Driver{
			Loaded: true,
			Params: map[string]string{"DeviceFileMode": "438", "DeviceFileUID": "0", "DeviceFileGID": "0",
				"ExcludedGpus": "", "EnableNonblockingOpen": "1"},
			UVMParams: map[string]string{"uvm_disable_hmm": "N"},
			Modules:   []string{"nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"},
			GPUs:      []string{"0000:00:06.0"},
		},
		Env: map[string]string{"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"},
	}
}

// healthySnapshot is the ok-root recording's host: a root shell in a
// session scope with no device programs.
func healthySnapshot(t testing.TB) *snapshot.Snapshot {
	s := h200Base(614, "python3")
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/user.slice/user-0.slice/session-3.scope", MountPoint: "/sys/fs/cgroup"}
	s.Container = snapshot.Container{Unit: "session-3.scope"}
	return s
}

// lxcDenyUVMSnapshot is the seed case: Proxmox CT 200, unprivileged, whose
// config allows c 195:* and c 226:* only, so nvidia-uvm (238) is denied.
// The nodes are bind-mounted from the host into the container's tmpfs /dev.
func lxcDenyUVMSnapshot(t testing.TB) *snapshot.Snapshot {
	s := h200Base(639, "python3")
	s.Host.Hostname = "ct200-train"
	s.Mounts = []snapshot.Mount{{MountPoint: "/dev", Root: "/", FSType: "tmpfs", Source: "none",
		Options: []string{"rw", "relatime", "size=492k", "mode=755", "uid=100000", "gid=100000"}}}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		n.MountPoint = n.Path
		s.Mounts = append(s.Mounts, snapshot.Mount{MountPoint: n.Path, Root: n.Path[len("/dev"):], FSType: "devtmpfs",
			Source: "udev", Options: []string{"rw", "nosuid", "relatime"}, Bind: true})
	}
	s.Process.UserNS = true
	s.Container = snapshot.Container{Runtime: "lxc", ID: "200", ProxmoxCTID: "200"}
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/lxc/200/ns", MountPoint: "/sys/fs/cgroup", Programs: []snapshot.DeviceProgram{{
		ID: 57, Tag: "3918c82a5f4c0360", AttachedTo: "/lxc/200", AttachFlags: 2,
		Instructions: runcShaped(t, []devRule{charRule(195, -1, true), charRule(226, -1, true)}, false),
	}}}
	return s
}

// dockerDeny195Snapshot: nvidia-smi in a Docker container whose device
// program lost 195 in a runtime cgroup update (the program was rewritten
// without the devices the NVIDIA hook had added), while uvm and the caps
// stayed allowed.
func dockerDeny195Snapshot(t testing.TB) *snapshot.Snapshot {
	s := h200Base(651, "nvidia-smi")
	const id = "4f3c9a1be27d8c05e6b1f0a3d92c7e4b58a6f1d0c3b2a79e8d4c6f5a1b0e9d27"
	scope := "/system.slice/docker-" + id + ".scope"
	s.Container = snapshot.Container{Runtime: "docker", ID: id, Unit: "docker-" + id + ".scope"}
	allow := []devRule{
		charRule(1, 3, true), charRule(1, 5, true), charRule(1, 7, true), charRule(1, 8, true), charRule(1, 9, true),
		charRule(5, 0, true), charRule(5, 1, true), charRule(5, 2, true), charRule(136, -1, true), charRule(10, 200, true),
		charRule(238, -1, true), charRule(241, -1, true),
	}
	s.CgroupV2 = &snapshot.CgroupV2{Path: scope, MountPoint: "/sys/fs/cgroup", Programs: []snapshot.DeviceProgram{{
		ID: 112, Tag: "c1d4e3f2a0b98765", AttachedTo: scope, AttachFlags: 2,
		Instructions: runcShaped(t, allow, false),
	}}}
	return s
}

// devRule is one rule of a runc-generated device program: type 'c' (2) or
// 'b' (1), major/minor with -1 for '*', and always rwm access, for which
// runc emits no access check.
type devRule struct {
	typ          int32
	major, minor int64
	allow        bool
}

func charRule(major, minor int64, allow bool) devRule {
	return devRule{typ: 2, major: major, minor: minor, allow: allow}
}

// runcShaped assembles a program the way runc's devicefilter does: load
// type, access, major and minor from struct bpf_cgroup_dev_ctx into r2..r5,
// then one guarded block per rule that returns its verdict, then the
// default verdict. It returns raw little-endian struct bpf_insn, as
// BPF_OBJ_GET_INFO_BY_FD hands them back.
func runcShaped(t testing.TB, rules []devRule, defaultAllow bool) []byte {
	t.Helper()
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
	verdict := func(v bool) int32 {
		if v {
			return 1
		}
		return 0
	}
	for i, r := range rules {
		next := fmt.Sprintf("block-%d", i+1)
		insns = append(insns, asm.JNE.Imm(asm.R2, r.typ, next).WithSymbol(fmt.Sprintf("block-%d", i)))
		if r.major >= 0 {
			insns = append(insns, asm.JNE.Imm(asm.R4, int32(r.major), next))
		}
		if r.minor >= 0 {
			insns = append(insns, asm.JNE.Imm(asm.R5, int32(r.minor), next))
		}
		insns = append(insns, asm.Mov.Imm(asm.R0, verdict(r.allow)), asm.Return())
	}
	insns = append(insns, asm.Mov.Imm(asm.R0, verdict(defaultAllow)).WithSymbol(fmt.Sprintf("block-%d", len(rules))), asm.Return())

	// Resolve the labels to jump offsets; every instruction here is one
	// slot wide.
	at := map[string]int{}
	for i, in := range insns {
		if s := in.Symbol(); s != "" {
			at[s] = i
		}
	}
	for i := range insns {
		if ref := insns[i].Reference(); ref != "" {
			target, ok := at[ref]
			if !ok {
				t.Fatalf("undefined label %q", ref)
			}
			insns[i].Offset = int16(target - i - 1)
			insns[i] = insns[i].WithReference("")
		}
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// MustJSON is v as JSON.
func MustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// SameJSON is whether a and b encode to the same JSON.
func SameJSON(t testing.TB, a, b any) bool {
	t.Helper()
	return bytes.Equal(MustJSON(t, a), MustJSON(t, b))
}
