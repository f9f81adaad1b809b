package analysis_test

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// rmprobeStates are scripts/rmprobe run traced on the H200 by
// scripts/gpu-acceptance.sh (states 9-*), one per backend.
var rmprobeStates = []string{"12-rmprobe-ebpf", "12-rmprobe-ptrace"}

// probeLine is one line rmprobe printed: what the driver answered it.
type probeLine struct {
	op     string // rm_alloc, rm_control, rm_free, check_version_str
	fields map[string]string
}

func readProbeOutput(t *testing.T, dir string) []probeLine {
	t.Helper()
	var f *os.File
	var err error
	for _, name := range []string{"target-stdout.txt", "stdout"} {
		if f, err = os.Open(filepath.Join(dir, name)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("rmprobe's output: %v", err)
	}
	defer f.Close()
	var out []probeLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		words := strings.Fields(sc.Text())
		if len(words) == 0 {
			continue
		}
		l := probeLine{op: words[0], fields: map[string]string{}}
		for _, w := range words[1:] {
			if k, v, ok := strings.Cut(w, "="); ok {
				l.fields[k] = v
			}
		}
		out = append(out, l)
	}
	return out
}

func hexField(t *testing.T, l probeLine, k string) uint32 {
	t.Helper()
	v, err := strconv.ParseUint(l.fields[k], 0, 32)
	if err != nil {
		t.Fatalf("%s %s=%q: %v", l.op, k, l.fields[k], err)
	}
	return uint32(v)
}

// statusShort is the NV_STATUS name InbandResult prints.
func statusShort(code uint32) string {
	name, _, _ := strings.Cut(nvdev.StatusName(code), " ")
	return name
}

// TestRMProbeRecordings: the statuses the tracer decoded from the captured
// params equal those the driver handed rmprobe itself, under both backends.
func TestRMProbeRecordings(t *testing.T) {
	for _, st := range rmprobeStates {
		t.Run(st, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "gpu", st)
			if _, err := os.Stat(filepath.Join(dir, "report.json")); errors.Is(err, fs.ErrNotExist) {
				t.Skipf("%s not recorded yet: run scripts/gpu-acceptance.sh with bin/rmprobe on a GPU host and commit its 12-rmprobe-* states", dir)
			}
			rep, err := report.LoadFile(filepath.Join(dir, "report.json"))
			if err != nil {
				t.Fatal(err)
			}
			ver := ""
			if rep.Snapshot != nil {
				ver = rep.Snapshot.Host.DriverVersion
			}
			var ioctls []tracer.Event
			for _, e := range rep.Events {
				if e.Kind == tracer.KindIoctl && e.Dev != nil && e.Dev.Major == 195 {
					ioctls = append(ioctls, e)
				}
			}
			lines := readProbeOutput(t, dir)
			if len(lines) != 6 || len(ioctls) < 6 {
				t.Fatalf("%d probe lines, %d RM ioctls; want 6 of each", len(lines), len(ioctls))
			}
			// rmprobe's ioctls are its last six on /dev/nvidiactl, in order.
			ioctls = ioctls[len(ioctls)-6:]
			for i, l := range lines {
				e := &ioctls[i]
				call, got := nvdev.FormatCall(e), nvdev.InbandResult(e, ver)
				switch l.op {
				case "check_version_str":
					want := l.fields["err"] // "0" or the errno's name
					if want == "0" {
						want = ""
					}
					if e.ErrnoName() != want {
						t.Errorf("%s: traced errno %q, rmprobe saw %q", call, e.ErrnoName(), l.fields["err"])
					}
					continue
				case "rm_alloc":
					if want := "class=" + l.fields["class"]; hexField(t, l, "class") == 0xdead && !strings.Contains(call, want) {
						t.Errorf("%s does not name %s", call, want)
					}
				case "rm_control":
					if want := "cmd=" + l.fields["cmd"]; !strings.Contains(call, want) {
						t.Errorf("%s does not name %s", call, want)
					}
				}
				status := hexField(t, l, "status")
				want := ""
				if status != 0 {
					want = "status " + statusShort(status)
				}
				if got != want {
					t.Errorf("%s: decoded %q, the driver told rmprobe %q", call, got, want)
				}
			}
			a := analysis.Analyze(rep.Events, rep.Snapshot)
			if a.Failing == nil || !strings.Contains(nvdev.FormatCall(a.Failing), "NV_ESC_CHECK_VERSION_STR") {
				t.Errorf("failing call %v, want the refused version check", a.Failing)
			}
			have := map[string]bool{}
			for _, f := range a.Findings {
				have[f.ID] = true
			}
			for _, id := range []string{"version-mismatch", "rm-status-failed"} {
				if !have[id] {
					t.Errorf("finding %s missing; have %v", id, keys(have))
				}
			}
		})
	}
}
