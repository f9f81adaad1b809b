package analysis

import (
	"fmt"
	"path"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/snapshot"
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

// libraryFile is what the snapshot read of the library file e opened
// (its own process's read first), or nil.
func (a *analyzer) libraryFile(e *tracer.Event) *snapshot.LibraryFile {
	var other *snapshot.LibraryFile
	for i := range a.s.Libraries {
		l := &a.s.Libraries[i]
		if l.Path != e.Path || l.Error != "" {
			continue
		}
		if l.PID == e.PID {
			return l
		}
		other = l
	}
	return other
}

// libcudaVersion is the driver version of the library e opened and where
// it was read: its contents (the banner), the name its links lead to, or
// the name it was opened by.
func (a *analyzer) libcudaVersion(e *tracer.Event) (version, from string) {
	if lf := a.libraryFile(e); lf != nil && lf.Version != "" {
		if lf.VersionFrom == "name" {
			return lf.Version, "from the name " + baseName(lf.Resolved)
		}
		return lf.Version, "from its contents"
	}
	if v := libVersion(baseName(e.Path)); v != "" {
		return v, "from its name"
	}
	return "", ""
}

// libcudaSource says what made the loader take the library e opened: an
// LD_LIBRARY_PATH entry (which one), ld.so.cache and the ld.so.conf file
// that lists its directory, and the mount it lives on. fix is how to undo
// that choice, "" when it is not known.
func (a *analyzer) libcudaSource(e *tracer.Event) (line, fix string) {
	dir := path.Dir(e.Path)
	lf := a.libraryFile(e)
	mount := ""
	if lf != nil && lf.Mount != nil {
		m := lf.Mount
		mount = fmt.Sprintf(" It lives on the mount at %s (%s %s", m.MountPoint, m.FSType, m.Source)
		if m.Bind {
			mount += ", bind of " + m.Root
		}
		mount += "): a container runtime mounted it."
	}
	v, ok := a.s.Env["LD_LIBRARY_PATH"]
	if ok {
		for n, d := range strings.Split(v, ":") {
			if d != "" && path.Clean(d) == dir {
				return fmt.Sprintf("It was found through LD_LIBRARY_PATH, entry %d (%s), which the loader searches before ldconfig's cache.", n+1, d) + mount,
					"remove " + d + " from LD_LIBRARY_PATH"
			}
		}
	}
	if lf != nil && lf.LdCache {
		if lf.LdConf != "" {
			return fmt.Sprintf("ldconfig's cache (/etc/ld.so.cache) maps %s to it: %s lists %s.", baseName(e.Path), lf.LdConf, dir) + mount,
				"remove " + dir + " from " + lf.LdConf + " and run `ldconfig`"
		}
		return fmt.Sprintf("ldconfig's cache (/etc/ld.so.cache) maps %s to it.", baseName(e.Path)) + mount,
			"remove " + dir + " from /etc/ld.so.conf.d and run `ldconfig`"
	}
	if !ok {
		return "LD_LIBRARY_PATH is not set in the target's environment, so ldconfig's cache (/etc/ld.so.conf.d), an rpath, or a dlopen by full path chose " + dir + "." + mount, ""
	}
	return "No LD_LIBRARY_PATH entry is " + dir + ": ldconfig's cache (/etc/ld.so.conf.d), an rpath, or a dlopen by full path chose it." + mount, ""
}

// moduleVersion is the kernel module's version, "" when unknown.
func (a *analyzer) moduleVersion() string {
	if kv := a.s.Host.DriverVersion; kv != "" {
		return kv
	}
	if a.s.DriverState != nil {
		return a.s.DriverState.ModuleVersion
	}
	return ""
}

// mismatchedLibcuda is the first open of a driver libcuda (not the stub)
// whose version is not the kernel module's, or -1.
func (a *analyzer) mismatchedLibcuda() int {
	kv := a.moduleVersion()
	if kv == "" {
		return -1
	}
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindOpen || e.Failed() || !strings.HasPrefix(baseName(e.Path), "libcuda.so") || a.libKind(e) == "stub" {
			continue
		}
		if lv, _ := a.libcudaVersion(e); lv != "" && lv != kv {
			return i
		}
	}
	return -1
}

// checkLibcudaLoaded says which libcuda the target loaded and whether its
// version fits the kernel module, when CUDA did not visibly succeed.
func (a *analyzer) checkLibcudaLoaded() {
	i := a.libcudaOpen()
	if i < 0 || a.cuda.Status == "ok" || a.libKind(&a.ev[i]) == "stub" {
		return
	}
	e := &a.ev[i]
	d := []string{nvdev.CallLine(e)}
	if lf := a.libraryFile(e); lf != nil && lf.Resolved != "" && lf.Resolved != e.Path {
		d = append(d, e.Path+" → "+lf.Resolved)
	}
	kv := a.moduleVersion()
	lv, from := a.libcudaVersion(e)
	sev, summary := SeverityInfo, "libcuda loaded from "+e.Path
	switch {
	case lv != "" && kv != "" && lv != kv:
		sev = SeverityWarning
		summary = fmt.Sprintf("libcuda %s was loaded, but the kernel module is %s", lv, kv)
		d = append(d, fmt.Sprintf("Its version, %s (%s), is not the kernel module's %s (/proc/driver/nvidia/version): cuInit then fails with 803 (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), or 804 for a forward-compatibility libcuda on a GPU that does not support it.", lv, from, kv))
	case lv != "" && kv != "":
		d = append(d, fmt.Sprintf("Its version, %s (%s), is the kernel module's (/proc/driver/nvidia/version).", lv, from))
	case kv != "":
		d = append(d, fmt.Sprintf("Its version is not known (not read from its file; libcuda.so.1 links to libcuda.so.<version>: `readlink -f %s`); the kernel module is %s.", e.Path, kv))
	case lv != "":
		d = append(d, fmt.Sprintf("Its version is %s (%s); the kernel module's is unknown (/proc/driver/nvidia/version could not be read).", lv, from))
	default:
		d = append(d, "The kernel module's version is unknown (/proc/driver/nvidia/version could not be read).")
	}
	if a.libKind(e) == "compat" {
		d = append(d, "It is a forward-compatibility libcuda (a compat directory): it needs a data-center GPU and the kernel driver's branch, else 804.")
	}
	src, _ := a.libcudaSource(e)
	d = append(d, src)
	fix := ""
	if sev == SeverityWarning {
		fix = a.mismatchFix(e)
	}
	if sev == SeverityInfo && a.cuda.Status != "failed" && a.cuda.Status != "not-called" {
		return // CUDA's result unknown and nothing wrong with it: no news
	}
	a.add(Finding{ID: "libcuda-loaded", Severity: sev, Summary: summary, Detail: d, Fix: fix, Events: []uint64{e.Seq}}, "")
}

// mismatchFix is the fix for the libcuda e opened when its version is not
// the kernel module's: undo the loader's choice where something steered
// it (LD_LIBRARY_PATH, a compat directory); where it is the installed or
// the mounted host driver, the module is the one behind (an upgrade
// without a reboot); in a container's own files, the image ships them.
func (a *analyzer) mismatchFix(e *tracer.Event) string {
	_, undo := a.libcudaSource(e)
	lf := a.libraryFile(e)
	lv, _ := a.libcudaVersion(e)
	ld := strings.Contains(undo, "LD_LIBRARY_PATH")
	switch {
	case undo != "" && (ld || a.libKind(e) == "compat"):
		return "Load the driver's own libcuda: " + undo + ", so the loader finds the libcuda of the kernel module's version (in containers the NVIDIA Container Toolkit or CDI mounts the host's)."
	case lf != nil && lf.Mount != nil:
		return fmt.Sprintf("The host's driver libraries, mounted at %s, are %s and its kernel module is %s: the driver was upgraded without reloading the module. Reboot the host, or reload the modules (`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`).", lf.Mount.MountPoint, lv, a.moduleVersion())
	case a.inContainer():
		return "The image ships its own driver libraries (" + e.Path + "): remove them from the image and let the NVIDIA Container Toolkit or CDI mount the host's, which match its kernel module."
	}
	return "Reboot, or reload the kernel modules (`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`), so the module matches the installed libraries (" + lv + ")."
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
	return fmt.Sprintf("%s %s after loading libcuda (%s), and no probed CUDA or NVML entry point returned: CUDA's own result is not known. No traced device call failed; the program may reach libcuda through entry points that are not probed (the CUDA runtime resolves them with cuGetProcAddress), or it failed outside CUDA (see libcuda-loaded).", nvdev.Caller(x), how, a.ev[i].Path)
}
