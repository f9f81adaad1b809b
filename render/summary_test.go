package render_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/tracer"
)

// -c counts every call per node and call, as strace -c: the folded and
// summarised ones too, not only those stored; errors by name; no execs or
// exits.
func TestSummaryCountsEveryCall(t *testing.T) {
	ctl := tracer.Dev{Major: 195, Minor: 255}
	rep := recordReport(t, func(r *record.Recorder) {
		seq := uint64(0)
		next := func() uint64 { seq++; return seq }
		r.Event(&tracer.Event{Seq: next(), PID: 9, TID: 9, Kind: tracer.KindExec, Syscall: "execve", Path: "/usr/bin/python3"})
		for range 200 {
			d := ctl
			r.Event(&tracer.Event{Seq: next(), PID: 9, TID: 9, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidiactl", Ret: 3, Dev: &d})
		}
		for range 5 {
			r.Event(&tracer.Event{Seq: next(), PID: 9, TID: 9, Kind: tracer.KindOpen, Syscall: "openat", Path: "/dev/nvidia-uvm", Ret: -1})
		}
		e := ioctlEv(0, 9, 3, ctl, 0xc020462a, 0)
		for range 1000 {
			e.Seq = next()
			r.Event(e)
		}
		f := ioctlEv(next(), 9, 3, ctl, 0xc020462b, -22)
		r.Event(f)
		r.Event(&tracer.Event{Seq: next(), PID: 9, TID: 9, Kind: tracer.KindExit, Syscall: "exit_group"})
	})
	rows := render.SummaryRows(rep)
	want := map[string][2]uint64{
		"/dev/nvidiactl openat":  {200, 0},
		"/dev/nvidia-uvm openat": {5, 5},
		"/dev/nvidiactl ioctl":   {1001, 1},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %d", rows, len(want))
	}
	for _, r := range rows {
		w, ok := want[r.Node+" "+r.Call]
		if !ok || r.Calls != w[0] || r.Errors != w[1] {
			t.Errorf("row %s %s: %d calls %d errors, want %v", r.Node, r.Call, r.Calls, r.Errors, w)
		}
	}
	var out bytes.Buffer
	if err := render.Report(&out, rep, render.FormatText, render.Options{Summary: true}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, line := range []string{"Summary: calls per node and call", "EPERM×5", "EINVAL", "total"} {
		if !strings.Contains(s, line) {
			t.Errorf("summary lacks %q:\n%s", line, s)
		}
	}
	if strings.Contains(s, "Timeline") || strings.Contains(s, "execve") || strings.Contains(s, "exit_group") {
		t.Errorf("summary shows the timeline or non-NVIDIA calls:\n%s", s)
	}
}
