package analysis_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/report"
)

// gpuCase is what a real-GPU recording in testdata/gpu must still produce
// when re-analysed with the current rules (testdata/gpu/README.md says how
// each was made).
type gpuCase struct {
	state    string
	failPath string // "" when no call may fail, or the failing call is an ioctl; "*SUFFIX": a path ending so
	failKind string // "ioctl" when the failing call is an ioctl
	errno    string
	ids      []string // findings that must be present
	mention  []string // strings the findings' text must contain
	exit     int      // the target's own exit status
	// cuda is CUDA's own verdict when the backend traced it (eBPF):
	// "ok", "not-called", or "failed N"; "" for ptrace.
	cuda string
	// verdict must appear in the headline.
	verdict string
}

var gpuCases = []gpuCase{
	{state: "1-healthy-root-cuinit", ids: []string{"calls-ok"}, cuda: "ok", verdict: "cuInit succeeded"},
	{state: "1-healthy-root-torch", ids: []string{"calls-ok"}, cuda: "ok", verdict: "found 1 GPU(s); no NVIDIA device call failed"},
	{state: "1-healthy-root-torch-nofold", ids: []string{"calls-ok"}, cuda: "ok"},
	{state: "1-healthy-nobody-cuinit", ids: []string{"calls-ok"}, cuda: "ok"},
	{state: "1-healthy-nobody-torch", ids: []string{"calls-ok"}, cuda: "ok"},
	{state: "2-deny-uvm-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied", "calls-ok"}, mention: []string{"c 238:* rwm"}, cuda: "failed 999", verdict: "cuInit returned 999 (CUDA_ERROR_UNKNOWN)"},
	{state: "2-deny-uvm-torch", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 238:* rwm"}, exit: 1, cuda: "failed 999"},
	{state: "3-stale-allow-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-stale-major"}, mention: []string{"504", "238"}, cuda: "failed 999"},
	{state: "3-stale-allow-torch", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-stale-major"}, mention: []string{"504", "238"}, exit: 1, cuda: "failed 999"},
	{state: "4-deny-195-smi", failPath: "/dev/nvidiactl", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 195:* rwm"}, exit: 255, cuda: "failed 999", verdict: "nvmlInitWithFlags returned 999 (NVML_ERROR_UNKNOWN)"},
	{state: "4-deny-195-cuinit", failPath: "/dev/nvidiactl", errno: "EPERM", ids: []string{"cgroup2-denied"}, cuda: "failed 100"},
	{state: "5-uvm-missing-nobody-cuinit", failPath: "/dev/nvidia-uvm", errno: "ENOENT", ids: []string{"node-missing"}, mention: []string{"nvidia-modprobe -u -c=0"}, cuda: "failed 999"},
	{state: "5-uvm-missing-nobody-torch", failPath: "/dev/nvidia-uvm", errno: "ENOENT", ids: []string{"node-missing"}, exit: 1, cuda: "failed 999"},
	{state: "5-uvm-missing-root-cuinit", ids: []string{"node-repaired"}, cuda: "ok", verdict: "libcuda recreated a device node"},
	{state: "6-uvm-stale-nobody-cuinit", failPath: "/dev/nvidia-uvm", errno: "ENXIO", ids: []string{"node-stale-major"}, mention: []string{"504", "238"}, cuda: "failed 999"},
	{state: "6-uvm-stale-nobody-torch", failPath: "/dev/nvidia-uvm", errno: "ENXIO", ids: []string{"node-stale-major"}, exit: 1, cuda: "failed 999"},
	{state: "7-nodev-cuinit", failPath: "/dev/nvidiactl", errno: "EACCES", ids: []string{"nodev"}, cuda: "failed 100"},
	// torch loaded libcuda and stopped before any probed entry point returned.
	{state: "7-nodev-torch", ids: []string{"nodev"}, exit: 1, cuda: "not-called"},
	{state: "8-ptrace-deny-uvm-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 238:* rwm"}},
	{state: "8-ptrace-deny-uvm-torch", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, exit: 1},
	{state: "8-ptrace-uvm-missing-nobody-cuinit", failPath: "/dev/nvidia-uvm", errno: "ENOENT", ids: []string{"node-missing"}},
	// ptrace cannot see CUDA's return code: the headline must say so.
	{state: "8-ptrace-healthy-torch", ids: []string{"calls-ok"}, verdict: "CUDA's own return code is unknown"},
	// A seccomp filter refusing every ioctl (also answered by a user-space
	// supervisor): the refused NVIDIA ioctl, under both backends.
	{state: "9-seccomp-ioctl-cuinit", failKind: "ioctl", errno: "EPERM", ids: []string{"seccomp-denied"}, cuda: "failed 100", verdict: "seccomp"},
	{state: "9-seccomp-ioctl-notify-cuinit", failKind: "ioctl", errno: "EPERM", ids: []string{"seccomp-denied"}, cuda: "failed 100"},
	{state: "9-seccomp-ioctl-cuinit-ptrace", failKind: "ioctl", errno: "EPERM", ids: []string{"seccomp-denied"}},
	{state: "9-seccomp-ioctl-notify-cuinit-ptrace", failKind: "ioctl", errno: "EPERM", ids: []string{"seccomp-denied"}},
	// RLIMIT_NOFILE too low for libcuda (the largest failing limit of the
	// host's sweep, nofile-sweep.txt).
	{state: "10-nofile-cuinit", failPath: "/dev/nvidia0", errno: "EMFILE", ids: []string{"fd-limit"}, cuda: "failed 100"},
	{state: "10-nofile-cuinit-ptrace", failPath: "/dev/nvidia0", errno: "EMFILE", ids: []string{"fd-limit"}},
	// CUDA_VISIBLE_DEVICES naming no GPU: libcuda still opens /dev/nvidia0,
	// so only CUDA's own 100 tells it (the ptrace runs say it is unknown).
	{state: "11-cvd-invalid-cuinit", ids: []string{"cuda-visible-devices-hides-all"}, cuda: "failed 100", verdict: "CUDA_VISIBLE_DEVICES"},
	{state: "11-cvd-none-cuinit", ids: []string{"cuda-visible-devices-hides-all"}, cuda: "failed 100", verdict: "CUDA_VISIBLE_DEVICES"},
	{state: "11-cvd-invalid-cuinit-ptrace", verdict: "CUDA's own return code is unknown"},
	{state: "11-cvd-none-cuinit-ptrace", verdict: "CUDA's own return code is unknown"},
	// The final build: ptrace with the uprobes (root), CUDA's code as under eBPF.
	{state: "13-ptrace-api-deny-uvm-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 238:* rwm"}, cuda: "failed 999", verdict: "cuInit returned 999 (CUDA_ERROR_UNKNOWN)"},
	{state: "13-ptrace-api-healthy-torch", ids: []string{"calls-ok"}, cuda: "ok", verdict: "found 1 GPU(s)"},
	// Issue 27 class 8 (session 11): which libcuda, by its contents. The
	// toolkit's compat libcuda (580.95.05) against module 580.159.04, first
	// on LD_LIBRARY_PATH and copied to a neutral directory as
	// libcuda.so.1; the toolkit's real stub copied likewise.
	{state: "19-compat-first-cuinit", ids: []string{"version-mismatch", "libcuda-compat"}, mention: []string{"remove /usr/local/cuda-13.0/compat from LD_LIBRARY_PATH", "580.95.05 (from its contents)"}, cuda: "failed 803", verdict: "libcuda 580.95.05 (a forward-compatibility copy) was loaded from /usr/local/cuda-13.0/compat, and the kernel module is 580.159.04"},
	{state: "19-compat-first-cuinit-ptrace", ids: []string{"version-mismatch"}, cuda: "failed 803", verdict: "libcuda 580.95.05 (a forward-compatibility copy)"},
	{state: "19-compat-first-torch", ids: []string{"version-mismatch"}, exit: 1, cuda: "failed 803", verdict: "libcuda 580.95.05"},
	{state: "19-compat-first-torch-ptrace", ids: []string{"version-mismatch"}, exit: 1, cuda: "failed 803", verdict: "libcuda 580.95.05"},
	// The compat directory chosen through an ld.so.conf.d file: the file
	// is named, and the fix is to take the directory out of it.
	{state: "19-compat-ldconfig-cuinit", ids: []string{"version-mismatch"}, mention: []string{"/etc/ld.so.conf.d/000-cudatrace-acceptance-compat.conf lists /usr/local/cuda-13.0/compat", "remove /usr/local/cuda-13.0/compat from /etc/ld.so.conf.d/000-cudatrace-acceptance-compat.conf and run `ldconfig`"}, cuda: "failed 803", verdict: "libcuda 580.95.05 (a forward-compatibility copy) was loaded from /usr/local/cuda-13.0/compat"},
	{state: "19-compat-ldconfig-cuinit-ptrace", ids: []string{"version-mismatch"}, mention: []string{"000-cudatrace-acceptance-compat.conf lists"}, cuda: "failed 803", verdict: "forward-compatibility copy"},
	{state: "19-compat-renamed-cuinit", ids: []string{"version-mismatch", "libcuda-loaded"}, mention: []string{"580.95.05 (from its contents)"}, cuda: "failed 803", verdict: "libcuda 580.95.05 was loaded from /tmp/"},
	{state: "19-compat-renamed-cuinit-ptrace", ids: []string{"version-mismatch"}, cuda: "failed 803", verdict: "libcuda 580.95.05 was loaded from /tmp/"},
	{failPath: "*/lib/libcuda.so.1", state: "19-real-stub-renamed-cuinit", ids: []string{"libcuda-stub"}, mention: []string{"Its contents say so, not its name: 70368 bytes"}, cuda: "failed 34", verdict: "stub libcuda"},
	{failPath: "*/lib/libcuda.so.1", state: "19-real-stub-renamed-cuinit-ptrace", ids: []string{"libcuda-stub"}, cuda: "failed 34", verdict: "stub libcuda"},
	{failPath: "*/lib/libcuda.so.1", state: "19-real-stub-renamed-torch", ids: []string{"libcuda-stub"}, exit: 1, cuda: "not-called", verdict: "stub libcuda"},
	{failPath: "*/lib/libcuda.so.1", state: "19-real-stub-renamed-torch-ptrace", ids: []string{"libcuda-stub"}, exit: 1, cuda: "not-called", verdict: "stub libcuda"},
}

// TestGPURecordings replays the reports recorded on a real H200 through the
// current analysis, so every change is checked against real libcuda.
func TestGPURecordings(t *testing.T) {
	dir := filepath.Join("..", "testdata", "gpu")
	for _, c := range gpuCases {
		t.Run(c.state, func(t *testing.T) {
			rep, err := report.LoadFile(filepath.Join(dir, c.state, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			a := analysis.AnalyzeFacts(rep.Events, rep.Snapshot, rep.Facts())
			switch {
			case c.cuda == "" && a.CUDA != nil:
				t.Errorf("CUDA verdict %+v, want none", a.CUDA)
			case (c.cuda == "ok" || c.cuda == "not-called") && (a.CUDA == nil || a.CUDA.Status != c.cuda):
				t.Errorf("CUDA verdict %+v, want %s", a.CUDA, c.cuda)
			case strings.HasPrefix(c.cuda, "failed ") && (a.CUDA == nil || "failed "+strconv.Itoa(int(a.CUDA.Code)) != c.cuda):
				t.Errorf("CUDA verdict %+v, want %s", a.CUDA, c.cuda)
			}
			if !strings.Contains(a.Verdict, c.verdict) || strings.Contains(a.Verdict, "No NVIDIA device call failed.") && a.CUDA != nil && a.CUDA.Status == "failed" {
				t.Errorf("verdict %q, want it to say %q", a.Verdict, c.verdict)
			}
			if c.failKind == "ioctl" {
				if a.Failing == nil || a.Failing.Kind != "ioctl" || a.Failing.ErrnoName() != c.errno {
					t.Fatalf("failing call %v, want an ioctl → %s; verdict %q", a.Failing, c.errno, a.Verdict)
				}
			} else if c.failPath == "" {
				if a.Failing != nil {
					t.Fatalf("healthy run pinpoints %s", nvdev.FormatCall(a.Failing))
				}
			} else {
				if a.Failing == nil {
					t.Fatalf("no failing call; verdict %q", a.Verdict)
				}
				pathOK := a.Failing.Path == c.failPath
				if suffix, ok := strings.CutPrefix(c.failPath, "*"); ok {
					pathOK = strings.HasSuffix(a.Failing.Path, suffix)
				}
				if !pathOK || a.Failing.ErrnoName() != c.errno {
					t.Fatalf("failing call %s → %s, want %s → %s", nvdev.FormatCall(a.Failing), a.Failing.ErrnoName(), c.failPath, c.errno)
				}
			}
			var text strings.Builder
			have := map[string]bool{}
			for _, f := range a.Findings {
				have[f.ID] = true
				text.WriteString(f.Summary + "\n" + strings.Join(f.Detail, "\n") + "\n" + f.Fix + "\n")
			}
			for _, id := range c.ids {
				if !have[id] {
					t.Errorf("finding %s missing; have %v", id, keys(have))
				}
			}
			for _, m := range c.mention {
				if !strings.Contains(text.String(), m) {
					t.Errorf("findings do not mention %q:\n%s", m, text.String())
				}
			}
			if rep.Trace.Dropped != 0 || !rep.Trace.Complete {
				t.Errorf("recording is incomplete: %d dropped", rep.Trace.Dropped)
			}
			if rep.Target.Exit == nil || rep.Target.Exit.Code != c.exit {
				t.Errorf("target exit = %+v, want %d", rep.Target.Exit, c.exit)
			}
			// cudatrace exited with the target's status, and the same state
			// run untraced ended the same way.
			for _, f := range []string{"rc", "untraced.rc"} {
				b, err := os.ReadFile(filepath.Join(dir, c.state, f))
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.TrimSpace(string(b)); got != strconv.Itoa(c.exit) {
					t.Errorf("%s = %s, want the target's status %d", f, got, c.exit)
				}
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
