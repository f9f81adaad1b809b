package annotate

import (
	"fmt"
	"path"
	"strings"

	"github.com/cudatrace/cudatrace/tracer"
)

// loadedLibcuda is the first successful open of libcuda in the trace, or
// -1.
func (a *analyzer) libcudaOpen() int {
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind == tracer.KindOpen && !e.Failed() && strings.HasPrefix(baseName(e.Path), "libcuda.so") {
			return i
		}
	}
	return -1
}

// libcudaSource says what made the loader pick dir: an LD_LIBRARY_PATH
// entry (which one), or not (ldconfig's cache, the loader's defaults, an
// rpath or a dlopen by full path).
func (a *analyzer) libcudaSource(dir string) string {
	v, ok := a.s.Env["LD_LIBRARY_PATH"]
	if ok {
		for n, d := range strings.Split(v, ":") {
			if d != "" && path.Clean(d) == dir {
				return fmt.Sprintf("It was found through LD_LIBRARY_PATH, entry %d (%s), which the loader searches before ldconfig's cache.", n+1, d)
			}
		}
	}
	if !ok {
		return "LD_LIBRARY_PATH is not set in the target's environment, so ldconfig's cache (/etc/ld.so.conf.d), an rpath, or a dlopen by full path chose " + dir + "."
	}
	return "No LD_LIBRARY_PATH entry is " + dir + ": ldconfig's cache (/etc/ld.so.conf.d), an rpath, or a dlopen by full path chose it."
}

// checkLibcudaLoaded says which libcuda the target loaded and whether its
// version fits the kernel module, when CUDA did not visibly succeed.
func (a *analyzer) checkLibcudaLoaded() {
	i := a.libcudaOpen()
	if i < 0 || a.cuda.Status == "ok" || libcudaKind(&a.ev[i]) == "stub" {
		return
	}
	e := &a.ev[i]
	d := []string{callLine(e)}
	kv := a.s.Host.DriverVersion
	if kv == "" && a.s.DriverState != nil {
		kv = a.s.DriverState.ModuleVersion
	}
	lv := libVersion(baseName(e.Path))
	sev, summary := SeverityInfo, "libcuda loaded from "+e.Path
	switch {
	case lv != "" && kv != "" && lv != kv:
		sev = SeverityWarning
		summary = fmt.Sprintf("libcuda %s was loaded, but the kernel module is %s", lv, kv)
		d = append(d, fmt.Sprintf("Its version, %s (from its name), is not the kernel module's %s (/proc/driver/nvidia/version): cuInit then fails with 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), or 804 for a forward-compatibility libcuda on a GPU that does not support it.", lv, kv))
	case lv != "" && kv != "":
		d = append(d, fmt.Sprintf("Its version, %s (from its name), is the kernel module's (/proc/driver/nvidia/version).", lv))
	case kv != "":
		d = append(d, fmt.Sprintf("Its name carries no version (libcuda.so.1 links to libcuda.so.<version>: `readlink -f %s`); the kernel module is %s.", e.Path, kv))
	default:
		d = append(d, "The kernel module's version is unknown (/proc/driver/nvidia/version could not be read).")
	}
	if libcudaKind(e) == "compat" {
		d = append(d, "It is a forward-compatibility libcuda (a compat directory): it needs a data-center GPU and the kernel driver's branch, else 804.")
	}
	d = append(d, a.libcudaSource(path.Dir(e.Path)))
	fix := ""
	if sev == SeverityWarning {
		fix = "Load the driver's own libcuda: remove the directory holding " + e.Path + " from LD_LIBRARY_PATH (or ld.so.conf.d, then `ldconfig`), or do not ship driver libraries in the image (the NVIDIA Container Toolkit mounts the host's); else reboot or reload the modules so the kernel module matches the installed libraries."
	}
	if sev == SeverityInfo && a.cuda.Status != "failed" && a.cuda.Status != "not-called" {
		return // CUDA's result unknown and nothing wrong with it: no news
	}
	a.add(Finding{ID: "libcuda-loaded", Severity: sev, Summary: summary, Detail: d, Fix: fix, Events: []uint64{e.Seq}}, "")
}

// failedUnseen is the headline when libcuda was loaded, no probed entry
// point returned, and the process that loaded it failed: what is known and
// what is not, never "nothing failed". "" otherwise.
func (a *analyzer) failedUnseen() string {
	if a.cuda.Status != "not-called" {
		return ""
	}
	i := a.libcudaOpen()
	if i < 0 {
		return ""
	}
	x := a.exitOf(a.ev[i].PID, i)
	if x == nil || (x.ExitCode == 0 && x.Signal == 0) {
		return ""
	}
	how := fmt.Sprintf("exited %d", x.ExitCode)
	if x.Signal != 0 {
		how = "died of signal " + fmt.Sprint(x.Signal)
	}
	return fmt.Sprintf("%s %s after loading libcuda (%s), and no probed CUDA or NVML entry point returned: CUDA's own result is not known. No traced device call failed; the program may reach libcuda through entry points that are not probed (the CUDA runtime resolves them with cuGetProcAddress), or it failed outside CUDA (see libcuda-loaded).", who(x), how, a.ev[i].Path)
}
