package doctor

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
)

// checkDriver: modules, versions, firmware, HMM, persistence and compute
// mode, NVSwitch and fabric manager, excluded GPUs, kernel log.
func checkDriver(h *host) []Check {
	d := h.b.Driver
	mods := map[string]bool{}
	for _, m := range d.Modules {
		mods[m] = true
	}
	var out []Check
	add := func(c Check) { c.Category = CatDriver; out = append(out, c) }

	mc := Check{ID: "driver-modules", Subject: "nvidia, nvidia_uvm", Status: Pass}
	_, uvmReg := h.uvmMajor()
	switch {
	case !mods["nvidia"] && !d.Loaded:
		mc.Status, mc.Summary = Fail, "the nvidia kernel module is not loaded"
		mc.Fix = "Load it (`modprobe nvidia`); if that fails, `dmesg | grep -i nvidia` says why (unsigned module under Secure Boot, unsupported GPU for the open module)."
		add(mc)
		add(checkKernelLog(h)) // it may say why the module did not load
		return out             // nothing else about the driver can be judged
	case !mods["nvidia_uvm"] && !uvmReg:
		mc.Status, mc.Summary = Warn, "nvidia_uvm is not loaded: CUDA loads it through setuid nvidia-modprobe, which fails in containers and without that helper (cuInit 999)"
		mc.Fix = "Load it at boot: `modprobe nvidia_uvm` (and `nvidia_uvm` in /etc/modules-load.d/nvidia.conf), or `nvidia-modprobe -u -c=0`."
	default:
		mc.Summary = "loaded: " + strings.Join(d.Modules, ", ")
		if len(d.Modules) == 0 {
			mc.Summary = "loaded (the driver's /proc entries exist; /proc/modules lists none, as in a container)"
		}
	}
	add(mc)
	add(checkVersions(h))
	add(checkFirmware(h))
	add(checkHMM(h))
	out = append(out, checkSMI(h)...)
	add(checkFabric(h))
	add(checkExcluded(h))
	add(checkKernelLog(h))
	return out
}

// checkVersions: the kernel module's version against the user-space
// libraries the loader would pick (a mismatch is CUDA 803 and NVML's
// "Driver/library version mismatch").
func checkVersions(h *host) Check {
	c := Check{ID: "driver-version", Subject: "kernel module vs libraries", Status: Pass}
	kv := h.b.Host.DriverVersion
	if kv == "" {
		kv = h.sv.ModuleVersion
	}
	if kv == "" {
		c.Status, c.Summary = Skip, "the kernel module's version is unreadable (/proc/driver/nvidia/version, /sys/module/nvidia/version)"
		return c
	}
	var ok, bad []string
	for _, l := range h.sv.Libraries {
		switch {
		case l.Path == "":
			continue // the environment check says it is missing
		case nvdev.LibcudaKind(l.Path) == "compat" && olderThan(l.Version, kv):
			// A compat copy runs a newer libcuda on an older module; one
			// older than the module is refused (the H200's CUDA 13.0
			// compat 580.95.05 on 580.159.04: cuInit 803).
			bad = append(bad, fmt.Sprintf("%s is a forward-compatibility copy %s (%s, from its %s), older than the kernel module %s", l.Name, l.Version, l.Resolved, versionWord(l.VersionFrom), kv))
			continue
		case l.Stub || nvdev.LibcudaKind(l.Path) != "":
			continue // stub and compat libraries have their own versions
		case l.Version == "":
			ok = append(ok, l.Name+" (version not in its file name: "+l.Resolved+")")
		case l.Version != kv:
			bad = append(bad, fmt.Sprintf("%s is %s (%s, from its %s), the kernel module is %s", l.Name, l.Version, l.Resolved, versionWord(l.VersionFrom), kv))
		default:
			ok = append(ok, l.Name+" "+l.Version)
		}
	}
	if len(bad) > 0 {
		c.Status, c.Summary = Fail, bad[0]+": CUDA fails with 803, NVML with \"Driver/library version mismatch\""
		c.Detail = bad[1:]
		c.Fix = "Reboot (or unload and reload the nvidia modules) after a driver upgrade so the module matches the libraries; in a container, use the host's libraries (the NVIDIA Container Toolkit or CDI mounts them) rather than ones baked into the image."
		return c
	}
	c.Summary = "module " + kv
	if len(ok) > 0 {
		c.Summary += "; " + strings.Join(ok, ", ")
	}
	return c
}

// olderThan reports whether driver version a is older than b (false when
// either is unreadable).
func olderThan(a, b string) bool {
	va, ok1 := nvdev.ParseDriverVersion(a)
	vb, ok2 := nvdev.ParseDriverVersion(b)
	return ok1 && ok2 && va.Less(vb)
}

// versionWord says where a library's version was read.
func versionWord(from string) string {
	if from == "contents" {
		return "contents"
	}
	return "name"
}

// checkFirmware: GSP firmware files for the running version (open module).
func checkFirmware(h *host) Check {
	c := Check{ID: "gsp-firmware", Subject: "GSP firmware", Status: Pass}
	fw := h.sv.Firmware
	open := h.b.Host.OpenModule()
	if fw.Version == "" {
		c.Status, c.Summary = Skip, "driver version unknown"
		return c
	}
	if len(fw.Files) > 0 {
		c.Summary = fmt.Sprintf("%s for %s", plural(len(fw.Files), "file", "files"), fw.Version)
		return c
	}
	var failed []string
	for _, l := range h.b.KernelLog {
		if nvdev.IsRMInitLine(l.Text) {
			failed = append(failed, "Kernel log: "+l.Text)
		}
	}
	if len(failed) > 0 {
		c.Status = Fail
		c.Summary = fmt.Sprintf("no gsp_*.bin for %s, and the kernel log shows the GPU failing to initialise", fw.Version)
		c.Detail = append(failed, "Searched: "+strings.Join(fw.Searched, ", "))
		c.Fix = nvdev.GSPFirmwareFix(fw.Version)
		return c
	}
	if !open {
		c.Summary = "no gsp_*.bin for " + fw.Version + "; the proprietary module runs without GSP firmware where it must"
		return c
	}
	c.Status = Skip
	c.Summary = fmt.Sprintf("no gsp_*.bin for %s in the firmware search path; the GPUs initialised without error, so the driver loads it from elsewhere (initramfs, built in)", fw.Version)
	c.Detail = []string{"Searched: " + strings.Join(fw.Searched, ", ")}
	return c
}

// checkHMM: uvm_disable_hmm against a kernel with HMM. On open modules with
// HMM, some driver and kernel pairs fail UVM init (cuInit 3 while
// nvidia-smi works: open-gpu-kernel-modules #947).
func checkHMM(h *host) Check {
	c := Check{ID: "uvm-hmm", Subject: "nvidia_uvm uvm_disable_hmm", Status: Pass}
	v, set := h.b.Driver.UVMParams["uvm_disable_hmm"]
	if !set {
		c.Status, c.Summary = Skip, "nvidia_uvm is not loaded or has no uvm_disable_hmm parameter (older driver)"
		return c
	}
	disabled := v == "Y" || v == "1"
	kc := h.sv.KernelConfig
	hmmKernel := nvdev.HMMKernel(kc)
	switch {
	case disabled:
		c.Summary = "HMM disabled (uvm_disable_hmm=" + v + ")"
	case kc == nil:
		c.Summary = "HMM enabled (uvm_disable_hmm=" + v + "); kernel config unreadable"
		c.Detail = []string{"If cuInit returns 3 while nvidia-smi works: " + nvdev.HMMFix}
	case !hmmKernel:
		c.Summary = "the kernel has no HMM (CONFIG_HMM_MIRROR/CONFIG_DEVICE_PRIVATE), so uvm_disable_hmm=" + v + " changes nothing"
	default:
		c.Summary = "HMM enabled on a kernel with HMM (uvm_disable_hmm=" + v + ")"
		c.Detail = []string{"If cuInit returns 3 while nvidia-smi works: " + nvdev.HMMFix}
	}
	return c
}

// checkSMI: persistence and compute mode per GPU, from nvidia-smi.
func checkSMI(h *host) []Check {
	if h.sv.SMIError != "" || len(h.sv.SMI) == 0 {
		why := h.sv.SMIError
		if why == "" {
			why = "nvidia-smi was not asked"
		}
		return []Check{{ID: "compute-mode", Category: CatDriver, Status: Skip, Subject: "persistence and compute mode", Summary: "only NVML knows them: " + why}}
	}
	pc := Check{ID: "persistence-mode", Category: CatDriver, Status: Pass, Subject: "persistence mode"}
	cm := Check{ID: "compute-mode", Category: CatDriver, Status: Pass, Subject: "compute mode"}
	var off, bad []string
	for _, g := range h.sv.SMI {
		if !strings.EqualFold(g.Persistence, "Enabled") {
			off = append(off, g.Bus)
		}
		switch g.ComputeMode {
		case "Prohibited":
			cm.Status = Fail
			bad = append(bad, g.Bus+" is Prohibited: no process can create a CUDA context on it (cudaErrorDevicesUnavailable, 46)")
		case "Exclusive_Process":
			cm.Status = worst(cm.Status, Warn)
			bad = append(bad, g.Bus+" is Exclusive_Process: a second CUDA process on it fails with 46 (all CUDA-capable devices are busy or unavailable)")
		}
	}
	if len(off) == 0 {
		pc.Summary = "enabled on every GPU"
	} else {
		pc.Summary = fmt.Sprintf("off on %d of %d GPUs: each first open initialises the GPU (slower start; init errors surface as open errors)", len(off), len(h.sv.SMI))
		pc.Detail = []string{"Off: " + strings.Join(off, ", ") + ". `nvidia-persistenced` (or `nvidia-smi -pm 1`) keeps the GPUs initialised."}
	}
	if len(bad) > 0 {
		cm.Summary = bad[0]
		cm.Detail = bad[1:]
		cm.Fix = nvdev.ComputeModeFix
	} else {
		cm.Summary = "Default on every GPU"
	}
	return []Check{pc, cm}
}

// checkFabric: an NVSwitch system needs nv-fabricmanager running, else
// CUDA fails with 802 (system not yet initialized).
func checkFabric(h *host) Check {
	c := Check{ID: "fabric-manager", Subject: "NVSwitch", Status: Pass}
	switch {
	case len(h.sv.NVSwitches) == 0:
		c.Summary = "no NVSwitch: fabric manager not needed"
	case slices.Contains(h.sv.Daemons, "nv-fabricmanager"):
		c.Summary = fmt.Sprintf("%s, nv-fabricmanager running", plural(len(h.sv.NVSwitches), "NVSwitch", "NVSwitches"))
	case h.b.Container.Runtime != "":
		c.Status = Skip
		c.Summary = fmt.Sprintf("%s; fabric manager runs on the host, which a container cannot see", plural(len(h.sv.NVSwitches), "NVSwitch", "NVSwitches"))
	default:
		c.Status = Fail
		c.Summary = fmt.Sprintf("%s but nv-fabricmanager is not running: CUDA fails with 802 (system not yet initialized)", plural(len(h.sv.NVSwitches), "NVSwitch", "NVSwitches"))
		c.Fix = nvdev.FabricManagerFix(h.b.Host.DriverVersion)
	}
	return c
}

// checkExcluded: GPUs the driver was told to leave alone.
func checkExcluded(h *host) Check {
	c := Check{ID: "excluded-gpu", Subject: "NVreg_ExcludedGpus", Status: Pass}
	b := *h.b
	b.DriverState = &h.sv.DriverState
	ex := nvdev.ExcludedGPUs(&b)
	if len(ex) == 0 {
		c.Summary = fmt.Sprintf("no GPU excluded (%s)", plural(len(h.sv.GPUs), "GPU", "GPUs"))
		return c
	}
	c.Status = Warn
	c.Summary = "excluded by the driver: " + strings.Join(ex, ", ") + "; opening its node fails with EPERM, like a cgroup denial"
	c.Fix = nvdev.ExcludedGPUFix
	return c
}

var xidRE = regexp.MustCompile(`Xid \(PCI:([^)]*)\): (\d+)`)

// checkKernelLog: NVRM errors and Xids since boot.
func checkKernelLog(h *host) Check {
	c := Check{ID: "kernel-log", Subject: "kernel log since boot", Status: Pass}
	for _, u := range h.b.Unavailable {
		if strings.HasPrefix(u, "kernel log:") && !strings.Contains(u, "dropped") {
			c.Status, c.Summary = Skip, strings.TrimPrefix(u, "kernel log: ")
			return c
		}
	}
	var fails, warns []string
	apiSeen := false
	xids := map[string]int{}
	for _, l := range h.b.KernelLog {
		t := l.Text
		switch {
		case nvdev.IsAPIMismatchLine(t):
			// A client refused since boot, with its own version: the
			// library check says whether today's libraries match the module.
			if !apiSeen {
				apiSeen = true
				warns = append(warns, t+" (a client of another driver version was refused; the library-version check tells whether today's libraries match)")
			}
		case nvdev.IsGPULostLine(t), nvdev.IsRMInitLine(t):
			fails = append(fails, t)
		case xidRE.MatchString(t):
			m := xidRE.FindStringSubmatch(t)
			xids[m[2]]++
			if xids[m[2]] == 1 {
				if s := nvdev.KernelLineMeaning(t); s != "" {
					t += " (" + s + ")"
				}
				warns = append(warns, t)
			}
		}
	}
	switch {
	case len(fails) > 0:
		c.Status = Fail
		c.Summary = fails[0]
		c.Detail = append(fails[1:], warns...)
		c.Fix = "API mismatch: reboot or reload the driver so the module and libraries match. RmInitAdapter/GSP: check the firmware and reset the GPU (`nvidia-smi -r`) or power-cycle. Fallen off the bus (Xid 79): hardware, power or thermals; reseat and reboot."
	case len(warns) > 0:
		c.Status = Warn
		c.Summary = fmt.Sprintf("%s since boot: %s", plural(len(warns), "driver warning", "driver warnings"), warns[0])
		c.Detail = warns[1:]
		c.Fix = "Look each Xid up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors); most need a GPU reset or the application fixed. An API mismatch of a past client needs nothing if the library-version check passes."
	default:
		c.Summary = fmt.Sprintf("no NVRM errors or Xids (%s from the driver)", plural(len(h.b.KernelLog), "line", "lines"))
	}
	return c
}
