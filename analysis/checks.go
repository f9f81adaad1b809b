package analysis

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// checkAll adds what the trace and snapshot show beyond the failing call.
func (a *analyzer) checkAll() {
	if len(a.s.ProcDevices) > 0 {
		if _, ok := a.s.MajorOf("nvidia"); !ok && a.s.MajorName(nvfile.Major) == "" {
			a.driverNotLoaded("nvidia", nil)
		} else if _, ok := a.s.MajorOf("nvidia-uvm"); !ok && !a.openedOK("/dev/nvidia-uvm") {
			// Not fatal yet (libcuda may load it through nvidia-modprobe),
			// but without it cuInit fails with 999.
			a.driverNotLoadedSev("nvidia-uvm", nil, nil, SeverityWarning)
		}
	}
	if l := a.kernelLines(nvdev.IsAPIMismatchLine); len(l) > 0 {
		a.versionMismatch(-1)
	}
	if l := a.kernelLines(nvdev.IsRMInitLine); len(l) > 0 {
		a.rmInitFailed(-1, SeverityWarning)
	}
	if l := a.kernelLines(nvdev.IsGPULostLine); len(l) > 0 {
		a.gpuLost(-1, SeverityError)
	}
	a.checkForkAfterInit()
	a.checkNodevNodes()
	a.checkNotCharDevice()
	a.checkLibcuda()
	a.checkLibcudaLoaded()
	a.checkVisibleDevices()
	a.checkStaleNodes()
	a.checkRepaired()
	a.checkMIGCaps()
	a.checkModprobe()
	a.checkUVMInit()
	a.checkInband()
	a.checkDriverState()
	a.checkLimits()
	a.checkCallsOK()
}

// checkNodevNodes flags NVIDIA nodes that sit on a nodev mount even when no
// open of them failed: the target may have died on another device first
// (PyTorch opens /dev/urandom before CUDA), and every open there fails.
func (a *analyzer) checkNodevNodes() {
	for i := range a.s.Nodes {
		n := &a.s.Nodes[i]
		// Name a main node rather than a MIG capability node.
		if !n.Exists || !isNvidiaNode(n.Path) || (nvdev.IsCapsNode(n.Path) && i < len(a.s.Nodes)-1) {
			continue
		}
		m := mountOf(a.s, n, n.Path)
		if m == nil || !m.NoDev {
			continue
		}
		a.add(Finding{ID: "nodev", Severity: SeverityError,
			Summary: fmt.Sprintf("%s is on a nodev mount (%s): every device open there fails with EACCES", n.Path, m.MountPoint),
			Detail: []string{fmt.Sprintf("The mount %s (%s, options %s) is nodev, so the kernel refuses to open any device node on it, NVIDIA's or not (/dev/null, /dev/urandom), before permissions or cgroups are checked.", m.MountPoint, m.FSType, strings.Join(m.Options, ",")),
				"No NVIDIA node open failed in this trace: the target stopped earlier, probably on another device node on the same mount."},
			Fix: fmt.Sprintf("Remount %s without nodev (`mount -o remount,dev %s`), or bind-mount the host's device nodes into the target's /dev.", m.MountPoint, m.MountPoint)}, "")
		return
	}
}

func (a *analyzer) openedOK(path string) bool {
	for i := range a.ev {
		if e := &a.ev[i]; e.Kind == tracer.KindOpen && e.Path == path && !e.Failed() {
			return true
		}
	}
	return false
}

// libKind classifies an open of libcuda: "stub", "compat", or "". The
// file's contents, as the snapshot read them, decide before its path: a
// stub copied to libcuda.so.1 outside any stubs directory is still one.
func (a *analyzer) libKind(e *tracer.Event) string {
	if e.Kind != tracer.KindOpen || e.Failed() {
		return ""
	}
	if k := nvdev.LibcudaKind(e.Path); k != "" {
		return k
	}
	if lf := a.libraryFile(e); lf != nil {
		if lf.Stub && strings.HasPrefix(baseName(e.Path), "libcuda.so") {
			return "stub"
		}
		return nvdev.LibcudaKind(lf.Resolved)
	}
	return ""
}

func (a *analyzer) checkLibcuda() {
	for i := range a.ev {
		switch a.libKind(&a.ev[i]) {
		case "stub":
			a.libcudaStub(i)
		case "compat":
			e := &a.ev[i]
			a.add(Finding{ID: "libcuda-compat", Severity: SeverityWarning,
				Summary: "a forward-compatibility libcuda was loaded: " + e.Path,
				Detail: []string{nvdev.CallLine(e),
					"The CUDA forward-compatibility package replaces the host's libcuda with a newer one. It works only on data-center GPUs; elsewhere cuInit fails with 804 (CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE), and it must match the kernel driver's branch."},
				Fix:    "If CUDA reports 804 or a driver mismatch, remove the compat directory from LD_LIBRARY_PATH / ld.so.conf (or use an image without cuda-compat), or upgrade the host driver so compat is not needed.",
				Events: []uint64{e.Seq}}, "")
		}
	}
}

func (a *analyzer) libcudaStub(i int) {
	e := &a.ev[i]
	d := []string{nvdev.CallLine(e),
		"That is the CUDA toolkit's link-time stub, not the driver: cuInit returns 34 (CUDA_ERROR_STUB_LIBRARY)."}
	if lf := a.libraryFile(e); lf != nil && lf.Stub && nvdev.LibcudaKind(e.Path) != "stub" {
		d = append(d, fmt.Sprintf("Its contents say so, not its name: %d bytes and no driver version inside (the driver's libcuda is ~100 MB and carries its version).", lf.Size))
	}
	if v, ok := a.s.Env["LD_LIBRARY_PATH"]; ok && strings.Contains(v, "stubs") {
		d = append(d, "LD_LIBRARY_PATH="+v)
	}
	src, undo := a.libcudaSource(e)
	d = append(d, src)
	fix := "Remove the toolkit's lib64/stubs directory from LD_LIBRARY_PATH (and from ld.so.conf / rpath) so the driver's libcuda.so.1 is found."
	if undo != "" {
		fix = "Load the driver's libcuda, not the stub: " + undo + " (the stub is for linking only; at run time the driver's libcuda.so.1 must be found)."
	}
	a.add(Finding{ID: "libcuda-stub", Severity: SeverityError,
		Summary: "the stub libcuda was loaded: " + e.Path,
		Detail:  d,
		Fix:     fix,
		Events:  []uint64{e.Seq}}, "the CUDA toolkit's stub libcuda was loaded instead of the driver's (CUDA_ERROR_STUB_LIBRARY, 34)")
}

func (a *analyzer) checkVisibleDevices() {
	v, ok := a.s.Env["CUDA_VISIBLE_DEVICES"]
	if !ok {
		return
	}
	// CUDA found no device and nothing else explains it: a UUID-shaped
	// entry may name a GPU that does not exist, which hides them all too.
	noDevice := (a.cuda.Status == "failed" && a.cuda.Code == 100 || a.cuda.Devices != nil && *a.cuda.Devices == 0) && a.fail < 0
	if !noDevice && !nvdev.VisibleDevicesHidesAll(v, len(a.s.Driver.GPUs)) {
		return
	}
	// CUDA's own verdict settles it: libcuda still opens /dev/nvidia0 when
	// the variable hides every GPU (recorded on the H200), so without the
	// verdict only "no GPU node opened" is evidence.
	var d []string
	switch c := a.cuda; {
	case c.Status == "failed" && c.Code == 100:
		d = append(d, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q in the target's environment, and %s returned 100 (CUDA_ERROR_NO_DEVICE).", v, c.Func))
	case c.Devices != nil && *c.Devices == 0:
		d = append(d, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q in the target's environment, and cuDeviceGetCount returned 0 devices.", v))
	case c.Status == "ok":
		return // CUDA found a GPU: the variable did not hide them all
	default:
		for i := range a.ev {
			e := &a.ev[i]
			if e.Kind == tracer.KindOpen && !e.Failed() && nvdev.IsGPUNode(e.Path) {
				return
			}
		}
		d = append(d, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q in the target's environment, and the trace shows no /dev/nvidiaN opened.", v))
	}
	if n := len(a.s.Driver.GPUs); n > 0 {
		d = append(d, fmt.Sprintf("The driver sees %d GPU(s) (valid indices 0..%d); CUDA stops at the first invalid entry.", n, n-1))
	} else {
		d = append(d, "CUDA stops at the first invalid entry (indices start at 0; -1 or an empty value hides every GPU).")
	}
	a.add(Finding{ID: "cuda-visible-devices-hides-all", Severity: SeverityError,
		Summary: fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q hides every GPU", v),
		Detail:  d,
		Fix:     "Unset CUDA_VISIBLE_DEVICES, or set it to valid indices (0-based) or GPU UUIDs from `nvidia-smi -L`. cuInit otherwise reports 100 (CUDA_ERROR_NO_DEVICE) while nvidia-smi lists the GPUs."}, "")
}

// checkStaleNodes flags snapshot nodes whose major is not their driver's
// current one, even when no call failed on them yet.
func (a *analyzer) checkStaleNodes() {
	for _, n := range a.s.Nodes {
		if !n.Exists || n.Type != "c" {
			continue
		}
		f := factsFor(a.s, nil, 0, nil, n.Path)
		if !f.stale() {
			continue
		}
		a.nodeStale(n.Path, f, []string{
			f.describe(a.s),
			fmt.Sprintf("%s is registered at major %d (/proc/devices); opening the node gives ENXIO, or reaches the wrong driver.", f.regName, f.regMajor),
		}, SeverityWarning, nil)
	}
}

// checkRepaired reports nodes libcuda recreated itself (as root): the run
// worked, but the environment was wrong before it started.
func (a *analyzer) checkRepaired() {
	type repair struct {
		lines  []string
		events []uint64
	}
	var order []string
	byPath := map[string]*repair{}
	for i := range a.ev {
		e := &a.ev[i]
		if (e.Kind != tracer.KindMknod && e.Kind != tracer.KindUnlink) || e.Failed() || !isNvidiaNode(e.Path) {
			continue
		}
		// LXC's mknodat(S_IFREG) of a bind-mount target, and whatever a
		// runtime does before it execs the program, are not libcuda's.
		if (e.Kind == tracer.KindMknod && !isDeviceMknod(e)) || a.beforeOwnExec(i) {
			continue
		}
		r := byPath[e.Path]
		if r == nil {
			r = &repair{}
			byPath[e.Path] = r
			order = append(order, e.Path)
		}
		line := fmt.Sprintf("`%s` by %s %s", nvdev.FormatCall(e), nvdev.Caller(e), nvdev.FormatResult(e))
		if e.Kind == tracer.KindUnlink {
			f := factsFor(a.s, a.ev, i, nil, e.Path)
			if f.dev != nil {
				line += fmt.Sprintf(" (it was c %d:%d", f.dev.Major, f.dev.Minor)
				if f.stale() {
					line += fmt.Sprintf("; %s is %d", f.regName, f.regMajor)
				}
				line += ")"
			}
		}
		r.lines = append(r.lines, line+".")
		r.events = append(r.events, e.Seq)
	}
	if len(order) == 0 {
		return
	}
	var d []string
	var events []uint64
	for _, p := range order {
		d = append(d, byPath[p].lines...)
		events = append(events, byPath[p].events...)
	}
	d = append(d, "libcuda repairs missing or stale nodes only when it may create device nodes (root with CAP_MKNOD, outside a user namespace); the same environment fails for other users and in containers.")
	fix := nvdev.NodeCreateFix(order[0])
	a.add(Finding{ID: "node-repaired", Severity: SeverityWarning,
		Summary: fmt.Sprintf("the run is not clean: the node was recreated by libcuda (%s)", strings.Join(order, ", ")),
		Detail:  d, Fix: fix, Events: events}, "")
}

func (a *analyzer) checkMIGCaps() {
	var d []string
	var events []uint64
	for i := range a.ev {
		e := &a.ev[i]
		if !nvdev.IsCapsNode(e.Path) || !e.Failed() {
			continue
		}
		switch {
		case e.Kind == tracer.KindOpen && fatalOpenErrnos[e.Errno()]:
		case e.Kind == tracer.KindStat && e.Errno() == unix.ENOENT && !a.recoveredAny(i, tracer.KindOpen):
		default:
			continue
		}
		d = append(d, nvdev.CallLine(e))
		events = append(events, e.Seq)
	}
	if len(d) == 0 {
		return
	}
	if m, ok := a.s.MajorOf("nvidia-caps"); ok {
		d = append(d, fmt.Sprintf("nvidia-caps is registered at major %d (/proc/devices); cap1 is mig/config, cap2 is mig/monitor.", m))
	}
	fix := "Pass the MIG capability nodes (/dev/nvidia-caps/nvidia-cap1, -cap2 and the per-instance caps) into the container and allow the nvidia-caps major in its device cgroup, or run privileged; with the NVIDIA Container Toolkit's CDI mode, regenerate the spec after creating MIG instances (`nvidia-ctk cdi generate`) or set NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES.\n" + nvdev.NodeCreateFix("/dev/nvidia-caps/")
	if m, ok := a.s.MajorOf("nvidia-caps"); ok {
		fix += "\n" + nvdev.DynamicMajorNote(m, "nvidia-caps")
	}
	a.add(Finding{ID: "mig-caps", Severity: SeverityWarning,
		Summary: "MIG capability nodes are missing or denied",
		Detail:  d, Fix: fix, Events: events}, "")
}

// recoveredAny is whether the same process later did kind on the same path
// successfully.
func (a *analyzer) recoveredAny(i int, kind tracer.Kind) bool {
	e := &a.ev[i]
	return a.lastSuccess(e.PID, kind, e.Path) > i
}

type modprobeRun struct {
	exec int
	how  string
}

// modprobeFailures pairs each successful exec of nvidia-modprobe with its
// process's exit and keeps the ones that did not exit 0.
func (a *analyzer) modprobeFailures() []modprobeRun {
	var out []modprobeRun
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindExec || e.Failed() {
			continue
		}
		name := baseName(e.Path)
		if len(e.Argv) > 0 && name != "nvidia-modprobe" {
			name = baseName(e.Argv[0])
		}
		if name != "nvidia-modprobe" {
			continue
		}
		for j := i + 1; j < len(a.ev); j++ {
			x := &a.ev[j]
			if x.Kind != tracer.KindExit || x.PID != e.PID {
				continue
			}
			switch {
			case x.Signal != 0:
				out = append(out, modprobeRun{i, "was killed by " + unix.SignalName(unix.Signal(x.Signal))})
			case x.ExitCode != 0:
				out = append(out, modprobeRun{i, fmt.Sprintf("exited %d", x.ExitCode)})
			}
			break
		}
	}
	return out
}

func (a *analyzer) checkModprobe() {
	runs := a.modprobeFailures()
	if len(runs) == 0 {
		return
	}
	var d []string
	var events []uint64
	for _, r := range runs {
		e := &a.ev[r.exec]
		d = append(d, fmt.Sprintf("`%s` by %s %s.", nvdev.FormatCall(e), nvdev.Caller(e), r.how))
		events = append(events, e.Seq)
	}
	d = append(d, "libcuda runs nvidia-modprobe to load nvidia/nvidia_uvm and create missing nodes; it needs root (or its setuid bit) and a host /dev, so it fails inside containers and for ordinary users.")
	a.add(Finding{ID: "modprobe-failed", Severity: SeverityWarning,
		Summary: "nvidia-modprobe failed",
		Detail:  d,
		Fix:     "Load the modules and create the nodes on the host before CUDA starts: `nvidia-modprobe -u -c=0` (as root), e.g. at boot.",
		Events:  events}, "")
}

// checkUVMInit adds the low-confidence HMM hint when UVM_INITIALIZE fails.
func (a *analyzer) checkUVMInit() {
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindIoctl || e.Request != nvdev.UVMInitialize || e.FD < 0 {
			continue
		}
		st, ok := nvdev.UVMInitStatus(e)
		if !e.Failed() && !(ok && st != 0) {
			continue
		}
		if e.Errno() == unix.ENOTTY && a.foreignNode(e) {
			return // not UVM's answer: another driver's node (wrong-driver)
		}
		d := []string{nvdev.CallLine(e)}
		if ok && st != 0 {
			d = append(d, "rmStatus: "+nvdev.StatusName(st)+".")
		}
		hmm, set := a.s.Driver.UVMParams["uvm_disable_hmm"]
		if set && (hmm == "1" || hmm == "Y") {
			return // HMM already off: not this
		}
		d = append(d, "The device opens worked but UVM initialisation failed. On open kernel modules with recent kernels this is often HMM (heterogeneous memory management); uvm_disable_hmm is "+orNotSet(hmm, set)+". This is a hint, not a diagnosis.")
		a.add(Finding{ID: "uvm-hmm", Severity: SeverityWarning,
			Summary:  "UVM initialisation failed; HMM may be the cause",
			Detail:   d,
			Fix:      "Try `options nvidia_uvm uvm_disable_hmm=1` in /etc/modprobe.d/nvidia-uvm.conf, then reload nvidia_uvm (`rmmod nvidia_uvm && modprobe nvidia_uvm`).",
			Inferred: true, Events: []uint64{e.Seq}}, "")
		return
	}
}

func orNotSet(v string, set bool) string {
	if !set {
		return "not set"
	}
	return v
}

// checkCallsOK lists the device calls that worked: the contrast with the
// failing one is evidence.
func (a *analyzer) checkCallsOK() {
	st := Summarize(a.ev, a.unstored)
	var d []string
	var paths []string
	var events []uint64
	for i := range a.ev {
		if e := &a.ev[i]; e.Kind == tracer.KindOpen && !e.Failed() && isNvidiaNode(e.Path) {
			events = append(events, e.Seq)
		}
	}
	ioctlFailures := 0
	for _, n := range st.Nodes {
		if _, nd := nonDeviceAt(a.s, a.ev, n.Path); n.Opens == 0 || nd {
			continue // not a device: node-not-device says what it is
		}
		line := n.Path
		if n.Dev != nil {
			line += fmt.Sprintf(" (c %d:%d)", n.Dev.Major, n.Dev.Minor)
		}
		line += fmt.Sprintf(" opened %dx, allowed", n.Opens)
		switch {
		case n.Ioctls > 0 && n.IoctlFailures == n.Ioctls:
			line += fmt.Sprintf("; all %d ioctls failed", n.Ioctls)
		case n.IoctlFailures > 0:
			line += fmt.Sprintf("; %d ioctls, %d of them failed", n.Ioctls, n.IoctlFailures)
		case n.Ioctls > 0:
			line += fmt.Sprintf("; %d ioctls", n.Ioctls)
		}
		ioctlFailures += n.IoctlFailures
		d = append(d, line)
		paths = append(paths, n.Path)
	}
	if len(d) == 0 {
		return
	}
	// "Fine" only when nothing on those nodes failed: an open that worked
	// followed by ioctls that all failed is not fine.
	summary := fmt.Sprintf("%d NVIDIA device node(s) opened fine: %s", len(paths), strings.Join(paths, ", "))
	if ioctlFailures > 0 {
		summary = fmt.Sprintf("%d NVIDIA device node(s) opened, but %d ioctl(s) on them failed: %s", len(paths), ioctlFailures, strings.Join(paths, ", "))
	}
	a.add(Finding{ID: "calls-ok", Severity: SeverityInfo,
		Summary: summary,
		Detail:  d, Events: events}, "")
}

// cudaSeen reports whether the trace shows CUDA or NVML at work: a return
// of one of their entry points, an open of their library (a CUDA
// program's loader makes one), or a call on /dev/nvidia-uvm, which only
// CUDA's cuInit touches.
func (a *analyzer) cudaSeen() bool {
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind == tracer.KindAPI || e.Kind == tracer.KindOpen && nvfile.IsLibrary(e.Path) || strings.HasPrefix(e.Path, "/dev/nvidia-uvm") {
			return true
		}
	}
	return false
}

// MadeDeviceCall reports whether events hold an NVIDIA device call: a
// call on an NVIDIA node's path or an ioctl. Without one nothing was
// attempted: an error finding about the host (the driver not loaded) is
// then a warning for the process, not its failure (the verdict's "made no
// NVIDIA device call; beware", and no diagnosis in cudatrace watch).
func MadeDeviceCall(events []tracer.Event) bool {
	for i := range events {
		if isNvidiaNode(events[i].Path) || events[i].Kind == tracer.KindIoctl {
			return true
		}
	}
	return false
}

// verdict is the report's headline. It starts from CUDA's own return code
// when that was traced; without it, it never claims that CUDA started.
func (a *analyzer) verdict() string {
	if v, ok := a.cudaVerdict(); ok {
		return v
	}
	cudaHead := "cuInit cannot succeed: "
	if !a.cudaSeen() {
		// Nothing of CUDA's ran (cat /dev/nvidia0): name the call, not cuInit.
		cudaHead = "An NVIDIA device call failed: "
	}
	if a.fail >= 0 {
		e := &a.ev[a.fail]
		head := cudaHead
		if e.Comm == "nvidia-smi" {
			head = "nvidia-smi (NVML) cannot initialise: "
		}
		s := head + nvdev.FormatCall(e) + " by " + nvdev.Caller(e)
		if e.NoReturn {
			s += " never returned"
		} else if e.Failed() {
			s += " → " + e.ErrnoName()
		} else if st := a.inbandText(e); st != "" {
			s += " → " + st
		}
		if a.cause != "" {
			s += ": " + a.cause
		}
		return s + "."
	}
	touched := MadeDeviceCall(a.ev)
	for _, f := range a.out {
		if f.Severity == SeverityError {
			if !touched {
				// Nothing was attempted, so nothing "cannot succeed" yet.
				return "The target made no NVIDIA device call; beware: " + f.Summary + "."
			}
			return cudaHead + f.Summary + "."
		}
	}
	if v := a.failedUnseen(); v != "" {
		return v
	}
	if a.facts.Attached && len(a.facts.HeldAtAttach) > 0 {
		// Initialised before the attach: say what was seen then, and that
		// nothing failed since.
		head := "Nothing failed while attached."
		if why := a.inbandVerdict(); why != "" {
			head = why
		}
		return fmt.Sprintf("%s The target already held %d NVIDIA device fd(s) when cudatrace attached (%s), so CUDA was initialised before the trace began; how that went is not in it.", head, len(a.facts.HeldAtAttach), strings.Join(a.facts.HeldAtAttach, "; "))
	}
	s := "No NVIDIA device call failed."
	if why := a.inbandVerdict(); why != "" {
		s = why
	}
	if a.cuda.Status != "unknown" || touched {
		s += a.apiUnseen()
	}
	if a.byID["node-repaired"] {
		s += " libcuda recreated a device node during the run, so the setup is not clean (see node-repaired)."
	}
	if !touched {
		s += " The trace touched no /dev/nvidia* node, so CUDA was not initialised."
	}
	return s
}
