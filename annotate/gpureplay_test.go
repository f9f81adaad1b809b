package annotate_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/report"
)

// gpuCase is what a real-GPU recording in testdata/gpu must still produce
// when re-analysed with the current rules (testdata/gpu/README.md says how
// each was made).
type gpuCase struct {
	state    string
	failPath string // "" when no call may fail
	errno    string
	ids      []string // findings that must be present
	mention  []string // strings the findings' text must contain
	exit     int      // the target's own exit status
}

var gpuCases = []gpuCase{
	{state: "1-healthy-root-cuinit", ids: []string{"calls-ok"}},
	{state: "1-healthy-root-torch", ids: []string{"calls-ok"}},
	{state: "1-healthy-nobody-cuinit", ids: []string{"calls-ok"}},
	{state: "1-healthy-nobody-torch", ids: []string{"calls-ok"}},
	{state: "2-deny-uvm-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied", "calls-ok"}, mention: []string{"c 238:* rwm"}},
	{state: "2-deny-uvm-torch", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 238:* rwm"}, exit: 1},
	{state: "3-stale-allow-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-stale-major"}, mention: []string{"504", "238"}},
	{state: "3-stale-allow-torch", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-stale-major"}, mention: []string{"504", "238"}, exit: 1},
	{state: "4-deny-195-smi", failPath: "/dev/nvidiactl", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 195:* rwm"}, exit: 255},
	{state: "4-deny-195-cuinit", failPath: "/dev/nvidiactl", errno: "EPERM", ids: []string{"cgroup2-denied"}},
	{state: "5-uvm-missing-nobody-cuinit", failPath: "/dev/nvidia-uvm", errno: "ENOENT", ids: []string{"node-missing"}, mention: []string{"nvidia-modprobe -u -c=0"}},
	{state: "5-uvm-missing-nobody-torch", failPath: "/dev/nvidia-uvm", errno: "ENOENT", ids: []string{"node-missing"}, exit: 1},
	{state: "5-uvm-missing-root-cuinit", ids: []string{"node-repaired"}},
	{state: "6-uvm-stale-nobody-cuinit", failPath: "/dev/nvidia-uvm", errno: "ENXIO", ids: []string{"node-stale-major"}, mention: []string{"504", "238"}},
	{state: "6-uvm-stale-nobody-torch", failPath: "/dev/nvidia-uvm", errno: "ENXIO", ids: []string{"node-stale-major"}, exit: 1},
	{state: "7-nodev-cuinit", failPath: "/dev/nvidiactl", errno: "EACCES", ids: []string{"nodev"}},
	{state: "7-nodev-torch", ids: []string{"nodev"}, exit: 1},
	{state: "8-ptrace-deny-uvm-cuinit", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, mention: []string{"c 238:* rwm"}},
	{state: "8-ptrace-deny-uvm-torch", failPath: "/dev/nvidia-uvm", errno: "EPERM", ids: []string{"cgroup2-denied"}, exit: 1},
	{state: "8-ptrace-uvm-missing-nobody-cuinit", failPath: "/dev/nvidia-uvm", errno: "ENOENT", ids: []string{"node-missing"}},
	{state: "8-ptrace-healthy-torch", ids: []string{"calls-ok"}},
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
			a := annotate.Analyze(rep.Events, rep.Snapshot)
			if c.failPath == "" {
				if a.Failing != nil {
					t.Fatalf("healthy run pinpoints %s", annotate.FormatCall(a.Failing))
				}
			} else {
				if a.Failing == nil {
					t.Fatalf("no failing call; verdict %q", a.Verdict)
				}
				if a.Failing.Path != c.failPath || a.Failing.ErrnoName() != c.errno {
					t.Fatalf("failing call %s → %s, want %s → %s", annotate.FormatCall(a.Failing), a.Failing.ErrnoName(), c.failPath, c.errno)
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
