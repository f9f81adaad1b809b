package analysis

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// h200 is the recorded host (testdata/strace/h200/README.md): 195 nvidia/nvidiactl,
// 238 nvidia-uvm, 241 nvidia-caps; all nodes 0666 root:root on /dev.
func h200() *snapshot.Snapshot {
	node := func(p string, maj, min uint32) snapshot.Node {
		return snapshot.Node{Path: p, Exists: true, Type: "c", Major: maj, Minor: min, Mode: 0o666, MountPoint: "/dev"}
	}
	return &snapshot.Snapshot{
		Host: snapshot.Host{Kernel: "6.8.0", Arch: "x86_64", DriverVersion: "580.159.04"},
		ProcDevices: []snapshot.DriverMajor{
			{Major: 1, Name: "mem"}, {Major: 195, Name: "nvidia"}, {Major: 195, Name: "nvidiactl"},
			{Major: 226, Name: "drm"}, {Major: 238, Name: "nvidia-uvm"}, {Major: 239, Name: "nvidia-nvswitch"},
			{Major: 240, Name: "nvidia-nvlink"}, {Major: 241, Name: "nvidia-caps"}, {Major: 242, Name: "nvidia-caps-imex-channels"},
		},
		Nodes: []snapshot.Node{
			node("/dev/nvidia0", 195, 0), node("/dev/nvidiactl", 195, 255),
			node("/dev/nvidia-uvm", 238, 0), node("/dev/nvidia-uvm-tools", 238, 1),
		},
		Mounts:  []snapshot.Mount{{MountPoint: "/dev", Root: "/", FSType: "devtmpfs", Source: "udev", Options: []string{"rw", "nosuid"}}},
		Process: snapshot.Process{PID: 4242, Comm: "python3", UID: 0, GID: 0, CapEff: 0x1ffffffffff},
		Driver: snapshot.Driver{Loaded: true, Params: map[string]string{"DeviceFileMode": "438", "DeviceFileGID": "0", "ExcludedGpus": ""},
			GPUs: []string{"0000:00:06.0"}},
	}
}

// evb builds events with increasing Seq for one process.
type evb struct {
	seq  uint64
	pid  int
	comm string
	evs  []tracer.Event
}

func newEvents(pid int, comm string) *evb { return &evb{pid: pid, comm: comm} }

func (b *evb) add(e tracer.Event) *evb {
	b.seq++
	e.Seq, e.PID, e.TID, e.Comm = b.seq, b.pid, b.pid, b.comm
	if e.Syscall == "" {
		e.Syscall = nvdev.DefaultSyscall(e.Kind)
	}
	b.evs = append(b.evs, e)
	return b
}

func errno(e unix.Errno) int64 { return -int64(e) }

func dev(maj, min uint32) *tracer.Dev { return &tracer.Dev{Major: maj, Minor: min} }

func (b *evb) open(path string, flags uint64, ret int64, d *tracer.Dev) *evb {
	return b.add(tracer.Event{Kind: tracer.KindOpen, Path: path, Flags: flags, Ret: ret, Dev: d})
}

func (b *evb) stat(path string, ret int64, d *tracer.Dev) *evb {
	mode := uint32(0)
	if d != nil {
		mode = unix.S_IFCHR | 0o666
	}
	return b.add(tracer.Event{Kind: tracer.KindStat, Path: path, Ret: ret, Dev: d, Mode: mode})
}

func (b *evb) ioctl(fd int, req uint32, ret int64, d *tracer.Dev) *evb {
	return b.add(tracer.Event{Kind: tracer.KindIoctl, FD: fd, Request: req, Ret: ret, Dev: d})
}

func (b *evb) mknod(path string, ret int64, d *tracer.Dev) *evb {
	return b.add(tracer.Event{Kind: tracer.KindMknod, Path: path, Mode: unix.S_IFCHR | 0o666, Ret: ret, Dev: d})
}

func (b *evb) unlink(path string, ret int64) *evb {
	return b.add(tracer.Event{Kind: tracer.KindUnlink, Path: path, Ret: ret})
}

func (b *evb) symlink(target, path string, ret int64) *evb {
	return b.add(tracer.Event{Kind: tracer.KindSymlink, Path: path, Target: target, Ret: ret})
}

// find returns the finding with id or fails the test.
func find(t *testing.T, a Result, id string) Finding {
	t.Helper()
	for _, f := range a.Findings {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("no finding %q; got %v\nverdict: %s", id, ids(a), a.Verdict)
	return Finding{}
}

func has(a Result, id string) bool {
	for _, f := range a.Findings {
		if f.ID == id {
			return true
		}
	}
	return false
}

func ids(a Result) []string {
	var s []string
	for _, f := range a.Findings {
		s = append(s, f.ID+"/"+string(f.Severity))
	}
	return s
}

// mustContain checks that text holds every want string.
func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

func detail(f Finding) string { return strings.Join(f.Detail, "\n") }

// devRule is one allow rule of a runc-style program; major -1 is '*'.
type devRule struct {
	major int64
	allow bool
}

// runcProgram assembles runc's shape: the shared prologue (r2 type, r3
// access, r4 major, r5 minor), one block per char rule with rwm access
// (type and major guards, then return), and a default verdict.
func runcProgram(t testing.TB, rules []devRule, defaultAllow bool) []byte {
	insns := runcPrologue()
	ret := func(v bool) int64 {
		if v {
			return 1
		}
		return 0
	}
	for i, r := range rules {
		next := fmt.Sprintf("block%d", i+1)
		insns = append(insns, asm.JNE.Imm(asm.R2, 2, next).WithSymbol(fmt.Sprintf("block%d", i)))
		if r.major >= 0 {
			insns = append(insns, asm.JNE.Imm(asm.R4, int32(r.major), next))
		}
		insns = append(insns, asm.Mov.Imm(asm.R0, int32(ret(r.allow))), asm.Return())
	}
	last := asm.Mov.Imm(asm.R0, int32(ret(defaultAllow)))
	insns = append(insns, last.WithSymbol(fmt.Sprintf("block%d", len(rules))), asm.Return())
	return assemble(t, insns)
}

// runcPrologue loads r2 = type, r3 = access, r4 = major, r5 = minor from
// struct bpf_cgroup_dev_ctx.
func runcPrologue() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
}

// assemble resolves jump labels to offsets and encodes the program as raw
// little-endian struct bpf_insn, as the kernel hands it back.
func assemble(t testing.TB, insns asm.Instructions) []byte {
	t.Helper()
	at := map[string]int{}
	for i, in := range insns {
		if s := in.Symbol(); s != "" {
			at[s] = i // every instruction used here is one slot wide
		}
	}
	out := make(asm.Instructions, len(insns))
	for i, in := range insns {
		if ref := in.Reference(); ref != "" {
			target, ok := at[ref]
			if !ok {
				t.Fatalf("undefined label %q", ref)
			}
			in.Offset = int16(target - i - 1)
			in = in.WithReference("")
		}
		out[i] = in
	}
	var buf bytes.Buffer
	if err := out.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// lxcDenyUVM is a Proxmox LXC 200 on cgroup v2 whose program allows only
// c 195:* and c 226:*.
func lxcDenyUVM(t testing.TB) *snapshot.Snapshot {
	s := h200()
	s.Container = snapshot.Container{Runtime: "lxc", ID: "200", ProxmoxCTID: "200"}
	s.CgroupV2 = &snapshot.CgroupV2{Path: "/lxc/200/ns", MountPoint: "/sys/fs/cgroup", Programs: []snapshot.DeviceProgram{{
		ID: 57, Name: "lxc_devices", AttachedTo: "/lxc/200", AttachFlags: 2,
		Instructions: runcProgram(t, []devRule{{195, true}, {226, true}}, false),
	}}}
	return s
}

// denyUVMEvents mirrors the /dev/nvidia* lines of
// testdata/strace/h200/cuinit-deny-uvm.strace (pid 639, python3).
func denyUVMEvents() []tracer.Event {
	const rw, cloexec = unix.O_RDWR, unix.O_CLOEXEC
	ctl := dev(195, 255)
	b := newEvents(639, "python3")
	b.open("/usr/local/nvidia/lib64/libcuda.so.1", unix.O_RDONLY|cloexec, 3, nil)
	b.add(tracer.Event{Kind: tracer.KindAccess, Syscall: "access", Path: "/sys/module/nvidia/initstate", Flags: unix.R_OK})
	b.stat("/dev/nvidiactl", 0, ctl).stat("/dev/nvidiactl", 0, ctl)
	b.unlink("/dev/char/195:255", errno(unix.ENOENT))
	b.symlink("../nvidiactl", "/dev/char/195:255", errno(unix.ENOENT))
	b.stat("/dev/char/195:255", errno(unix.ENOENT), nil)
	b.stat("/usr/bin/nvidia-modprobe", errno(unix.ENOENT), nil)
	b.stat("/dev/nvidiactl", 0, ctl)
	b.open("/dev/nvidiactl", rw, 8, ctl)
	for _, req := range []uint32{0xc00846d6, 0xc90046c8, 0xc030462b, 0xc020462a, 0xc0104629} {
		b.ioctl(8, req, 0, ctl)
	}
	b.stat("/dev/nvidiactl", 0, ctl).stat("/dev/nvidiactl", 0, ctl)
	b.unlink("/dev/char/195:255", errno(unix.ENOENT))
	b.symlink("../nvidiactl", "/dev/char/195:255", errno(unix.ENOENT))
	b.stat("/dev/char/195:255", errno(unix.ENOENT), nil)
	b.stat("/usr/bin/nvidia-modprobe", errno(unix.ENOENT), nil)
	b.stat("/dev/nvidiactl", 0, ctl)
	b.open("/dev/nvidiactl", rw, 8, ctl)
	for _, req := range []uint32{0xc00846d6, 0xc90046c8, 0xc030462b, 0xc020462a, 0xc020462a, 0xc030462b, 0xc020462a} {
		b.ioctl(8, req, 0, ctl)
	}
	b.stat("/dev/nvidia-uvm", 0, dev(238, 0)).stat("/dev/nvidia-uvm", 0, dev(238, 0))
	b.unlink("/dev/char/238:0", errno(unix.ENOENT))
	b.symlink("../nvidia-uvm", "/dev/char/238:0", errno(unix.ENOENT))
	b.stat("/dev/char/238:0", errno(unix.ENOENT), nil)
	b.stat("/usr/bin/nvidia-modprobe", errno(unix.ENOENT), nil)
	b.open("/dev/nvidia-uvm", rw|cloexec, errno(unix.EPERM), nil)
	b.open("/dev/nvidia-uvm", rw, errno(unix.EPERM), nil)
	b.ioctl(-1, 0x30000002, errno(unix.EBADF), nil)
	b.ioctl(8, 0xc0104629, 0, ctl).ioctl(8, 0xc0104629, 0, ctl)
	b.add(tracer.Event{Kind: tracer.KindExit, ExitCode: 0})
	return b.evs
}
