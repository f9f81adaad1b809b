package diagnose

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/report"
)

// The reports cudatrace watch kept on the H200 while scripts/gpu-watch.sh
// ran every broken state (testdata/gpu/watch), re-analysed with this
// build's rules. nvidia-smi[1536] exited before its snapshot and its job's
// cgroup program was gone when its policy was read: the run printed
// "refused with EPERM, not by the device cgroup", which was false; a
// policy read after the exit cannot clear a denial, so the verdict is
// inferred now.
func TestWatchH200Reports(t *testing.T) {
	want := map[string]struct{ cause, headline string }{
		"919-python3-cgroup2-denied.json":        {"cgroup2-denied", "cuInit returned 999 (CUDA_ERROR_UNKNOWN)"},
		"1536-nvidia-smi-eperm-unexplained.json": {"cgroup-denied-inferred", "nvmlInitWithFlags returned 999 (NVML_ERROR_UNKNOWN)"},
		"1636-nvidia-smi-cgroup2-denied.json":    {"cgroup2-denied", "nvmlInitWithFlags returned 999 (NVML_ERROR_UNKNOWN)"},
		"1806-python3-node-missing.json":         {"node-missing", "cuInit returned 999"},
		"2202-python3-node-stale-major.json":     {"node-stale-major", "cuInit returned 999"},
		"2501-python3-nodev.json":                {"nodev", "cuInit returned 100 (CUDA_ERROR_NO_DEVICE)"},
		"3333-rmprobe-version-mismatch.json":     {"version-mismatch", "An NVIDIA device call failed"}, // rmprobe is no CUDA program
		// Recorded under RLIMIT_NOFILE 6 (state 10-nofile): the limit explains it now.
		"3453-python3-cuda-failed-unexplained.json":        {"fd-limit", "cuInit returned 304 (CUDA_ERROR_OPERATING_SYSTEM)"},
		"3471-python3-fd-limit.json":                       {"fd-limit", "EMFILE"},
		"3593-python3-seccomp-denied.json":                 {"seccomp-denied", "cuInit returned 100"},
		"4016-python3-cuda-visible-devices-hides-all.json": {"cuda-visible-devices-hides-all", "CUDA_VISIBLE_DEVICES"},
	}
	dir := filepath.Join("..", "testdata", "gpu", "watch", "reports")
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(want) {
		t.Errorf("%d reports in %s, the table has %d", len(files), dir, len(want))
	}
	for _, f := range files {
		w, ok := want[f.Name()]
		if !ok {
			t.Errorf("%s: not in the table", f.Name())
			continue
		}
		rep, err := report.LoadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Errorf("%s: %v", f.Name(), err)
			continue
		}
		Reanalyse(rep)
		a := rep.Analysis
		primary := ""
		for _, fd := range a.Findings {
			if fd.Severity != analysis.SeverityInfo {
				primary = fd.ID
				break
			}
		}
		if primary != w.cause || !strings.Contains(a.Verdict, w.headline) {
			t.Errorf("%s: primary finding %q, verdict %q; want %q and a verdict with %q", f.Name(), primary, a.Verdict, w.cause, w.headline)
		}
		for _, fd := range a.Findings {
			for _, d := range fd.Detail {
				if rep.Snapshot.Process.Comm == "" && strings.Contains(d, "the target has none (Seccomp") {
					t.Errorf("%s: claims a seccomp state for a process whose status was never read: %q", f.Name(), d)
				}
			}
		}
	}
}
