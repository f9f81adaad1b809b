package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/report"
)

// envKernelLacks is set by the kernel matrix (scripts/test-kernels.sh) in a
// guest whose kernel is below the eBPF backend's minimum: the feature it
// lacks, words joined by '-' (a kernel parameter has no spaces).
const envKernelLacks = "CUDATRACE_TEST_KERNEL_LACKS"

// Below the minimum kernel, auto says in one line which feature is missing
// and traces with ptrace to the same verdict; --backend ebpf and watch
// refuse in that one line.
func TestBelowMinimumKernel(t *testing.T) {
	lacks := strings.ReplaceAll(os.Getenv(envKernelLacks), "-", " ")
	if lacks == "" {
		t.Skip("runs in the kernel matrix, on a kernel below the minimum (scripts/test-kernels.sh sets " + envKernelLacks + ")")
	}
	privtest.RequireRoot(t)
	needBinaries(t)
	// The report's own note on CUDA's return codes (the ptrace backend's
	// uprobes need the same feature) is not a line of cudatrace's.
	oneLine := func(t *testing.T, what, stderr string) {
		t.Helper()
		var named []string
		for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
			if strings.HasPrefix(l, "cudatrace") && strings.Contains(l, lacks) {
				named = append(named, l)
			}
		}
		if len(named) != 1 {
			t.Errorf("%s: %d lines name %q, want 1; stderr:\n%s", what, len(named), lacks, stderr)
		}
	}
	t.Run("auto", func(t *testing.T) {
		env := denyUVM()
		env.Prepare(t)
		out := filepath.Join(t.TempDir(), "report.json")
		r := runBinary(t, env.Command(t, append([]string{cudatraceBin, "--backend", "auto", "--proc-devices", env.ProcDevicesPath(), "-o", out, "--"}, fakecuda(env)...)...))
		oneLine(t, "auto", r.stderr)
		if !strings.Contains(r.stderr, "using ptrace") {
			t.Errorf("auto does not say it falls back to ptrace:\n%s", r.stderr)
		}
		rep, err := report.LoadFile(out)
		if err != nil {
			t.Fatalf("load report: %v\nexit %d, stderr:\n%s", err, r.code, r.stderr)
		}
		tr := traceRun{result: r, rep: rep, backend: "ptrace"}
		if rep.Trace.Backend != "ptrace" {
			t.Errorf("report names backend %q, want ptrace", rep.Trace.Backend)
		}
		commonChecks(t, tr)
		tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
	})
	for _, argv := range [][]string{{"--backend", "ebpf", "--", "/bin/true"}, {"watch", "--duration", "1s"}} {
		t.Run(argv[0], func(t *testing.T) {
			r := runBinary(t, exec.Command(cudatraceBin, argv...))
			if r.code == 0 {
				t.Errorf("%v: exit 0, want a failure", argv)
			}
			oneLine(t, argv[0], r.stderr)
		})
	}
}
