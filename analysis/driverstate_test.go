package analysis

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// The open module's version line as the H200 prints it.
const openDriverLine = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)"

func dur(d time.Duration) *time.Duration { return &d }

// healthyOpens: the device opens of a start that got as far as cuInit's return.
func healthyOpens(b *evb) *evb {
	b.add(ev("open", "/dev/nvidiactl", 3, 100*time.Millisecond))
	b.add(ev("open", "/dev/nvidia0", 4, 200*time.Millisecond))
	return b
}

func ev(kind, path string, ret int64, t time.Duration) (e tracer.Event) {
	e.Kind, e.Path, e.Ret, e.Time, e.Flags = tracer.Kind(kind), path, ret, t, unix.O_RDWR
	return e
}

func driverSnap() *snapshot.Snapshot {
	s := h200()
	s.Host.DriverLine = openDriverLine
	s.Driver.UVMParams = map[string]string{"uvm_disable_hmm": "N"}
	s.DriverState = &snapshot.DriverState{
		ModuleVersion: "580.159.04",
		// The H200 keeps its firmware with the driver: none in /lib/firmware.
		Firmware:     snapshot.Firmware{Version: "580.159.04", Searched: []string{"/lib/firmware/nvidia/580.159.04"}},
		KernelConfig: map[string]string{"CONFIG_HMM_MIRROR": "n", "CONFIG_DEVICE_PRIVATE": "y"},
		SMI:          []snapshot.SMIGPU{{Bus: "00000000:00:06.0", Persistence: "Disabled", ComputeMode: "Default"}},
	}
	return s
}

func noFinding(t *testing.T, a Result, idList ...string) {
	t.Helper()
	for _, id := range idList {
		if has(a, id) {
			t.Errorf("unexpected %s: %+v", id, find(t, a, id))
		}
	}
}

var driverStateIDs = []string{"gsp-firmware-missing", "uvm-hmm", "compute-mode", "fabric-manager", "version-mismatch", "excluded-gpu", "kernel-messages"}

// The H200's own state (firmware outside /lib/firmware, HMM kernel config
// off, Default compute mode) with a working cuInit: nothing to say.
func TestDriverStateHealthyH200(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuInit", 0)
	a := AnalyzeFacts(b.evs, driverSnap(), traced)
	noFinding(t, a, driverStateIDs...)
}

// cuInit 3 on an open module with no GSP firmware for its version, and the
// kernel log saying the GPU failed to initialise at boot: the firmware is
// the explanation, not "no failing call explains it".
func TestGSPFirmwareMissingExplainsCuInit3(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuInit", 3)
	s := driverSnap()
	s.KernelLog = []snapshot.KernelLine{
		// Quoted from https://github.com/NVIDIA/open-gpu-kernel-modules/issues/789
		{Seq: 7, Text: "NVRM: RmInitAdapter: Cannot initialize GSP firmware RM", T: dur(-903 * time.Second), Older: true},
		{Seq: 8, Text: "NVRM: GPU 0000:98:00.0: RmInitAdapter failed! (0x62:0x65:1792)", T: dur(-903 * time.Second), Older: true},
	}
	a := AnalyzeFacts(b.evs, s, traced)
	f := find(t, a, "gsp-firmware-missing")
	if f.Severity != SeverityError {
		t.Errorf("severity %s", f.Severity)
	}
	mustContain(t, "detail", detail(f), "/lib/firmware/nvidia/580.159.04", "RmInitAdapter failed! (0x62:0x65:1792)")
	mustContain(t, "fix", f.Fix, nvdev.GSPFirmwareFix("580.159.04"))
	noFinding(t, a, "cuda-failed-unexplained")
	km := find(t, a, "kernel-messages")
	mustContain(t, "kernel messages", detail(km), "before the trace, at -903.000s", "GSP firmware could not be loaded or started", "RmInitAdapter failed: the driver could not initialise the GPU")

	// With the firmware present, the same log is not blamed on it.
	s.DriverState.Firmware.Files = []string{"/lib/firmware/nvidia/580.159.04/gsp_ga10x.bin"}
	a = AnalyzeFacts(b.evs, s, traced)
	noFinding(t, a, "gsp-firmware-missing")
}

// cuInit 3 with HMM on, on a kernel with HMM, open module: the HMM bug of
// https://github.com/NVIDIA/open-gpu-kernel-modules/issues/947 (nvidia-smi
// works, dmesg is silent). uvm_disable_hmm=Y rules it out.
func TestHMMExplainsCuInit3(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuInit", 3)
	s := driverSnap()
	s.DriverState.KernelConfig["CONFIG_HMM_MIRROR"] = "y"
	a := AnalyzeFacts(b.evs, s, traced)
	f := find(t, a, "uvm-hmm")
	if f.Severity != SeverityError || !f.Inferred {
		t.Errorf("finding %+v", f)
	}
	mustContain(t, "detail", detail(f), "uvm_disable_hmm=N", "#947")
	noFinding(t, a, "cuda-failed-unexplained", "gsp-firmware-missing")

	s.Driver.UVMParams["uvm_disable_hmm"] = "Y"
	a = AnalyzeFacts(b.evs, s, traced)
	noFinding(t, a, "uvm-hmm")
	find(t, a, "cuda-failed-unexplained")
}

func TestComputeModeExplains46(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuCtxCreate_v2", 46)
	s := driverSnap()
	s.DriverState.SMI[0].ComputeMode = "Exclusive_Process"
	a := AnalyzeFacts(b.evs, s, traced)
	f := find(t, a, "compute-mode")
	mustContain(t, "detail", detail(f), "00000000:00:06.0 compute mode: Exclusive_Process")
	noFinding(t, a, "cuda-failed-unexplained")

	s.DriverState.SMI[0].ComputeMode = "Default"
	a = AnalyzeFacts(b.evs, s, traced)
	noFinding(t, a, "compute-mode")
}

func TestFabricManagerExplains802(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuInit", 802)
	s := driverSnap()
	s.DriverState.NVSwitches = []string{"0000:05:00.0", "0000:06:00.0"}
	a := AnalyzeFacts(b.evs, s, traced)
	f := find(t, a, "fabric-manager")
	mustContain(t, "fix", f.Fix, "nvidia-fabricmanager", "580.159.04")
	noFinding(t, a, "cuda-failed-unexplained")

	s.DriverState.Daemons = []string{"nv-fabricmanager"}
	a = AnalyzeFacts(b.evs, s, traced)
	noFinding(t, a, "fabric-manager")
}

// The libcuda the target opened is not the kernel module's version: 803.
func TestOpenedLibraryVersionMismatch(t *testing.T) {
	b := newEvents(845, "python3")
	b.add(ev("open", "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06", 3, 10*time.Millisecond))
	healthyOpens(b)
	b.api("cuInit", 803)
	a := AnalyzeFacts(b.evs, driverSnap(), traced)
	f := find(t, a, "version-mismatch")
	mustContain(t, "detail", detail(f), "libcuda.so.580.65.06", "Kernel module: 580.159.04")
	noFinding(t, a, "cuda-failed-unexplained")

	// The same library with a working cuInit (forward compatibility) is fine.
	b.evs[len(b.evs)-1].Ret = 0
	noFinding(t, AnalyzeFacts(b.evs, driverSnap(), traced), "version-mismatch")
}

func TestExcludedGPU(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuInit", 100)
	s := driverSnap()
	s.Driver.Params["ExcludedGpus"] = `"0000:00:06.0"`
	a := AnalyzeFacts(b.evs, s, traced)
	if f := find(t, a, "excluded-gpu"); f.Severity != SeverityError {
		t.Errorf("excluded-gpu with cuInit 100: %+v", f)
	}
	noFinding(t, a, "cuda-failed-unexplained")
}

// A kernel line in the trace window is tied to the call nearest in time.
func TestKernelMessageNearestCall(t *testing.T) {
	b := healthyOpens(newEvents(845, "python3"))
	b.api("cuInit", 999)
	s := driverSnap()
	// The driver's format (nv.c: "NVRM: Xid (PCI:%s): %d, ..."), as in the
	// Xid 79 line of the catalog's "GPU has fallen off the bus".
	s.KernelLog = []snapshot.KernelLine{{Seq: 9, Text: "NVRM: Xid (PCI:0000:00:06): 79, pid=845, GPU has fallen off the bus.", T: dur(190 * time.Millisecond)}}
	a := AnalyzeFacts(b.evs, s, traced)
	km := find(t, a, "kernel-messages")
	mustContain(t, "detail", detail(km), "+0.190s: NVRM: Xid", "Xid 79: GPU has fallen off the bus", "nearest call: `openat(\"/dev/nvidia0\"", "at +0.200s")
}

// Known kernel lines, quoted from public bug reports, get their names.
func TestKernelLineMeaning(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		// https://github.com/NVIDIA/open-gpu-kernel-modules/issues/116
		{"NVRM RmInitAdapter: Cannot initialize GSP firmware RM", "GSP firmware could not be loaded or started"},
		{"NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x63:0x56:1689)", "RmInitAdapter failed"},
		// https://github.com/NVIDIA/open-gpu-kernel-modules/issues/943 (its title)
		{"loading /lib/firmware/nvidia/570.133.20/gsp_ga10x.bin failed with error -4", "GSP firmware could not be loaded or started"},
		// https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1230
		{"NVRM: GPU6 _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP", ""},
		{"NVRM: API mismatch: the client has the version 580.65.06, but\nNVRM: this kernel module has the version 580.159.04.", "the user-space driver is 580.65.06, the kernel module 580.159.04"},
		{"NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python3, Timeout after 6s of waiting for RPC response from GPU0 GSP!", "Xid 119: GSP RPC timeout"},
		{"NVRM: Xid (PCI:0000:3b:00): 999, pid=1", "Xid 999 (see NVIDIA's Xid catalog)"},
		{"nvidia-uvm: Loaded the UVM driver, major device number 238.", ""},
	} {
		got := nvdev.KernelLineMeaning(c.line)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("KernelLineMeaning(%q) = %q, want %q", c.line, got, c.want)
		}
	}
}
