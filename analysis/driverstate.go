package analysis

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// CUDA driver API codes the driver's state explains (cuda.h).
const (
	cudaNotInitialized = 3
	cudaNoDevice       = 100
	cudaSystemNotReady = 802
	cudaDriverMismatch = 803
	// cudaCompatUnsupported: a forward-compatibility libcuda on a GPU or
	// driver branch it does not support.
	cudaCompatUnsupported = 804
	cudaDevUnavailable    = 46
	nvmlRMVersionMism     = 18 // NVML_ERROR_LIB_RM_VERSION_MISMATCH
)

// checkDriverState explains a CUDA failure that no traced call explains
// from the driver's own state (the snapshot's DriverState, the kernel log),
// and names the driver's kernel messages with the call nearest in time.
func (a *analyzer) checkDriverState() {
	a.checkKernelMessages()
	a.checkLibraryVersions()
	a.checkExcludedGPU()
	f := a.cudaFailed()
	ds := a.s.DriverState
	if f == nil || a.fail >= 0 || ds == nil || !strings.HasPrefix(f.Func, "cu") {
		return
	}
	switch f.Ret {
	case cudaNotInitialized:
		if a.byID["cuda-fork-after-init"] {
			break // a forked child: the driver is not the question
		}
		if !a.gspFirmwareMissing(f, ds) {
			a.hmmSuspect(f, ds)
		}
	case cudaDevUnavailable:
		a.computeModeExclusive(f, ds)
	case cudaSystemNotReady:
		a.fabricManagerMissing(f, ds)
	}
}

// gspFirmwareMissing: cuInit 3 with no GSP firmware files for the running
// version. The error needs the kernel log's word that the GPU failed to
// initialise: the H200 keeps its firmware with the driver, outside
// /lib/firmware, and works.
func (a *analyzer) gspFirmwareMissing(f *tracer.Event, ds *snapshot.DriverState) bool {
	fw := ds.Firmware
	if fw.Version == "" || len(fw.Files) > 0 || !a.s.Host.OpenModule() {
		return false
	}
	lines := a.kernelLines(nvdev.IsRMInitLine)
	if len(lines) == 0 {
		return false
	}
	d := []string{fmt.Sprintf("`%s()` by %s returned %d (%s).", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret)),
		fmt.Sprintf("The open kernel module %s runs the GPU through GSP firmware, and no gsp_*.bin for %s is in the firmware search path (%s).", fw.Version, fw.Version, strings.Join(fw.Searched, ", "))}
	d = append(d, lines...)
	a.add(Finding{ID: "gsp-firmware-missing", Severity: SeverityError,
		Summary: fmt.Sprintf("the GSP firmware for driver %s is missing: the GPU could not initialise", fw.Version),
		Detail:  d, Fix: nvdev.GSPFirmwareFix(fw.Version), Events: []uint64{f.Seq}}, "")
	return true
}

// hmmSuspect: cuInit 3 with HMM on (uvm_disable_hmm not set) on a kernel
// with HMM, the open module: open-gpu-kernel-modules #947.
func (a *analyzer) hmmSuspect(f *tracer.Event, ds *snapshot.DriverState) {
	v, set := a.s.Driver.UVMParams["uvm_disable_hmm"]
	if !set || v == "Y" || v == "1" || !a.s.Host.OpenModule() || !nvdev.HMMKernel(ds.KernelConfig) {
		return
	}
	for i := range a.out {
		if a.out[i].ID == "uvm-hmm" { // UVM_INITIALIZE's in-band hint: CUDA's 3 confirms it
			a.out[i].Severity = SeverityError
			return
		}
	}
	a.add(Finding{ID: "uvm-hmm", Severity: SeverityError,
		Summary: "cuInit returned 3 with HMM enabled in nvidia_uvm on a kernel with HMM",
		Detail: []string{fmt.Sprintf("`%s()` by %s returned %d (%s) although the device opens worked.", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret)),
			fmt.Sprintf("nvidia_uvm uvm_disable_hmm=%s; kernel %s has CONFIG_HMM_MIRROR=y and CONFIG_DEVICE_PRIVATE=y; the open kernel module %s.", v, a.s.Host.Kernel, orUnknown(a.s.Host.DriverVersion)),
			"Some driver and kernel pairs fail UVM initialisation with HMM on (open-gpu-kernel-modules #947)."},
		Fix: nvdev.HMMFix, Inferred: true, Events: []uint64{f.Seq}}, "")
}

func (a *analyzer) computeModeExclusive(f *tracer.Event, ds *snapshot.DriverState) {
	var d []string
	for _, g := range ds.SMI {
		if g.ComputeMode == "Exclusive_Process" || g.ComputeMode == "Prohibited" {
			d = append(d, fmt.Sprintf("GPU %s compute mode: %s (nvidia-smi).", g.Bus, g.ComputeMode))
		}
	}
	if len(d) == 0 {
		return
	}
	d = append([]string{fmt.Sprintf("`%s()` by %s returned %d (%s).", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret))}, d...)
	d = append(d, "In Exclusive_Process mode a GPU takes one CUDA context at a time: another process holds it. Prohibited allows none.")
	a.add(Finding{ID: "compute-mode", Severity: SeverityError,
		Summary: "the GPU's compute mode refuses this process's context (46: devices busy or unavailable)",
		Detail:  d, Fix: nvdev.ComputeModeFix, Events: []uint64{f.Seq}}, "")
}

func (a *analyzer) fabricManagerMissing(f *tracer.Event, ds *snapshot.DriverState) {
	if len(ds.NVSwitches) == 0 || slices.Contains(ds.Daemons, "nv-fabricmanager") {
		return
	}
	d := []string{fmt.Sprintf("`%s()` by %s returned %d (%s).", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret)),
		fmt.Sprintf("%d NVSwitch devices (/proc/driver/nvidia-nvswitch/devices) and no nv-fabricmanager process.", len(ds.NVSwitches))}
	inferred := a.inContainer()
	if inferred {
		d = append(d, "The target runs in a container, which may not see the host's fabric manager.")
	}
	a.add(Finding{ID: "fabric-manager", Severity: SeverityError,
		Summary: "an NVSwitch system without nvidia-fabricmanager: CUDA is not ready (802)",
		Detail:  d, Fix: nvdev.FabricManagerFix(a.s.Host.DriverVersion), Inferred: inferred, Events: []uint64{f.Seq}}, "")
}

// checkLibraryVersions: the libcuda/libnvidia-ml the target opened against
// the kernel module (CUDA 803, NVML 18), when CUDA did not succeed. A
// libcuda's version is read from its contents where the snapshot could;
// a compat copy newer than the module is meant to differ and counts only
// when CUDA said 803.
func (a *analyzer) checkLibraryVersions() {
	kv := a.moduleVersion()
	if kv == "" || a.cuda.Status == "ok" || a.cuda.Status == "not-called" {
		return
	}
	f := a.cudaFailed()
	if f != nil && f.Func == "cuInit" && f.Ret == cudaCompatUnsupported {
		a.compatUnsupported(f)
		return
	}
	said803 := f != nil && (f.Func == "cuInit" && f.Ret == cudaDriverMismatch || strings.HasPrefix(f.Func, "nvml") && f.Ret == nvmlRMVersionMism)
	if i := a.mismatchedLibcuda(); i >= 0 && (said803 || a.libKind(&a.ev[i]) != "compat") {
		a.versionMismatch(-1)
		return
	}
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindOpen || e.Failed() || nvdev.LibcudaKind(e.Path) != "" {
			continue
		}
		if v := libVersion(baseName(e.Path)); v != "" && v != kv {
			a.versionMismatch(-1)
			return
		}
	}
	if said803 {
		a.versionMismatch(-1)
	}
}

// compatUnsupported: cuInit 804 names the libcuda that was loaded, the
// forward-compatibility copy newer than the kernel module, and what chose
// it.
func (a *analyzer) compatUnsupported(f *tracer.Event) {
	i := a.mismatchedLibcuda()
	if i < 0 {
		i = a.libcudaOpen()
	}
	d := []string{fmt.Sprintf("`%s()` by %s returned %d (%s).", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret))}
	summary := "cuInit refused the forward-compatibility libcuda on this GPU (804)"
	fix := "Remove the CUDA compat directory from LD_LIBRARY_PATH / ld.so.conf (or use an image without cuda-compat), so the driver's own libcuda is loaded; forward compatibility needs a data-center GPU and a supported driver branch."
	events := []uint64{f.Seq}
	if i >= 0 {
		e := &a.ev[i]
		lv, from := a.libcudaVersion(e)
		src, undo := a.libcudaSource(e)
		d = append(d, fmt.Sprintf("%s loaded %s: libcuda %s (%s); the kernel module is %s.", nvdev.Caller(e), e.Path, orUnknown(lv), orUnknown(from), orUnknown(a.moduleVersion())), src)
		summary = fmt.Sprintf("the forward-compatibility libcuda %s (%s) does not support this GPU or driver branch (804)", orUnknown(lv), path.Dir(e.Path))
		if undo != "" {
			fix = "Load the driver's own libcuda: " + undo + "; forward compatibility needs a data-center GPU and a supported driver branch."
		}
		events = append(events, e.Seq)
	}
	d = append(d, "CUDA's forward-compatibility package (cuda-compat) runs a newer libcuda on an older kernel module, on data-center GPUs only and on the driver branches it lists.")
	a.add(Finding{ID: "compat-unsupported", Severity: SeverityError, Summary: summary, Detail: d, Fix: fix, Events: events}, "")
}

// libVersion is the driver version in a versioned library's name
// (libcuda.so.580.159.04 → 580.159.04), "" for others.
func libVersion(b string) string {
	for _, p := range []string{"libcuda.so.", "libnvidia-ml.so."} {
		if v, ok := strings.CutPrefix(b, p); ok && strings.Count(v, ".") >= 1 {
			return v
		}
	}
	return ""
}

// checkExcludedGPU: GPUs the driver was told to leave alone
// (NVreg_ExcludedGpus). No GPU for CUDA (100) makes it the explanation.
func (a *analyzer) checkExcludedGPU() {
	ex := nvdev.ExcludedGPUs(a.s)
	if len(ex) == 0 {
		return
	}
	sev := SeverityWarning
	d := []string{"Excluded by the driver (NVreg_ExcludedGpus): " + strings.Join(ex, ", ") + "; its node does not open (EPERM)."}
	var events []uint64
	if f := a.cudaFailed(); f != nil && a.fail < 0 && f.Func == "cuInit" && f.Ret == cudaNoDevice {
		sev = SeverityError
		d = append([]string{fmt.Sprintf("`%s()` by %s returned %d (%s).", f.Func, nvdev.Caller(f), f.Ret, nvdev.ReturnName(f.Func, f.Ret))}, d...)
		events = []uint64{f.Seq}
	}
	a.add(Finding{ID: "excluded-gpu", Severity: sev,
		Summary: "the driver excludes " + strings.Join(ex, ", "),
		Detail:  d, Fix: nvdev.ExcludedGPUFix, Events: events}, "")
}

// checkKernelMessages names the driver's known kernel messages and ties each
// to the traced call nearest in time.
func (a *analyzer) checkKernelMessages() {
	var d []string
	for _, l := range a.s.KernelLog {
		meaning := nvdev.KernelLineMeaning(l.Text)
		if meaning == "" {
			continue
		}
		line := l.Text + " — " + meaning
		switch {
		case l.T == nil:
		case l.Older:
			line = fmt.Sprintf("%s (before the trace, at %s)", line, fmtOffset(*l.T))
		default:
			line = fmt.Sprintf("%s: %s", fmtOffset(*l.T), line)
			if i := a.nearestCall(*l.T); i >= 0 {
				e := &a.ev[i]
				line += fmt.Sprintf("; nearest call: `%s` by %s at %s", nvdev.FormatCall(e), nvdev.Caller(e), fmtOffset(e.Time))
			}
		}
		d = append(d, line)
	}
	if len(d) == 0 {
		return
	}
	a.add(Finding{ID: "kernel-messages", Severity: SeverityInfo,
		Summary: fmt.Sprintf("the NVIDIA driver logged %d known kernel messages", len(d)),
		Detail:  d}, "")
}

func fmtOffset(t time.Duration) string {
	return fmt.Sprintf("%+.3fs", t.Seconds())
}

// nearestCall is the traced call (not an exit) closest in time to t, -1
// when there is none.
func (a *analyzer) nearestCall(t time.Duration) int {
	best, bestD := -1, time.Duration(0)
	for i := range a.ev {
		if a.ev[i].Kind == tracer.KindExit {
			continue
		}
		d := a.ev[i].Time - t
		if d < 0 {
			d = -d
		}
		if best < 0 || d < bestD {
			best, bestD = i, d
		}
	}
	return best
}
