package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/fakelib"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/tracer"
)

// fakeLib builds testdata/fakelib: a stand-in libcuda.so.1 and
// libnvidia-ml.so.1, and an app that dlopens them.
func fakeLib(t *testing.T) string { return fakelib.Build(t) }

// libTarget runs the fake app through env with the library found on
// LD_LIBRARY_PATH, as a CUDA program finds libcuda.
func libTarget(dir string, extra ...string) []string {
	return append([]string{"env", "LD_LIBRARY_PATH=" + dir, filepath.Join(dir, "app")}, extra...)
}

func apiEvents(tr traceRun, fn string) []tracer.Event {
	return eventsWhere(tr, func(e *tracer.Event) bool { return e.Kind == tracer.KindAPI && e.Func == fn })
}

// eventsWhere are the report's events that match.
func eventsWhere(tr traceRun, match func(*tracer.Event) bool) []tracer.Event {
	var out []tracer.Event
	for i := range tr.rep.Events {
		if match(&tr.rep.Events[i]) {
			out = append(out, tr.rep.Events[i])
		}
	}
	return out
}

// cuInit's own return code reaches the headline under both backends: the
// ptrace backend loads the same uprobes where it may (root here).
func TestCUDAReturnCodeDenyUVM(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			tr := traceIn(t, denyUVM(), backend, nil, libTarget(dir)...)
			if !strings.Contains(tr.stdout, "cuInit 999") {
				t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
			}
			tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
			tr.requireFinding(t, "cgroup2-denied", "error")
			requireCUDAFailed(t, tr, 999, filepath.Join(dir, "libcuda.so.1"))
			v := tr.rep.Analysis.Verdict
			if !strings.HasPrefix(v, "cuInit returned 999 (CUDA_ERROR_UNKNOWN) in app[") || !strings.Contains(v, "cgroup v2 device program") {
				t.Errorf("verdict %q", v)
			}
			if c := tr.rep.Analysis.CUDA; c == nil || c.Status != "failed" || c.Code != 999 {
				t.Errorf("analysis.cuda %+v", c)
			}
			if !tr.rep.Trace.APIReturns || len(tr.rep.Trace.APILibraries) == 0 {
				t.Errorf("trace api_returns %v libraries %v", tr.rep.Trace.APIReturns, tr.rep.Trace.APILibraries)
			}
		})
	}
}

// requireCUDAFailed: exactly one cuInit return, with code from lib, and it
// comes after the failed open that caused it (one order under either
// backend, by Seq).
func requireCUDAFailed(t *testing.T, tr traceRun, code int64, lib string) {
	t.Helper()
	got := apiEvents(tr, "cuInit")
	if len(got) != 1 || got[0].Ret != code || got[0].Path != lib {
		t.Fatalf("cuInit events %+v (stdout %q)", got, tr.stdout)
	}
	var lastSeq uint64
	for _, e := range tr.rep.Events {
		if e.Seq <= lastSeq {
			t.Fatalf("event seq %d after %d", e.Seq, lastSeq)
		}
		lastSeq = e.Seq
		if e.Kind == tracer.KindOpen && e.Path == "/dev/nvidia-uvm" && e.Seq > got[0].Seq {
			t.Errorf("open of /dev/nvidia-uvm (seq %d) after cuInit returned (seq %d)", e.Seq, got[0].Seq)
		}
	}
}

// Healthy: success is said as success, with the device count, and the
// probes leave nothing attached.
func TestCUDAReturnCodeHealthy(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	env := standIn()
	tr := traceIn(t, env, "ebpf", nil, append([]string{"env", "FAKELIB_NVML=1"}, libTarget(dir)...)...)
	if !strings.Contains(tr.stdout, "cuInit 0") || !strings.Contains(tr.stdout, "nvmlInit_v2 0") {
		t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
	}
	want := "cuInit succeeded in app["
	if v := tr.rep.Analysis.Verdict; !strings.HasPrefix(v, want) || !strings.Contains(v, "found 1 GPU(s); no NVIDIA device call failed.") {
		t.Errorf("verdict %q", v)
	}
	if got := apiEvents(tr, "nvmlInit_v2"); len(got) != 1 || got[0].Ret != 0 {
		t.Errorf("nvmlInit_v2 events %+v", got)
	}
	if got := apiEvents(tr, "cuDeviceGetCount"); len(got) != 1 || got[0].Out == nil || *got[0].Out != 1 {
		t.Errorf("cuDeviceGetCount events %+v", got)
	}
}

// A libcuda dlopen'ed by absolute path from a directory no search path
// names is probed at its open, its opener held meanwhile (by the kernel
// under eBPF, stopped at the open's exit under ptrace): its cuInit is
// still seen.
func TestCUDALibraryOpenedFromElsewhere(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	other := filepath.Join(t.TempDir(), "vendor")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(other, "libcuda.so.1")
	if err := os.WriteFile(lib, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Dir(other), 0o755)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			tr := traceIn(t, denyUVM(), backend, nil, filepath.Join(dir, "app"), lib)
			requireCUDAFailed(t, tr, 999, lib)
		})
	}
}

// A seccomp filter that refuses every ioctl: the call never enters the
// kernel (eBPF) or never reaches the tracer's own filter (ptrace), yet both
// backends record it and name the filter.
func TestSeccompRefusedIoctl(t *testing.T) {
	privtest.RequireRoot(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			env := standIn()
			env.SeccompDeny = []string{"ioctl"}
			env.FaultsOnTarget = true
			tr := traceIn(t, env, backend, nil, fakecuda(env)...)
			if !strings.Contains(tr.stdout, "cuInit 999") {
				t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
			}
			f := tr.rep.Analysis.Failing
			if f == nil || f.Kind != tracer.KindIoctl || !f.NoEntry || f.Errno() != unix.EPERM {
				t.Fatalf("failing %+v\nverdict %q", f, tr.rep.Analysis.Verdict)
			}
			fd := tr.requireFinding(t, "seccomp-denied", "error")
			d := strings.Join(fd.Detail, "\n")
			// fakecuda exits before the snapshot can read its status, so
			// the filter count is "unknown" here, never cudatrace's own.
			if !strings.Contains(d, "never reached the kernel") || strings.Contains(d, "shows no filter") {
				t.Errorf("detail %q", d)
			}
			if strings.Contains(tr.rep.Analysis.Verdict, "No NVIDIA device call failed") {
				t.Errorf("verdict %q", tr.rep.Analysis.Verdict)
			}
		})
	}
}

// An fd limit too low for the device nodes: the EMFILE open is the
// failing call, with the limit and the fds in use.
func TestFDLimitTooLow(t *testing.T) {
	privtest.RequireRoot(t)
	env := standIn()
	env.NoFile = 6
	env.FaultsOnTarget = true
	tr := traceIn(t, env, "ebpf", nil, fakecuda(env)...)
	f := tr.rep.Analysis.Failing
	if f == nil || f.Errno() != unix.EMFILE {
		t.Fatalf("failing %+v\nverdict %q\nstdout %q", f, tr.rep.Analysis.Verdict, tr.stdout)
	}
	tr.requireFinding(t, "fd-limit", "error")
}

// KILL_THREAD on a thread that is not its process's last: the kernel ends
// it inside the ioctl (no syscall exit, no rollback) and the process goes
// on. Both backends name the call that never returned and the filter; the
// app's main thread sees its cuInit thread gone and exits 1.
func TestSeccompKillsThreadOfMany(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	// worker: a second thread calls cuInit; main: the leader does, as
	// python's main thread does, and becomes a zombie its thread outlives.
	for _, caller := range []string{"worker", "main"} {
		for _, backend := range backends {
			t.Run(caller+"/"+backend, func(t *testing.T) {
				env := standIn()
				env.SeccompDeny = []string{"ioctl:nvidia"}
				env.SeccompAction = "kill-thread"
				env.FaultsOnTarget = true
				tr := traceIn(t, env, backend, nil, append([]string{"env", "FAKELIB_IOCTL=1", "FAKELIB_THREAD=" + caller}, libTarget(dir)...)...)
				if !strings.Contains(tr.stdout, "cuInit thread died") {
					t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
				}
				f := tr.rep.Analysis.Failing
				if f == nil || f.Kind != tracer.KindIoctl || !f.NoReturn || f.Request != 0xc00846d6 || (f.TID == f.PID) != (caller == "main") {
					t.Fatalf("failing %+v, want the %s thread's ioctl, never returned\nverdict %q", f, caller, tr.rep.Analysis.Verdict)
				}
				tr.requireFinding(t, "seccomp-killed", "error")
				v := tr.rep.Analysis.Verdict
				if !strings.Contains(v, "never returned") || !strings.Contains(v, "killed the thread") {
					t.Errorf("verdict %q", v)
				}
			})
		}
	}
}

// An address-space limit (ulimit -v) under which cuInit's virtual
// reservation fails: every device call succeeded and cuInit returned 2.
// RLIMIT_AS is named, read at the failure or, where the target exited
// first, at its exec. Under ptrace only: the tracee is stopped while its
// exec is read. Under eBPF a target that exits at once can be gone before
// either read (the limit is not yet recorded in the kernel at the
// failing return, as the cgroup id is: issue 27).
func TestAddressSpaceLimit(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			tr := limitTrace(t, dir, backend, "cuInit 2", func(env *scenario.Env) { env.AS = 1 << 30 })
			tr.requireFinding(t, "rlimit-as", "error")
			if v := tr.rep.Analysis.Verdict; !strings.Contains(v, "returned 2") || !strings.Contains(v, "RLIMIT_AS is 1 GiB") {
				t.Errorf("verdict %q", v)
			}
			// The limits as the kernel held them when cuInit returned,
			// whatever /proc still showed (both backends load the uprobes).
			if calls := apiEvents(tr, "cuInit"); len(calls) != 1 || calls[0].Limits == nil || calls[0].Limits.AS[0] != 1<<30 {
				t.Errorf("cuInit's event %+v, want RLIMIT_AS 1 GiB recorded at its return", calls)
			} else if !strings.Contains(tr.findingText("rlimit-as"), "read in the kernel as cuInit returned") {
				t.Errorf("rlimit-as:\n%s", tr.findingText("rlimit-as"))
			}
			if finding(tr.rep, "cuda-failed-unexplained") != nil {
				t.Errorf("findings %v: the limit explains it", findingIDs(tr.rep))
			}
			// The reservation's failure itself: eBPF sees it at the
			// mmap's exit; ptrace traces no mmap.
			mmaps := limitEvents(tr)
			if backend == "ptrace" {
				if len(mmaps) != 0 {
					t.Errorf("ptrace sent limit failures %+v", mmaps)
				}
				return
			}
			if len(mmaps) != 1 || mmaps[0].Syscall != "mmap" || mmaps[0].ErrnoName() != "ENOMEM" {
				t.Fatalf("limit failures %+v, want the mmap's ENOMEM", mmaps)
			}
			if text := tr.findingText("rlimit-as"); !strings.Contains(text, "`mmap()` by app[") || !strings.Contains(text, "→ ENOMEM") {
				t.Errorf("rlimit-as does not name the mmap:\n%s", text)
			}
		})
	}
}

// limitTrace runs the fake app with the stand-in nodes under the limit set
// puts on it (with vars in its environment), and checks it printed want.
func limitTrace(t *testing.T, dir, backend, want string, set func(*scenario.Env), vars ...string) traceRun {
	t.Helper()
	env := standIn()
	set(env)
	env.FaultsOnTarget = true
	argv := libTarget(dir)
	if len(vars) > 0 {
		argv = append(append([]string{"env"}, vars...), argv...)
	}
	tr := traceIn(t, env, backend, nil, argv...)
	if !strings.Contains(tr.stdout, want) {
		t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
	}
	return tr
}

// limitEvents are the report's calls a resource limit failed.
func limitEvents(tr traceRun) []tracer.Event {
	return eventsWhere(tr, func(e *tracer.Event) bool { return e.Kind == tracer.KindLimit })
}

// A process at its fd limit: libcuda's eventfd fails EMFILE and cuInit
// returns 304. Both backends trace the eventfd (eBPF tests its result in
// the kernel, ptrace stops on the fd calls), and fd-limit names it, not
// inferred.
func TestEventfdAtFDLimit(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			tr := limitTrace(t, dir, backend, "cuInit 304", func(env *scenario.Env) { env.NoFile = 64 }, "FAKELIB_EVENTFD=1")
			calls := limitEvents(tr)
			tr.requireFinding(t, "fd-limit", "error")
			f := finding(tr.rep, "fd-limit")
			if len(calls) != 1 || calls[0].Syscall != "eventfd2" || calls[0].ErrnoName() != "EMFILE" {
				t.Fatalf("limit failures %+v, want the eventfd2's EMFILE", calls)
			}
			if f.Inferred || !strings.Contains(f.Summary, "eventfd2 failed with EMFILE") || !slices.Contains(f.Events, calls[0].Seq) {
				t.Errorf("fd-limit %+v, want the eventfd2 named, not inferred", f)
			}
			if text := tr.findingText("fd-limit"); !strings.Contains(text, "`eventfd2()` by app[") {
				t.Errorf("fd-limit:\n%s", text)
			}
		})
	}
}

// CUDA_VISIBLE_DEVICES=-1 hides every GPU: cuInit returns 100 and the
// process exits at once. The environment that explains it is the one the
// process ran with, copied in the kernel at cuInit's failing return (both
// backends: the uprobes are the same), however soon it exits.
func TestVisibleDevicesHideAll(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			for range 3 {
				tr := traceIn(t, standIn(), backend, nil, append([]string{"env", "CUDA_VISIBLE_DEVICES=-1"}, libTarget(dir)...)...)
				if !strings.Contains(tr.stdout, "cuInit 100") {
					t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
				}
				if v := tr.rep.Snapshot.Env["CUDA_VISIBLE_DEVICES"]; v != "-1" {
					t.Errorf("snapshot env CUDA_VISIBLE_DEVICES = %q (unavailable: %q), want -1", v, tr.rep.Snapshot.Unavailable)
				}
				tr.requireFinding(t, "cuda-visible-devices-hides-all", "error")
			}
		})
	}
}

// explain on a real strace log of the same process at its fd limit: the
// log has no CUDA return code, but strace saw the eventfd2 fail EMFILE
// after the driver's nodes were opened, and the process then exited 1. The
// headline names that call, never "no NVIDIA device call failed".
func TestExplainEventfdAtFDLimit(t *testing.T) {
	privtest.RequireRoot(t)
	strace, err := exec.LookPath("strace")
	if err != nil {
		privtest.Skip(t, "needs strace: "+err.Error())
	}
	needBinaries(t)
	dir := fakeLib(t)
	env := standIn()
	env.NoFile = 64
	env.FaultsOnTarget = true
	env.Prepare(t)
	log := filepath.Join(t.TempDir(), "app.strace")
	argv := append([]string{strace, "-f", "-o", log, "--", "env", "FAKELIB_EVENTFD=1", "FAKELIB_STRICT=1"}, libTarget(dir)...)
	if r := runBinary(t, env.Command(t, argv...)); !strings.Contains(r.stdout, "cuInit 304") {
		t.Fatalf("target printed %q (exit %d), stderr %s", r.stdout, r.code, r.stderr)
	}
	r := runCLI(t, "explain", log, "--format", "json")
	rep := loadReportText(t, r.stdout)
	f := finding(rep, "fd-limit")
	if f == nil || f.Severity != "error" || !strings.Contains(f.Summary, "eventfd2 failed with EMFILE") {
		t.Fatalf("fd-limit %+v, want the eventfd2's EMFILE; verdict %q", f, rep.Analysis.Verdict)
	}
	if !f.Inferred {
		t.Errorf("fd-limit %+v: without CUDA's return code it is inferred", f)
	}
	if v := rep.Analysis.Verdict; !strings.Contains(v, "eventfd2 failed with EMFILE") || strings.Contains(v, "No NVIDIA device call failed") {
		t.Errorf("verdict %q", v)
	}
}

// A seccomp filter that kills on NVIDIA's ioctls: the process dies of
// SIGSYS inside cuInit, in the ioctl, which never returns. Both backends
// name that call (the thread's last, never returned), read no result from
// it, and say it was the filter; for each action that kills.
func TestSeccompKillsIoctl(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, action := range []string{"kill-process", "kill-thread", "trap"} {
		for _, backend := range []string{"ebpf", "ptrace"} {
			t.Run(action+"/"+backend, func(t *testing.T) {
				env := standIn()
				env.SeccompDeny = []string{"ioctl:nvidia"}
				env.SeccompAction = action
				env.FaultsOnTarget = true
				tr := traceIn(t, env, backend, nil, append([]string{"env", "FAKELIB_IOCTL=1"}, libTarget(dir)...)...)
				if x := tr.rep.Target.Exit; x == nil || x.Signal != int(unix.SIGSYS) {
					t.Fatalf("target exit %+v, want SIGSYS; stdout %q stderr %s", x, tr.stdout, tr.stderr)
				}
				f := tr.rep.Analysis.Failing
				if f == nil || f.Kind != tracer.KindIoctl || !f.NoReturn || f.Request != 0xc00846d6 {
					for _, e := range tr.rep.Events {
						if e.Kind == tracer.KindIoctl || e.Kind == tracer.KindExit {
							t.Logf("event %+v", e)
						}
					}
					t.Fatalf("failing %+v\nverdict %q", f, tr.rep.Analysis.Verdict)
				}
				if f.Ret != 0 || f.Arg != nil || f.Status != nil {
					t.Errorf("a call that never returned carries a result: ret %d arg %x status %v", f.Ret, f.Arg, f.Status)
				}
				fd := tr.requireFinding(t, "seccomp-killed", "error")
				text := tr.findingText("seccomp-killed")
				for _, w := range []string{"SIGSYS", "never returned", "seccomp", "SystemCallFilter"} {
					if !strings.Contains(text, w) {
						t.Errorf("seccomp-killed lacks %q:\n%s", w, text)
					}
				}
				_ = fd
				v := tr.rep.Analysis.Verdict
				if !strings.Contains(v, "SIGSYS") || !strings.Contains(v, "seccomp") ||
					strings.Contains(v, "No NVIDIA device call failed") || strings.Contains(v, "→ 16") || strings.Contains(v, "NV_OK") {
					t.Errorf("verdict %q", v)
				}
			})
		}
	}
}

// A child forked after its parent initialised CUDA gets 3
// (CUDA_ERROR_NOT_INITIALIZED) without touching a device: both backends
// name the parent that initialised CUDA and the fix, and no GSP hint.
func TestForkAfterCUDAInit(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, backend := range []string{"ebpf", "ptrace"} {
		t.Run(backend, func(t *testing.T) {
			tr := traceIn(t, standIn(), backend, nil, append([]string{"env", "FAKELIB_FORK=1"}, libTarget(dir)...)...)
			if !strings.Contains(tr.stdout, "cuInit 0") || !strings.Contains(tr.stdout, "child cuDeviceGetCount 3") {
				t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
			}
			c := tr.rep.Analysis.CUDA
			if c == nil || c.Status != "failed" || c.Code != 3 || c.Func != "cuDeviceGetCount" {
				t.Fatalf("analysis.cuda %+v", c)
			}
			tr.requireFinding(t, "cuda-fork-after-init", "error")
			text := tr.findingText("cuda-fork-after-init")
			for _, w := range []string{"fork", "spawn", "forkserver", "cuInit returned 0"} {
				if !strings.Contains(text, w) {
					t.Errorf("finding lacks %q:\n%s", w, text)
				}
			}
			v := tr.rep.Analysis.Verdict
			if !strings.Contains(v, "returned 3 (CUDA_ERROR_NOT_INITIALIZED)") || !strings.Contains(v, "fork") {
				t.Errorf("verdict %q", v)
			}
			if all := tr.stderr; strings.Contains(all, "GSP") || strings.Contains(all, "RmInitAdapter") {
				t.Errorf("report gives the GSP hint for a fork:\n%s", all)
			}
		})
	}
}

// libcuda was loaded, no probed entry point returned, and the program
// failed: the headline says what is known (which libcuda, the exit) and
// what is not (CUDA's result), never that nothing failed; the report says
// which LD_LIBRARY_PATH entry chose the library.
func TestLibcudaLoadedResultUnknown(t *testing.T) {
	privtest.RequireRoot(t)
	dir := fakeLib(t)
	for _, backend := range []string{"ebpf", "ptrace"} {
		t.Run(backend, func(t *testing.T) {
			tr := traceIn(t, standIn(), backend, nil, append([]string{"env", "FAKELIB_UNPROBED=1", "FAKELIB_DRIVER_RC=34"}, libTarget(dir)...)...)
			if !strings.Contains(tr.stdout, "cuDriverGetVersion 34") {
				t.Fatalf("target printed %q, stderr %s", tr.stdout, tr.stderr)
			}
			v := tr.rep.Analysis.Verdict
			lib := filepath.Join(dir, "libcuda.so.1")
			for _, w := range []string{"exited 1", lib, "not known"} {
				if !strings.Contains(v, w) {
					t.Errorf("verdict lacks %q: %q", w, v)
				}
			}
			if strings.Contains(v, "No NVIDIA device call failed") {
				t.Errorf("verdict %q", v)
			}
			tr.requireFinding(t, "libcuda-loaded", "info")
			// Its version, read from its contents at the open (the
			// stand-in's banner; its name says none).
			if text := tr.findingText("libcuda-loaded"); !strings.Contains(text, "LD_LIBRARY_PATH, entry 1 ("+dir+")") || !strings.Contains(text, "575.57.08 (from its contents)") {
				t.Errorf("libcuda-loaded:\n%s", text)
			}
			if libs := tr.rep.Snapshot.Libraries; len(libs) == 0 || libs[0].Path != lib || libs[0].Version != "575.57.08" || libs[0].VersionFrom != "contents" || libs[0].Stub {
				t.Errorf("snapshot libraries %+v", libs)
			}
		})
	}
}

// Another driver's node at /dev/nvidia-uvm (c 1:3, /dev/null's, as a bind
// mount leaves it) while /proc/devices gives major 1 to no NVIDIA driver:
// under both backends the node's major is the error and the headline, and
// the HMM hint does not appear.
func TestForeignNodeAtUVMPath(t *testing.T) {
	privtest.RequireRoot(t)
	for _, backend := range []string{"ebpf", "ptrace"} {
		t.Run(backend, func(t *testing.T) {
			env := &scenario.Env{
				Nodes:       withNode(scenario.StandInNodes(), scenario.Node{Path: "nvidia-uvm", Major: 1, Minor: 3}),
				ProcDevices: strings.NewReplacer("  1 nvidia\n", "", "  1 nvidiactl\n", "").Replace(scenario.StandInProcDevices),
			}
			tr := traceIn(t, env, backend, nil, fakecuda(env)...)
			f := tr.rep.Analysis.Failing
			if f == nil || f.Kind != tracer.KindIoctl || f.Errno() != unix.ENOTTY {
				t.Fatalf("failing %+v\nverdict %q\nstdout %q", f, tr.rep.Analysis.Verdict, tr.stdout)
			}
			if got := tr.rep.Analysis.Findings[0]; got.ID != "wrong-driver" || got.Severity != "error" {
				t.Errorf("first finding %s (%s); findings %v", got.ID, got.Severity, findingIDs(tr.rep))
			}
			if v := tr.rep.Analysis.Verdict; !strings.Contains(v, "is a node of") || !strings.Contains(v, "major 1") {
				t.Errorf("verdict %q", v)
			}
			if finding(tr.rep, "uvm-hmm") != nil {
				t.Errorf("HMM hint for another driver's node: %v", findingIDs(tr.rep))
			}
		})
	}
}
