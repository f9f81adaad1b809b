package nvdev

import (
	"encoding/json"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

func TestOpenFlagsString(t *testing.T) {
	for flags, want := range map[uint64]string{
		unix.O_RDONLY:                "O_RDONLY",
		unix.O_RDWR:                  "O_RDWR",
		unix.O_RDWR | unix.O_CLOEXEC: "O_RDWR|O_CLOEXEC",
		unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_DIRECTORY: "O_RDONLY|O_NONBLOCK|O_DIRECTORY|O_CLOEXEC",
		unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC:                         "O_WRONLY|O_CREAT|O_TRUNC",
		unix.O_RDWR | unix.O_SYNC:                                           "O_RDWR|O_SYNC",
		unix.O_RDWR | unix.O_TMPFILE:                                        "O_RDWR|O_TMPFILE",
		unix.O_RDWR | 0x40000000:                                            "O_RDWR|0x40000000",
	} {
		if got := OpenFlagsString(flags); got != want {
			t.Errorf("OpenFlagsString(%#x) = %q, want %q", flags, got, want)
		}
	}
}

func TestIoctlName(t *testing.T) {
	ctl, uvm := dev(195, 255), dev(238, 0)
	for _, c := range []struct {
		req  uint32
		dev  *tracer.Dev
		want string
	}{
		{0xc020462a, ctl, "NV_ESC_RM_CONTROL"},
		{0xc030462b, ctl, "NV_ESC_RM_ALLOC"},
		{0xc0104629, nil, "NV_ESC_RM_FREE"},
		{0xc04846d2, ctl, "NV_ESC_CHECK_VERSION_STR"},
		{0xc90046c8, ctl, "NV_ESC_CARD_INFO"},
		{0x000046d6, ctl, "NV_ESC_SYS_PARAMS"}, // the driver keys on nr only
		{0x30000001, uvm, "UVM_INITIALIZE"},
		{0x30000002, nil, "UVM_DEINITIALIZE"}, // ioctl(-1, …) after a failed open
		{0x4b, uvm, "UVM_MM_INITIALIZE"},
		{0x25, uvm, "UVM_REGISTER_GPU"},
		{0xc01046ff, ctl, "_IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xff, 0x10)"},
		{0x7777, uvm, "_IOC(_IOC_NONE, 0x77, 0x77, 0)"},
		{0x30000003, nil, "_IOC(_IOC_NONE, 0, 0x3, 0x3000)"},
	} {
		if got := IoctlName(c.req, c.dev); got != c.want {
			t.Errorf("IoctlName(%#x, %v) = %q, want %q", c.req, c.dev, got, c.want)
		}
	}
}

func TestFormatCall(t *testing.T) {
	xfer := make([]byte, 16)
	xfer[0] = 0x2a
	for _, c := range []struct {
		e    tracer.Event
		want string
	}{
		{tracer.Event{Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Flags: unix.O_RDWR | unix.O_CLOEXEC}, `openat("/dev/nvidia-uvm", O_RDWR|O_CLOEXEC)`},
		{tracer.Event{Kind: tracer.KindOpen, Syscall: "open", Path: "/tmp/x", Flags: unix.O_WRONLY | unix.O_CREAT, Mode: 0o644}, `open("/tmp/x", O_WRONLY|O_CREAT, 0644)`},
		{tracer.Event{Kind: tracer.KindIoctl, Syscall: "ioctl", FD: 8, Request: 0xc020462a, Dev: dev(195, 255)}, `ioctl(8, NV_ESC_RM_CONTROL)`},
		{tracer.Event{Kind: tracer.KindIoctl, FD: 8, Request: 0xc01046d3, Dev: dev(195, 255), Arg: xfer}, `ioctl(8, NV_ESC_IOCTL_XFER_CMD(NV_ESC_RM_CONTROL))`},
		{tracer.Event{Kind: tracer.KindIoctl, FD: -1, Request: 0x30000002}, `ioctl(-1, UVM_DEINITIALIZE)`},
		{tracer.Event{Kind: tracer.KindStat, Syscall: "newfstatat", Path: "/dev/nvidiactl"}, `newfstatat("/dev/nvidiactl")`},
		{tracer.Event{Kind: tracer.KindAccess, Syscall: "access", Path: "/sys/module/nvidia/initstate", Flags: unix.R_OK}, `access("/sys/module/nvidia/initstate", R_OK)`},
		{tracer.Event{Kind: tracer.KindMknod, Syscall: "mknod", Path: "/dev/nvidiactl", Mode: unix.S_IFCHR | 0o666, Dev: dev(195, 255)}, `mknod("/dev/nvidiactl", S_IFCHR|0666, makedev(195, 255))`},
		{tracer.Event{Kind: tracer.KindUnlink, Syscall: "unlink", Path: "/dev/char/195:255"}, `unlink("/dev/char/195:255")`},
		{tracer.Event{Kind: tracer.KindSymlink, Syscall: "symlink", Path: "/dev/char/195:255", Target: "../nvidiactl"}, `symlink("../nvidiactl", "/dev/char/195:255")`},
		{tracer.Event{Kind: tracer.KindMkdir, Syscall: "mkdir", Path: "/dev/nvidia-caps", Mode: 0o755}, `mkdir("/dev/nvidia-caps", 0755)`},
		{tracer.Event{Kind: tracer.KindMemfd, Path: "cuda", Flags: 1}, `memfd_create("cuda", 0x1)`},
		{tracer.Event{Kind: tracer.KindExec, Path: "/usr/bin/nvidia-modprobe", Argv: []string{"nvidia-modprobe", "-u", "-c=0"}}, `execve("/usr/bin/nvidia-modprobe", ["nvidia-modprobe", "-u", "-c=0"])`},
		{tracer.Event{Kind: tracer.KindExit, ExitCode: 1}, `exit(1)`},
		{tracer.Event{Kind: tracer.KindExit, Signal: 9}, `killed by SIGKILL`},
	} {
		if got := FormatCall(&c.e); got != c.want {
			t.Errorf("FormatCall = %q, want %q", got, c.want)
		}
	}
	if FormatCall(nil) != "" {
		t.Error("nil event")
	}
}

func TestStatusAndCUResultNames(t *testing.T) {
	if got := StatusName(0x40); got != "NV_ERR_INVALID_STATE (0x40): Generic Error: Invalid state" {
		t.Errorf("StatusName(0x40) = %q", got)
	}
	if got := StatusName(0xdeadbeef); got != "NV_STATUS 0xdeadbeef" {
		t.Errorf("unknown status %q", got)
	}
	if got := CUResultName(999); got != "CUDA_ERROR_UNKNOWN (999)" {
		t.Errorf("CUResultName(999) = %q", got)
	}
	if got := CUResultName(34); got != "CUDA_ERROR_STUB_LIBRARY (34)" {
		t.Errorf("CUResultName(34) = %q", got)
	}
}

// TestTablesMatchJSON checks the generated tables against the ABI facts
// they were generated from, in both directions, so a hand edit or a stale
// regeneration shows up.
func TestTablesMatchJSON(t *testing.T) {
	raw, err := os.ReadFile("internal/gentables/nvidia-abi.json")
	if err != nil {
		t.Fatal(err)
	}
	var abi struct {
		RMEscapes map[string]uint32 `json:"rm_escapes"`
		Legacy    map[string]struct {
			Nr uint32 `json:"nr"`
		} `json:"rm_escapes_legacy_unverified"`
		UVM      map[string]uint32 `json:"uvm_ioctls"`
		NVStatus map[string]struct {
			Code uint32 `json:"code"`
			Text string `json:"text"`
		} `json:"nv_status"`
		CUResult map[string]json.RawMessage `json:"curesult"`
	}
	if err := json.Unmarshal(raw, &abi); err != nil {
		t.Fatal(err)
	}
	want := map[uint32]string{}
	for n, v := range abi.RMEscapes {
		want[v] = n
	}
	for n, v := range abi.Legacy {
		want[v.Nr] = n
	}
	checkTable(t, "rm escapes", rmEscapeNames, want)
	want = map[uint32]string{}
	for n, v := range abi.UVM {
		want[v] = n
	}
	checkTable(t, "uvm ioctls", uvmIoctlNames, want)
	if len(nvStatusNames) != len(abi.NVStatus) || len(abi.NVStatus) < 150 {
		t.Errorf("nv_status: %d in table, %d in json", len(nvStatusNames), len(abi.NVStatus))
	}
	for n, s := range abi.NVStatus {
		if got := nvStatusNames[s.Code]; got != [2]string{n, s.Text} {
			t.Errorf("nv_status %#x: table %v, json %s %q", s.Code, got, n, s.Text)
		}
	}
	cu := 0
	for n, v := range abi.CUResult {
		var code int
		if json.Unmarshal(v, &code) != nil {
			continue
		}
		cu++
		if cuResultNames[code] != n {
			t.Errorf("curesult %d: table %q, json %q", code, cuResultNames[code], n)
		}
	}
	if cu != len(cuResultNames) || cu < 100 {
		t.Errorf("curesult: %d in table, %d in json", len(cuResultNames), cu)
	}
}

func checkTable(t *testing.T, what string, got, want map[uint32]string) {
	t.Helper()
	if len(want) < 30 {
		t.Fatalf("%s: json has only %d entries", what, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s %#x: table %q, json %q", what, k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d in table, %d in json", what, len(got), len(want))
	}
}

func dev(maj, min uint32) *tracer.Dev { return &tracer.Dev{Major: maj, Minor: min} }
