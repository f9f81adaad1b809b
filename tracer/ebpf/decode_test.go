package ebpf

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"

	"github.com/cudatrace/cudatrace/tracer"
)

func putStr(dst []int8, s string) {
	for i := range dst {
		dst[i] = 0
	}
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

func sample(e *bpfEvent) []byte {
	b := make([]byte, eventSize)
	copy(b, unsafe.Slice((*byte)(unsafe.Pointer(e)), eventSize))
	return b
}

func ioctlSample() []byte {
	e := bpfEvent{
		Ktime: 1_500, Ret: -25, Tgid: 42, Tid: 43, Request: 0xc020462a, Fd: 5,
		DevMajor: 195, DevMinor: 255, HasDev: 1, ArgLen: 16,
		Syscall: uint16(bpfSyscallIdSC_IOCTL), Kind: uint8(bpfEventKindKIND_IOCTL),
	}
	putStr(e.Comm[:], "python3")
	for i := range 16 {
		e.Arg[i] = byte(i)
	}
	return sample(&e)
}

func TestDecode(t *testing.T) {
	d := newDecoder(1_000)
	ev, err := d.decode(ioctlSample())
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 || ev.Time != 500 || ev.PID != 42 || ev.TID != 43 || ev.Comm != "python3" ||
		ev.Kind != tracer.KindIoctl || ev.Syscall != "ioctl" || ev.FD != 5 || ev.Request != 0xc020462a ||
		ev.Ret != -25 || ev.Dev == nil || *ev.Dev != (tracer.Dev{Major: 195, Minor: 255}) ||
		len(ev.Arg) != 16 || ev.Arg[15] != 15 || ev.ErrnoName() != "ENOTTY" {
		t.Fatalf("decoded %+v", *ev)
	}

	exec := bpfEvent{Tgid: 7, Tid: 7, Syscall: uint16(bpfSyscallIdSC_EXECVE), Kind: uint8(bpfEventKindKIND_EXEC), Argc: 2}
	putStr(exec.Path[:], "/usr/bin/nvidia-modprobe")
	putStr(exec.Aux[0:argvSlot], "nvidia-modprobe")
	putStr(exec.Aux[argvSlot:2*argvSlot], "-u")
	ev, err = d.decode(sample(&exec))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 2 || ev.Path != "/usr/bin/nvidia-modprobe" || len(ev.Argv) != 2 || ev.Argv[1] != "-u" || ev.Dev != nil {
		t.Fatalf("exec decoded %+v", *ev)
	}

	exit := bpfEvent{Tgid: 7, Tid: 7, Syscall: uint16(bpfSyscallIdSC_EXIT), Kind: uint8(bpfEventKindKIND_EXIT), ExitCode: 0x8b} // SIGSEGV, core
	ev, err = d.decode(sample(&exit))
	if err != nil || ev.Signal != 11 || ev.ExitCode != 0 {
		t.Fatalf("exit decoded %+v, %v", ev, err)
	}
	exit.ExitCode = 3 << 8
	if ev, _ = d.decode(sample(&exit)); ev.ExitCode != 3 || ev.Signal != 0 {
		t.Fatalf("exit 3 decoded %+v", *ev)
	}
}

// cut keeps the first n bytes of a sample, as the BPF side sends a record.
func cut(b []byte, n int) []byte { return b[:n:n] }

// Records arrive cut after what their kind uses; the rest reads as zero,
// even where an earlier longer record left bytes in the decoder.
func TestDecodeCutRecords(t *testing.T) {
	d := newDecoder(0)
	long := bpfEvent{Tgid: 9, Tid: 9, Syscall: uint16(bpfSyscallIdSC_SYMLINK), Kind: uint8(bpfEventKindKIND_SYMLINK)}
	putStr(long.Path[:], "/dev/nvidia-very-long-link-name-that-a-short-one-must-not-inherit")
	putStr(long.Aux[:], "/dev/nvidiactl")
	if ev, err := d.decode(sample(&long)); err != nil || ev.Target != "/dev/nvidiactl" {
		t.Fatalf("symlink decoded %+v, %v", ev, err)
	}

	open := bpfEvent{Tgid: 9, Tid: 9, Ret: 4, Syscall: uint16(bpfSyscallIdSC_OPENAT), Kind: uint8(bpfEventKindKIND_OPEN)}
	const path = "/dev/nvidia0"
	putStr(open.Path[:], path)
	open.PathLen = uint16(len(path) + 1)
	ev, err := d.decode(cut(sample(&open), int(unsafe.Offsetof(open.Path))+len(path)+1))
	if err != nil || ev.Path != path || ev.Ret != 4 {
		t.Fatalf("cut open decoded %+v, %v", ev, err)
	}
	// A record cut before the path's end (never sent, but not trusted
	// either) gives the path as far as it goes.
	ev, err = d.decode(cut(sample(&open), int(unsafe.Offsetof(open.Path))+5))
	if err != nil || ev.Path != "/dev/" {
		t.Fatalf("open cut inside the path decoded %+v, %v", ev, err)
	}

	ioctl := ioctlSample()
	ev, err = d.decode(cut(ioctl, int(unsafe.Offsetof(open.Path))))
	if err != nil || len(ev.Arg) != 16 || ev.Arg[15] != 15 || ev.Path != "" {
		t.Fatalf("cut ioctl decoded %+v, %v", ev, err)
	}

	exit := bpfEvent{Tgid: 7, Tid: 7, Syscall: uint16(bpfSyscallIdSC_EXIT), Kind: uint8(bpfEventKindKIND_EXIT), ExitCode: 2 << 8}
	ev, err = d.decode(cut(sample(&exit), eventHeaderSize))
	if err != nil || ev.ExitCode != 2 || ev.Kind != tracer.KindExit {
		t.Fatalf("header-only exit decoded %+v, %v", ev, err)
	}
	if _, err := d.decode(cut(sample(&exit), eventHeaderSize-1)); err == nil {
		t.Error("record shorter than the header accepted")
	}
	if _, err := d.decode(append(sample(&exit), 0)); err == nil {
		t.Error("record longer than an event accepted")
	}
}

// A failing entry point's copy of its process's environment (KIND_ENV) is
// the header and then the block, longer than any other record: decoded
// with the length the kernel side wrote, cut as it says, and no sequence
// number taken; a length past the record is refused.
func TestDecodeEnvRecord(t *testing.T) {
	d := newDecoder(0)
	const block = "HOME=/root\x00CUDA_VISIBLE_DEVICES=-1\x00"
	h := bpfEvent{Tgid: 11, Tid: 12, Ktime: 5, Ret: int64(len(block)), Mode: 1, Syscall: uint16(bpfSyscallIdSC_API), Kind: uint8(bpfEventKindKIND_ENV)}
	raw := make([]byte, eventHeaderSize+64<<10)
	copy(raw, unsafe.Slice((*byte)(unsafe.Pointer(&h)), eventHeaderSize))
	copy(raw[eventHeaderSize:], block)
	ev, err := d.decode(raw)
	if err != nil || ev.Kind != tracer.KindEnv || ev.PID != 11 || ev.TID != 12 || string(ev.Env) != block || ev.Flags != tracer.EnvCut || ev.Seq != 0 {
		t.Fatalf("env record decoded %+v, %v", ev, err)
	}
	h.Ret = int64(len(raw))
	copy(raw, unsafe.Slice((*byte)(unsafe.Pointer(&h)), eventHeaderSize))
	if _, err := d.decode(raw); err == nil {
		t.Error("env record whose length runs past it accepted")
	}
	if d.seq != 0 {
		t.Errorf("env records took sequence numbers: %d", d.seq)
	}
}

func TestDecodeRejectsBadSamples(t *testing.T) {
	d := newDecoder(0)
	if _, err := d.decode(make([]byte, 10)); err == nil {
		t.Error("short sample accepted")
	}
	bad := bpfEvent{Kind: 200, Syscall: 1}
	if _, err := d.decode(sample(&bad)); err == nil {
		t.Error("unknown kind accepted")
	}
	bad = bpfEvent{Kind: uint8(bpfEventKindKIND_OPEN), Syscall: 999}
	if _, err := d.decode(sample(&bad)); err == nil {
		t.Error("unknown syscall accepted")
	}
	if d.seq != 0 {
		t.Errorf("rejected samples consumed sequence numbers: %d", d.seq)
	}
}

// Every syscall and kind the C side can send has a name.
func TestTablesCoverEnums(t *testing.T) {
	for id := bpfSyscallIdSC_OPENAT; id < bpfSyscallIdSC_LIMIT_END; id++ {
		if id != bpfSyscallIdSC_API && syscallNames[id] == "" {
			t.Errorf("syscall id %d has no name", id)
		}
		if _, ok := limitSyscallNumbers[id]; ok != (id >= bpfSyscallIdSC_MMAP) {
			t.Errorf("syscall %s: exit-only %v, want %v", syscallNames[id], ok, id >= bpfSyscallIdSC_MMAP)
		}
	}
	for k := bpfEventKindKIND_OPEN; k <= bpfEventKindKIND_LIMIT; k++ {
		if kinds[k] == "" {
			t.Errorf("kind %d has no tracer.Kind", k)
		}
	}
	table, err := syscallTable()
	if err != nil {
		t.Fatal(err)
	}
	// Every traced syscall this arch has gets its own slot.
	seen := map[uint8]bool{}
	for _, id := range table {
		if id != 0 {
			seen[id] = true
		}
	}
	for id, nr := range syscallNumbers {
		if want := nr >= 0 && id != int(bpfSyscallIdSC_NONE); seen[uint8(id)] != want {
			t.Errorf("syscall %s (number %d) in the table: %v, want %v", syscallNames[id], nr, seen[uint8(id)], want)
		}
	}
	for id, nr := range limitSyscallNumbers {
		if nr >= 0 && table[nr] != uint8(id) {
			t.Errorf("exit-only syscall %s (number %d) maps to %d", syscallNames[id], nr, table[nr])
		}
	}
	if table[unix.SYS_OPENAT] != uint8(bpfSyscallIdSC_OPENAT) || table[unix.SYS_IOCTL] != uint8(bpfSyscallIdSC_IOCTL) {
		t.Errorf("openat/ioctl map to %d/%d", table[unix.SYS_OPENAT], table[unix.SYS_IOCTL])
	}
}

func BenchmarkDecode(b *testing.B) {
	raw := ioctlSample()
	d := newDecoder(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := d.decode(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// A rejected program is reported as unavailable; --debug gets the whole
// verifier log, otherwise one line.
func TestLoadErrorVerifierLog(t *testing.T) {
	privtest.RequireRoot(t)
	_, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.SocketFilter,
		Instructions: asm.Instructions{asm.Return()}, // R0 never set
		License:      "GPL",
	})
	if err == nil {
		t.Fatal("invalid program loaded")
	}
	short, full := loadError(err, false), loadError(err, true)
	if !errors.Is(short, tracer.ErrUnavailable) || !errors.Is(full, tracer.ErrUnavailable) {
		t.Fatalf("not unavailable: %v / %v", short, full)
	}
	if strings.Contains(short.Error(), "\n") || !strings.Contains(short.Error(), "--debug") {
		t.Errorf("short error %q", short)
	}
	if !strings.Contains(full.Error(), "R0 !read_ok") {
		t.Errorf("debug error lacks the verifier log: %q", full)
	}
}
