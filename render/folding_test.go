package render_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

func ioctlEv(seq uint64, pid, fd int, dev tracer.Dev, req uint32, ret int64) *tracer.Event {
	d := dev
	return &tracer.Event{Seq: seq, PID: pid, TID: pid, Comm: "python3", Kind: tracer.KindIoctl, Syscall: "ioctl",
		FD: fd, Request: req, Dev: &d, Ret: ret, Arg: []byte{1, 2, 3, 4}}
}

// recordReport feeds events through a Recorder into a report, as a live
// trace does (cmd/cudatrace buildReport), and analyses it.
func recordReport(t testing.TB, feed func(r *record.Recorder)) *report.Report {
	t.Helper()
	rec := record.New()
	feed(rec)
	rep := &report.Report{
		Schema: report.SchemaVersion, Tool: report.Tool{Name: "cudatrace", Version: "test"},
		Trace:  report.Trace{Source: "live", Backend: "ptrace", Events: rec.Seen, Stored: len(rec.Events()), Complete: rec.Overflow == 0},
		Events: rec.Events(), Ioctls: rec.Ioctls(), Folded: rec.Folded(),
	}
	rep.Analysis = analysis.AnalyzeFacts(rep.Events, nil, rep.Facts())
	return rep
}

// A job that opens nvidiactl 200 times and issues a million ioctls: the
// findings give those numbers, not the 32 opens and 8 ioctls stored, in the
// live report and again after `cudatrace report` reloads it.
func TestFindingsCountFoldedCalls(t *testing.T) {
	ctl := tracer.Dev{Major: 195, Minor: 255}
	for _, kernelFolds := range []bool{false, true} {
		rep := recordReport(t, func(r *record.Recorder) {
			seq := uint64(0)
			var folded []tracer.Folded
			for i := range 200 {
				seq++
				if kernelFolds && i >= record.SamplePerSite {
					continue
				}
				d := ctl
				r.Event(&tracer.Event{Seq: seq, PID: 9, TID: 9, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: &d})
			}
			if kernelFolds {
				folded = append(folded, tracer.Folded{PID: 9, Kind: tracer.KindOpen, Path: "/dev/nvidiactl", Count: 200 - record.SamplePerSite})
			}
			e := ioctlEv(0, 9, 3, ctl, 0xc020462a, 0)
			for i := range 1_000_000 {
				if kernelFolds && i >= record.IoctlSamplePerSite {
					break
				}
				seq++
				e.Seq = seq
				r.Event(e)
			}
			if kernelFolds {
				folded = append(folded, tracer.Folded{PID: 9, Kind: tracer.KindIoctl, Dev: ctl, Request: 0xc020462a, Count: 1_000_000 - record.IoctlSamplePerSite})
			}
			r.AddFolded(folded)
		})
		want := "/dev/nvidiactl (c 195:255) opened 200x, allowed; 1000000 ioctls"
		check := func(what string, a analysis.Result) {
			for _, f := range a.Findings {
				if f.ID == "calls-ok" && len(f.Detail) == 1 && f.Detail[0] == want {
					return
				}
			}
			t.Errorf("kernel folds %v, %s: findings %+v, want calls-ok %q", kernelFolds, what, a.Findings, want)
		}
		check("live", rep.Analysis)
		path := filepath.Join(t.TempDir(), "r.json")
		if err := report.Save(path, rep); err != nil {
			t.Fatal(err)
		}
		loaded, err := report.LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		check("reloaded", analysis.AnalyzeFacts(loaded.Events, loaded.Snapshot, loaded.Facts()))
	}
}

// The condensed timeline shows a folded site as one line with its count;
// --all-events still lists every stored call.
func TestTimelineFoldedSiteIsOneLine(t *testing.T) {
	ctl := tracer.Dev{Major: 195, Minor: 255}
	rep := recordReport(t, func(r *record.Recorder) {
		d := ctl
		r.Event(&tracer.Event{Seq: 1, PID: 9, TID: 9, Comm: "python3", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: &d})
		e := ioctlEv(0, 9, 3, ctl, 0xc020462a, -22)
		for i := range 1_000_000 {
			e.Seq = uint64(i + 2)
			r.Event(e)
		}
		r.Event(&tracer.Event{Seq: 1_000_002, PID: 9, TID: 9, Comm: "python3", Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1})
	})
	if f := rep.Analysis.Failing; f == nil || f.Path != "/dev/nvidia-uvm" {
		t.Fatalf("failing call %+v, want the open of /dev/nvidia-uvm after the ioctls", f)
	}
	for _, format := range []render.Format{render.FormatText, render.FormatMarkdown} {
		var out bytes.Buffer
		if err := render.Report(&out, rep, format, render.Options{Width: 120}); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if n := strings.Count(s, "NV_ESC_RM_CONTROL"); n != 1 || !strings.Contains(s, "×1000000") {
			t.Errorf("%s: the folded ioctl site shows on %d lines, want one with ×1000000:\n%s", format, n, s)
		}
		if !strings.Contains(s, "/dev/nvidia-uvm") {
			t.Errorf("%s: the failing open is missing:\n%s", format, s)
		}
	}
	rows := render.TimelineRepeats(rep, true)
	if len(rows) != len(rep.Events) || len(rows) != 2+record.FailSamplePerSite+record.FailTailPerSite {
		t.Errorf("--all-events: %d rows for %d events", len(rows), len(rep.Events))
	}
}
