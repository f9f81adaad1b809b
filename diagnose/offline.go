package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// Reanalyse re-runs this build's analysis on a saved report's events and
// snapshot, in place, and says how the verdict changed ("" when the
// failing call and the findings agree). The stored finding ids come from
// the file: escape changed before printing it.
func Reanalyse(rep *report.Report) (changed string) {
	stored := rep.Analysis
	report.MaskSecrets(rep) // a report of an older version may hold them
	snap := rep.Snapshot
	if snap == nil {
		snap = &snapshot.Snapshot{}
	}
	rep.Analysis = analysis.AnalyzeFacts(rep.Events, snap, rep.Facts())
	return verdictChange(stored, rep.Analysis)
}

// verdictChange describes how two analyses differ, or "" when they agree
// on the failing call and the set of findings.
func verdictChange(old, cur analysis.Result) string {
	seq := func(a analysis.Result) uint64 {
		if a.Failing == nil {
			return 0
		}
		return a.Failing.Seq
	}
	if seq(old) != seq(cur) {
		return fmt.Sprintf("stored failing call: event %d, now: event %d", seq(old), seq(cur))
	}
	ids := func(a analysis.Result) []string {
		var out []string
		for _, f := range a.Findings {
			out = append(out, f.ID)
		}
		slices.Sort(out)
		return out
	}
	if o, c := ids(old), ids(cur); !slices.Equal(o, c) {
		return fmt.Sprintf("stored findings: %s; now: %s", strings.Join(o, ","), strings.Join(c, ","))
	}
	return ""
}

// StraceLogOptions bound what explain keeps of a log as the live pipeline
// does: successful repeats past the recorder's samples are counted.
var StraceLogOptions = stracelog.Options{FoldIoctlsAfter: record.IoctlSamplePerSite, FoldCallsAfter: record.SamplePerSite}

// FromStraceLog is the analysed report of a parsed strace log; version is
// the tool's. Its events go through the live pipeline's recorder, so the
// report keeps what a live trace of the same calls would, and says it is
// incomplete where calls were neither kept nor counted.
func FromStraceLog(log *stracelog.Log, version string) *report.Report {
	rec := record.New()
	for i := range log.Events {
		rec.Event(&log.Events[i])
	}
	rec.AddFolded(log.Folded)
	events := rec.Events()
	snap := snapshotFromLog()
	lost := rec.Overflow + log.Overflow
	rep := &report.Report{
		Schema:  report.SchemaVersion,
		Tool:    report.Tool{Name: "cudatrace", Version: version},
		Created: time.Now().UTC(),
		Trace: report.Trace{
			Source:   "strace-log",
			Events:   rec.Seen + log.Overflow,
			Stored:   len(events),
			Complete: lost == 0,
			Limits:   straceLimits(log),
		},
		Events:   events,
		Ioctls:   rec.Ioctls(),
		Folded:   rec.Folded(),
		Snapshot: snap,
	}
	if lost > 0 {
		rep.Trace.Notes = append(rep.Trace.Notes, fmt.Sprintf("%d calls of the log were neither stored nor counted, past the %d kept: the trace is incomplete", lost, len(events)))
	}
	if log.Exit != nil {
		rep.Target.Exit = log.Exit
	}
	for i := range events {
		if events[i].Kind == tracer.KindExec && events[i].Ret == 0 {
			rep.Target.Argv = events[i].Argv
			break
		}
	}
	if n := len(events); n > 0 {
		rep.Trace.Duration = events[n-1].Time
	}
	report.MaskSecrets(rep)
	rep.Analysis = analysis.AnalyzeFacts(rep.Events, snap, rep.Facts())
	return rep
}

// snapshotFromLog is the snapshot of a strace log: nothing about the system
// is known, and it says so, so the analysis marks what it infers. Node types,
// numbers and modes still come from the stat calls in the log itself.
func snapshotFromLog() *snapshot.Snapshot {
	return &snapshot.Snapshot{Unavailable: []string{
		"/proc/devices: not in a strace log (run: grep nvidia /proc/devices)",
		"cgroup device policy: not in a strace log (run cudatrace on the host, or: bpftool cgroup tree)",
		"device node owners and mounts: not in a strace log (run: ls -l /dev/nvidia*; findmnt /dev)",
	}}
}

func straceLimits(log *stracelog.Log) []string {
	out := []string{"a strace log shows no cgroup programs, /proc/devices or node owners: the cause of an EPERM or EACCES is inferred"}
	switch {
	case !log.HasFDPaths:
		out = append(out, "no -yy: device numbers of opened fds are unknown (record with strace -f -yy)")
	case log.UnnumberedDevFDs && !log.HasDevNumbers:
		out = append(out, "-y without -yy: device numbers of opened fds are unknown (record with strace -f -yy)")
	}
	if !log.HasPIDs {
		out = append(out, "no pids: record with strace -f so child processes are told apart")
	}
	if !log.HasTimes {
		out = append(out, "no timestamps: record with -tt for timing")
	}
	return out
}
