package diagnose

import (
	"slices"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// eperm is a strace -f -tt log (no -yy) in which the first open of
// /dev/nvidiactl is refused.
const eperm = `1234  10:00:00.000001 execve("/usr/bin/python3", ["python3", "x.py"], 0x7ffd /* 10 vars */) = 0
1234  10:00:00.100000 openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = -1 EPERM (Operation not permitted)
1234  10:00:00.200000 exit_group(1) = ?
1234  10:00:00.200100 +++ exited with 1 +++
`

func parseEPERM(t *testing.T) *stracelog.Log {
	t.Helper()
	log, err := stracelog.Parse(strings.NewReader(eperm))
	if err != nil {
		t.Fatal(err)
	}
	return log
}

func TestFromStraceLog(t *testing.T) {
	log := parseEPERM(t)
	rep := FromStraceLog(log, "v-test")
	if rep.Trace.Source != "strace-log" || !rep.Trace.Complete || rep.Trace.Events != uint64(len(log.Events)) || rep.Trace.Stored != len(log.Events) || rep.Tool.Version != "v-test" {
		t.Errorf("trace %+v, tool %+v", rep.Trace, rep.Tool)
	}
	if !slices.Equal(rep.Target.Argv, []string{"python3", "x.py"}) || rep.Target.Exit == nil || rep.Target.Exit.Code != 1 {
		t.Errorf("target %+v, want the exec'd argv and exit 1", rep.Target)
	}
	if rep.Trace.Duration != log.Events[len(log.Events)-1].Time || rep.Trace.Duration <= 0 {
		t.Errorf("duration %v, want the last event's time", rep.Trace.Duration)
	}
	limits := strings.Join(rep.Trace.Limits, "\n")
	if !strings.Contains(limits, "no -yy") || strings.Contains(limits, "no pids") || strings.Contains(limits, "no timestamps") {
		t.Errorf("limits %q: want only the missing -yy besides the inference note", rep.Trace.Limits)
	}
	if len(rep.Snapshot.Unavailable) != 3 {
		t.Errorf("snapshot says %q unavailable, want /proc/devices, cgroups and nodes", rep.Snapshot.Unavailable)
	}
	f := rep.Analysis.Failing
	if f == nil || f.Kind != tracer.KindOpen || f.Path != "/dev/nvidiactl" || f.Errno() != 1 {
		t.Errorf("failing call %+v, want the refused open of /dev/nvidiactl", f)
	}
}

func TestReanalyse(t *testing.T) {
	log := parseEPERM(t)
	rep := FromStraceLog(log, "v-test")
	fresh := rep.Analysis
	if changed := Reanalyse(rep); changed != "" {
		t.Errorf("the same build's analysis changed: %s", changed)
	}

	rep.Analysis.Failing = nil
	changed := Reanalyse(rep)
	if want := "stored failing call: event 0, now: event "; !strings.HasPrefix(changed, want) {
		t.Errorf("changed %q, want %q...", changed, want)
	}

	rep.Analysis.Findings = append(rep.Analysis.Findings, analysis.Finding{ID: "zz-stale"})
	if changed := Reanalyse(rep); !strings.HasPrefix(changed, "stored findings: ") || !strings.Contains(changed, "zz-stale; now: ") {
		t.Errorf("changed %q, want the stored and current finding ids", changed)
	}
	if rep.Analysis.Verdict != fresh.Verdict {
		t.Errorf("verdict %q after re-analysis, want %q", rep.Analysis.Verdict, fresh.Verdict)
	}

	// A report saved without a snapshot is analysed against an empty one
	// and keeps none.
	rep.Snapshot = nil
	Reanalyse(rep)
	if rep.Snapshot != nil || rep.Analysis.Failing == nil {
		t.Errorf("snapshot %v, failing %v after re-analysing a report without a snapshot", rep.Snapshot, rep.Analysis.Failing)
	}
}

func TestVerdictChange(t *testing.T) {
	at := func(seq uint64, ids ...string) analysis.Result {
		a := analysis.Result{}
		if seq > 0 {
			a.Failing = &tracer.Event{Seq: seq}
		}
		for _, id := range ids {
			a.Findings = append(a.Findings, analysis.Finding{ID: id})
		}
		return a
	}
	for _, tc := range []struct {
		old, cur analysis.Result
		want     string
	}{
		{at(3, "b", "a"), at(3, "a", "b"), ""}, // order does not matter
		{at(0), at(0), ""},
		{at(3, "a"), at(4, "a"), "stored failing call: event 3, now: event 4"},
		{at(0), at(2), "stored failing call: event 0, now: event 2"},
		{at(3, "a", "c"), at(3, "b", "a"), "stored findings: a,c; now: a,b"},
		{at(3), at(3, "a"), "stored findings: ; now: a"},
	} {
		if got := verdictChange(tc.old, tc.cur); got != tc.want {
			t.Errorf("verdictChange(%v, %v) = %q, want %q", tc.old, tc.cur, got, tc.want)
		}
	}
}

// -yy is told from the log itself: fd paths with no device node among
// them (an NVIDIA open that failed, regular files only) may well be -yy,
// so the report does not claim it was missing; a device fd without its
// number is -y alone; no fd paths at all is no -y.
func TestStraceLimitsYY(t *testing.T) {
	const open = `1234  10:00:00.100000 openat(AT_FDCWD</root>, "/dev/nvidiactl", O_RDWR) = -1 EPERM (Operation not permitted)
`
	for _, tc := range []struct {
		name, log, want string
	}{
		{"yy, no device opened", `1234  10:00:00.000001 openat(AT_FDCWD</root>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>
` + open, ""},
		{"yy, a device opened", `1234  10:00:00.000001 openat(AT_FDCWD</root>, "/dev/null", O_RDONLY) = 3</dev/null<char 1:3>>
` + open, ""},
		{"y", `1234  10:00:00.000001 openat(AT_FDCWD</root>, "/dev/null", O_RDONLY) = 3</dev/null>
` + open, "-y without -yy"},
		{"neither", eperm, "no -yy"},
	} {
		log, err := stracelog.Parse(strings.NewReader(tc.log))
		if err != nil {
			t.Fatal(err)
		}
		limits := strings.Join(FromStraceLog(log, "v-test").Trace.Limits, "\n")
		if tc.want == "" && strings.Contains(limits, "-yy") || tc.want != "" && !strings.Contains(limits, tc.want) {
			t.Errorf("%s: limits %q, want %q", tc.name, limits, tc.want)
		}
	}
}
