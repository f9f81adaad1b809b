package report_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// aliceReport is the seed case traced by user alice on her workstation,
// from her home directory, with private arguments.
func aliceReport(t *testing.T) *report.Report {
	rep := reportfixture.Build(t, reportfixture.All[0])
	rep.Target.User, rep.Target.UID = "alice", 1000
	rep.Target.Argv = []string{"/home/alice/.venv/bin/python3", "/home/alice/proj/train.py", "--token", "s3cr3t-t0ken"}
	s := rep.Snapshot
	s.Host.Hostname = "alice-ws7.corp.example"
	s.Process.User, s.Process.UID, s.Process.GID = "alice", 1000, 1000
	s.Env = map[string]string{
		"LD_LIBRARY_PATH":      "/home/alice/.venv/lib:/usr/local/nvidia/lib64",
		"CUDA_VISIBLE_DEVICES": "0",
	}
	s.Mounts = append(s.Mounts, snapshot.Mount{MountPoint: "/home/alice/scratch", Root: "/", FSType: "ext4", Source: "/dev/mapper/alice--vg-home"})
	s.KernelLog = []snapshot.KernelLine{{Seq: 9, Text: "NVRM: alice-ws7.corp.example: GPU 0000:00:06.0: RmInitAdapter succeeded"}}
	rep.Trace.Notes = append(rep.Trace.Notes, "attached to python3 started from /home/alice/proj")
	for i := range rep.Events {
		e := &rep.Events[i]
		if e.Kind == tracer.KindExec {
			e.Path = "/home/alice/.venv/bin/python3"
			e.Argv = slices.Clone(rep.Target.Argv[1:])
			e.Argv = append([]string{"python3"}, e.Argv...)
		}
		if strings.HasSuffix(e.Path, "libcuda.so.1") {
			e.Path = "/home/alice/.venv/lib/libcuda.so.1"
		}
	}
	rep.Analysis = analysis.Analyze(rep.Events, s)
	return rep
}

func TestRedact(t *testing.T) {
	rep := aliceReport(t)
	before := reportfixture.MustJSON(t, rep)
	for _, s := range []string{"alice", "/home/alice", "alice-ws7", "train.py", "s3cr3t"} {
		if !bytes.Contains(before, []byte(s)) {
			t.Fatalf("the fixture does not hold %q, so the test proves nothing", s)
		}
	}
	wantIDs := findingIDs(rep.Analysis)
	wantFail := *rep.Analysis.Failing
	wantProgs := rep.Snapshot.CgroupV2.Programs

	report.Redact(rep)
	after := reportfixture.MustJSON(t, rep)
	for _, s := range []string{"alice", "ALICE", "alice-ws7", "corp.example", "train.py", "--token", "s3cr3t"} {
		if i := bytes.Index(bytes.ToLower(after), bytes.ToLower([]byte(s))); i >= 0 {
			lo, hi := max(0, i-80), min(len(after), i+80)
			t.Errorf("redacted report still holds %q: …%s…", s, after[lo:hi])
		}
	}
	// argv[0] stays, so the reader knows what ran; the rest is replaced.
	if a := rep.Target.Argv; len(a) != 4 || a[0] != "/home/<user>/.venv/bin/python3" || a[1] != "<redacted>" {
		t.Errorf("argv: %q", a)
	}

	// The evidence stays: device numbers, majors, program ids, findings.
	if got := findingIDs(rep.Analysis); !slices.Equal(got, wantIDs) {
		t.Errorf("finding ids %v, want %v", got, wantIDs)
	}
	f := rep.Analysis.Failing
	if f == nil || f.Seq != wantFail.Seq || f.Path != "/dev/nvidia-uvm" || f.Ret != wantFail.Ret {
		t.Errorf("failing call after redaction: %+v", f)
	}
	for _, want := range []string{`"major":238`, `"major":195`, `"minor":255`, `"name":"nvidia-uvm"`, `"id":57`, "c 238:* rwm", `"id":"cgroup2-denied"`} {
		if !bytes.Contains(after, []byte(want)) {
			t.Errorf("redaction removed evidence %q", want)
		}
	}
	if p := rep.Snapshot.CgroupV2.Programs; len(p) != 1 || !bytes.Equal(p[0].Instructions, wantProgs[0].Instructions) {
		t.Error("redaction changed the device program")
	}
	if rep.Snapshot.Env["CUDA_VISIBLE_DEVICES"] != "0" {
		t.Errorf("env: %v", rep.Snapshot.Env)
	}

	// A redacted report still re-analyses to the same conclusion.
	again := analysis.Analyze(rep.Events, rep.Snapshot)
	if got := findingIDs(again); !slices.Equal(got, wantIDs) || again.Failing == nil || again.Failing.Seq != wantFail.Seq {
		t.Errorf("re-analysis of the redacted report: %v failing %+v", got, again.Failing)
	}
}

// Short user names ("bo") would shred unrelated words if replaced
// everywhere; their home directory still goes.
func TestRedactShortUserName(t *testing.T) {
	rep := &report.Report{Schema: 1, Tool: report.Tool{Name: "cudatrace"},
		Target: report.Target{User: "bo", Argv: []string{"/home/bo/a.out", "x"}},
		Events: []tracer.Event{{Seq: 1, Kind: tracer.KindOpen, Path: "/home/bo/lib/libcuda.so.1", Comm: "a.out"}},
		Analysis: analysis.Result{Verdict: "No NVIDIA device call failed.",
			Findings: []analysis.Finding{{ID: "calls-ok", Summary: "boot ok"}}},
	}
	report.Redact(rep)
	if rep.Target.User != "<user>" || rep.Target.Argv[0] != "/home/<user>/a.out" || rep.Events[0].Path != "/home/<user>/lib/libcuda.so.1" {
		t.Errorf("target %+v, event path %q", rep.Target, rep.Events[0].Path)
	}
	if rep.Analysis.Findings[0].Summary != "boot ok" {
		t.Errorf("a short name shredded text: %q", rep.Analysis.Findings[0].Summary)
	}
}

func findingIDs(a analysis.Result) []string {
	var ids []string
	for _, f := range a.Findings {
		ids = append(ids, f.ID)
	}
	return ids
}

func TestRedactKeepsSystemUsers(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[0]) // user root
	rep.Snapshot.Mounts = append(rep.Snapshot.Mounts, snapshot.Mount{MountPoint: "/", Root: "/", FSType: "rootfs", Source: "rootfs"})
	want := findingIDs(rep.Analysis)
	report.Redact(rep)
	if rep.Target.User != "root" || rep.Snapshot.Process.User != "root" {
		t.Errorf("root was redacted: %q %q", rep.Target.User, rep.Snapshot.Process.User)
	}
	if m := rep.Snapshot.Mounts[len(rep.Snapshot.Mounts)-1]; m.FSType != "rootfs" || m.Source != "rootfs" {
		t.Errorf("mount shredded: %+v", m)
	}
	if rep.Snapshot.Host.Hostname != "" {
		t.Errorf("hostname kept: %q", rep.Snapshot.Host.Hostname)
	}
	if got := findingIDs(rep.Analysis); !slices.Equal(got, want) {
		t.Errorf("findings %v, want %v", got, want)
	}
	if a := rep.Target.Argv; len(a) != 3 || a[0] != "python3" || a[1] != "<redacted>" || a[2] != "<redacted>" {
		t.Errorf("argv %q", a)
	}
}
