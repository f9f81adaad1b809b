package nvdev

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/snapshot"
)

// xidMeanings are the common Xid codes, in the words of NVIDIA's Xid
// catalog (docs.nvidia.com/deploy/xid-errors, "Xid Errors").
var xidMeanings = map[int]string{
	13:  "graphics engine exception (usually the application's fault)",
	31:  "GPU memory page fault (an illegal address, usually the application's)",
	43:  "GPU stopped processing (the application hit a fault and its channel was reset)",
	45:  "preemptive cleanup after earlier errors",
	48:  "double-bit ECC error (uncorrectable memory error)",
	61:  "internal micro-controller breakpoint/warning (PMU)",
	62:  "internal micro-controller halt (PMU)",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapping failed",
	68:  "video processor (NVDEC) exception",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error (the affected application must restart)",
	95:  "uncontained ECC error (all applications on the GPU are affected; reset it)",
	119: "GSP RPC timeout (the GSP firmware stopped answering)",
	120: "GSP error (the GSP firmware reported a fault)",
}

var xidCodeRE = regexp.MustCompile(`Xid \([^)]*\): (\d+)`)

// XidMeaning names an Xid code, "" when it is not among the common ones.
func XidMeaning(code int) string { return xidMeanings[code] }

var apiMismatchRE = regexp.MustCompile(`API mismatch: the client has the version ([^,\s]+), but\s+(?:NVRM:\s*)?this kernel module has the version ([^.\s]+(?:\.[0-9]+)*)`)

// KernelLineMeaning names a known NVRM/Xid/nvidia-uvm kernel message, ""
// for the rest (the driver's ordinary notices).
func KernelLineMeaning(t string) string {
	if m := apiMismatchRE.FindStringSubmatch(t); m != nil {
		return "API mismatch: the user-space driver is " + m[1] + ", the kernel module " + m[2] + " (CUDA 803)"
	}
	if m := xidCodeRE.FindStringSubmatch(t); m != nil {
		code, _ := strconv.Atoi(m[1])
		if s := XidMeaning(code); s != "" {
			return "Xid " + m[1] + ": " + s
		}
		return "Xid " + m[1] + " (see NVIDIA's Xid catalog)"
	}
	switch {
	case strings.Contains(t, "fallen off the bus"):
		return "the GPU has fallen off the bus (lost until reset)"
	case IsAPIMismatchLine(t):
		return "API mismatch: the user-space driver and the kernel module differ (CUDA 803)"
	case strings.Contains(t, "GSP") && (strings.Contains(t, "firmware") || strings.Contains(t, "Firmware")) && IsRMInitLine(t),
		strings.Contains(t, "gsp_") && strings.Contains(t, "firmware") && strings.Contains(t, "fail"):
		return "GSP firmware could not be loaded or started"
	case IsRMInitLine(t):
		return "RmInitAdapter failed: the driver could not initialise the GPU"
	}
	return ""
}

// HMMKernel is whether a kernel config (DriverState.KernelConfig) has HMM.
func HMMKernel(kc map[string]string) bool {
	return kc["CONFIG_HMM_MIRROR"] == "y" && kc["CONFIG_DEVICE_PRIVATE"] == "y"
}

// PinnedMemoryUncharged is why RLIMIT_MEMLOCK never explains a CUDA
// failure: measured on the H200 (driver 580, as nobody, `ulimit -l 0`),
// cuInit, cuMemHostAlloc, cuMemAllocHost and cuMemHostRegister of up to
// 64 MiB, and PyTorch's pin_memory, all succeed. (RDMA's memory
// registration, InfiniBand verbs under NCCL, is charged to it.)
const PinnedMemoryUncharged = "the NVIDIA driver pins CUDA's host memory itself, uncharged to it (cuMemHostAlloc and cuMemHostRegister succeed at `ulimit -l 0`); it limits RDMA registration (InfiniBand under NCCL), not CUDA"

// Fixes for the driver-state causes, shared with doctor.
const (
	HMMFix         = "Set `options nvidia_uvm uvm_disable_hmm=1` (in /etc/modprobe.d/nvidia-uvm.conf) and reload nvidia_uvm (`rmmod nvidia_uvm && modprobe nvidia_uvm`) (open-gpu-kernel-modules #947)."
	ComputeModeFix = "Set the default mode: `nvidia-smi -i BUS -c DEFAULT`, or schedule one process per GPU."
	ExcludedGPUFix = "If that GPU should be used, remove it from NVreg_ExcludedGpus (modprobe.d options for nvidia) and reload the driver."
)

// GSPFirmwareFix is how to install the GSP firmware of driver version v.
func GSPFirmwareFix(v string) string {
	if v == "" {
		v = "<version>"
	}
	return "Install the firmware of driver " + v + " (it ships with the driver package, in /lib/firmware/nvidia/" + v + "/), then reload the driver."
}

// FabricManagerFix is how to start the fabric manager for driver version v.
func FabricManagerFix(v string) string {
	if v == "" {
		v = "-"
	}
	return "Install nvidia-fabricmanager of the same version as the driver (" + v + ") and start it: `systemctl enable --now nvidia-fabricmanager`."
}

// IsGPULostLine classifies a kernel log line: the GPU fell off the bus
// (Xid 79).
func IsGPULostLine(t string) bool {
	return strings.Contains(t, "fallen off the bus") || (strings.Contains(t, "Xid") && strings.Contains(t, ": 79,"))
}

// IsRMInitLine classifies a kernel log line: RmInitAdapter or GSP firmware
// failed.
func IsRMInitLine(t string) bool {
	return strings.Contains(t, "RmInitAdapter") || strings.Contains(t, "rm_init_adapter") ||
		(strings.Contains(t, "GSP") && (strings.Contains(t, "fail") || strings.Contains(t, "Cannot")))
}

// ExcludedGPUs lists what /proc/driver/nvidia/params' ExcludedGpus and the
// GPUs' information files exclude.
func ExcludedGPUs(s *snapshot.Snapshot) []string {
	var ex []string
	if v := strings.Trim(strings.TrimSpace(s.Driver.Params["ExcludedGpus"]), `"`); v != "" {
		ex = append(ex, v)
	}
	if s.DriverState != nil {
		for _, g := range s.DriverState.GPUs {
			if g.Excluded {
				ex = append(ex, g.Bus)
			}
		}
	}
	return ex
}
