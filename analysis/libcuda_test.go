package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Which libcuda was loaded and whether it fits the kernel module; the
// headline when no probed entry point returned and the process failed.
func TestLibcudaLoaded(t *testing.T) {
	build := func(lib string, exit tracer.Event) []tracer.Event {
		b := newEvents(5, "python3")
		b.open(lib, unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
		b.add(exit)
		return b.evs
	}
	s := h200()
	s.Env = map[string]string{"LD_LIBRARY_PATH": "/opt/x:/opt/cuda-12/lib64"}
	a := AnalyzeFacts(build("/opt/cuda-12/lib64/libcuda.so.575.51.03", tracer.Event{Kind: tracer.KindExit, ExitCode: 1}), s, Facts{APIReturns: true})
	f := find(t, a, "libcuda-loaded")
	if f.Severity != SeverityWarning {
		t.Errorf("mismatch: severity %s", f.Severity)
	}
	mustContain(t, "summary", f.Summary, "575.51.03", "580.159.04")
	mustContain(t, "detail", detail(f), "803", "LD_LIBRARY_PATH, entry 2 (/opt/cuda-12/lib64)")
	mustContain(t, "verdict", a.Verdict, "python3[5] exited 1", "/opt/cuda-12/lib64/libcuda.so.575.51.03", "not known")
	if strings.Contains(a.Verdict, "No NVIDIA device call failed") {
		t.Errorf("verdict %q", a.Verdict)
	}

	// The same version, exit 0: no headline of failure, the library named.
	a = AnalyzeFacts(build("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", tracer.Event{Kind: tracer.KindExit}), s, Facts{APIReturns: true})
	f = find(t, a, "libcuda-loaded")
	if f.Severity != SeverityInfo || strings.Contains(a.Verdict, "not known") {
		t.Errorf("severity %s verdict %q", f.Severity, a.Verdict)
	}
	mustContain(t, "detail", detail(f), "is the kernel module's", "No LD_LIBRARY_PATH entry")
}

// Attached to a process that initialised CUDA before the attach: the
// headline says what was held then and that nothing failed while
// attached, never that libcuda was not loaded or CUDA not initialised.
func TestAttachedAfterInit(t *testing.T) {
	b := newEvents(30, "python3")
	b.ioctl(3, 0xc020462a, 0, dev(195, 255))
	facts := Facts{APIReturns: true, Attached: true, HeldAtAttach: []string{"fd 3 → /dev/nvidiactl (c 195:255)", "fd 4 → /dev/nvidia-uvm (c 238:0)"}}
	for _, evs := range [][]tracer.Event{b.evs, nil} {
		a := AnalyzeFacts(evs, h200(), facts)
		mustContain(t, "verdict", a.Verdict, "Nothing failed while attached", "held 2 NVIDIA device fd(s)", "/dev/nvidia-uvm", "initialised before the trace")
		for _, bad := range []string{"did not load libcuda", "was not initialised", "touched no"} {
			if strings.Contains(a.Verdict, bad) {
				t.Errorf("verdict %q says %q", a.Verdict, bad)
			}
		}
	}
}

// Which libcuda by its contents (issue 27 class 8): the copy a process
// loaded, read by the snapshot, decides the verdict for 803 and 34 where
// its name says nothing, and the fix undoes what chose it.
func TestLibcudaByContents(t *testing.T) {
	run := func(lib string, code int64, s *snapshot.Snapshot) Result {
		b := newEvents(5, "python3")
		b.open(lib, unix.O_RDONLY|unix.O_CLOEXEC, 3, nil)
		b.open("/dev/nvidiactl", unix.O_RDWR, 4, dev(195, 255))
		b.add(tracer.Event{Kind: tracer.KindAPI, Func: "cuInit", Path: lib, Ret: code})
		b.add(tracer.Event{Kind: tracer.KindExit, ExitCode: 1})
		return AnalyzeFacts(b.evs, s, Facts{APIReturns: true})
	}
	// The H200's compat libcuda (580.95.05) first on LD_LIBRARY_PATH, the
	// module 580.159.04: cuInit 803, as measured there.
	s := h200()
	s.Env = map[string]string{"LD_LIBRARY_PATH": "/usr/local/cuda-13.0/compat"}
	compat := "/usr/local/cuda-13.0/compat/libcuda.so.1"
	s.Libraries = []snapshot.LibraryFile{{PID: 5, Path: compat, Resolved: "/usr/local/cuda-13.0/compat/libcuda.so.580.95.05", Version: "580.95.05", VersionFrom: "contents"}}
	a := run(compat, 803, s)
	f := find(t, a, "version-mismatch")
	mustContain(t, "verdict", a.Verdict, "803", "libcuda 580.95.05 (a forward-compatibility copy) was loaded from /usr/local/cuda-13.0/compat", "kernel module is 580.159.04")
	mustContain(t, "fix", f.Fix, "remove /usr/local/cuda-13.0/compat from LD_LIBRARY_PATH")
	if strings.Contains(f.Fix, "Reboot") {
		t.Errorf("fix %q reboots for a library the environment chose", f.Fix)
	}
	mustContain(t, "detail", detail(find(t, a, "libcuda-loaded")), "580.95.05 (from its contents)", "LD_LIBRARY_PATH, entry 1")

	// A newer compat libcuda on a GPU it does not support: 804 names it.
	s.Libraries[0].Version, s.Libraries[0].Resolved = "590.10.01", "/usr/local/cuda-13.0/compat/libcuda.so.590.10.01"
	a = run(compat, 804, s)
	f = find(t, a, "compat-unsupported")
	if f.Severity != SeverityError {
		t.Errorf("804: severity %s", f.Severity)
	}
	mustContain(t, "verdict", a.Verdict, "804", "forward-compatibility libcuda 590.10.01 (/usr/local/cuda-13.0/compat) does not support this GPU")
	mustContain(t, "fix", f.Fix, "remove /usr/local/cuda-13.0/compat from LD_LIBRARY_PATH")

	// A driver libcuda of another version, renamed libcuda.so.1 and baked
	// into a container image: only its contents tell; the image is the fix.
	s = h200()
	s.Container.Runtime = "docker"
	img := "/opt/app/lib/libcuda.so.1"
	s.Libraries = []snapshot.LibraryFile{{PID: 5, Path: img, Resolved: img, Version: "550.54.14", VersionFrom: "contents", LdCache: true, LdConf: "/etc/ld.so.conf.d/app.conf"}}
	a = run(img, 803, s)
	f = find(t, a, "version-mismatch")
	mustContain(t, "verdict", a.Verdict, "libcuda 550.54.14 was loaded from /opt/app/lib")
	mustContain(t, "fix", f.Fix, "image ships its own driver libraries")
	mustContain(t, "detail", detail(f), "/etc/ld.so.conf.d/app.conf lists /opt/app/lib")

	// The host's libraries mounted into the container, newer than the
	// module: the host was upgraded without a reboot.
	s.Libraries[0].Mount = &snapshot.Mount{MountPoint: "/opt/app/lib", FSType: "ext4", Source: "/dev/sda1", Root: "/usr/lib/x86_64-linux-gnu", Bind: true}
	f = find(t, run(img, 803, s), "version-mismatch")
	mustContain(t, "fix", f.Fix, "mounted at /opt/app/lib", "Reboot the host")

	// The toolkit's stub copied to libcuda.so.1 outside any stubs
	// directory: the contents say stub, cuInit's 34 is explained.
	s = h200()
	s.Libraries = []snapshot.LibraryFile{{PID: 5, Path: img, Resolved: img, Stub: true, Size: 70368}}
	a = run(img, 34, s)
	if f := find(t, a, "libcuda-stub"); f.Severity != SeverityError {
		t.Errorf("stub: severity %s", f.Severity)
	}
	mustContain(t, "verdict", a.Verdict, "34", "stub")
	f = find(t, a, "libcuda-stub")
	mustContain(t, "detail", detail(f), "Its contents say so, not its name: 70368 bytes")
	s.Env = map[string]string{"LD_LIBRARY_PATH": "/opt/app/lib"}
	mustContain(t, "fix", find(t, run(img, 34, s), "libcuda-stub").Fix, "remove /opt/app/lib from LD_LIBRARY_PATH")
	// Without the read (an old report, a read that failed): by path only.
	s.Libraries = nil
	if has(run(img, 34, s), "libcuda-stub") {
		t.Error("stub by contents without contents")
	}
}
