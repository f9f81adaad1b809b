package ptrace

import (
	"testing"

	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/internal/fakeinband"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// ptrace delivers every call with its in-band status word (read from the
// tracee when it lies past the bytes copied); the recorder, which
// folds in user space, keeps the one that failed beyond its sample.
func TestInbandStatusKept(t *testing.T) {
	privtest.RequireRoot(t)
	node := fakeinband.Node(t)
	c := &collector{}
	rec := record.New()
	sink := tracer.SinkFunc(func(e *tracer.Event) { c.Event(e); rec.Event(e) })
	spec := tracer.Spec{Argv: helperArgv("inband", node), DeviceMajors: []uint32{1}, InbandStatus: fakeinband.Words(false)}
	res, err := New().Run(privtest.Deadline(t), spec, sink)
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("helper exit %+v", res.Exit)
	}
	for _, w := range fakeinband.Words(false) {
		var got, failed []tracer.Event
		for _, e := range c.all() {
			if e.Kind != tracer.KindIoctl || e.Request != w.Request {
				continue
			}
			got = append(got, e)
			if e.Status == nil || e.Status.Off != w.Off {
				t.Fatalf("ioctl %#x: status %+v, want the word @%d", w.Request, e.Status, w.Off)
			}
			if e.Status.Value != 0 {
				failed = append(failed, e)
			}
		}
		if len(got) != fakeinband.Calls || len(failed) != 1 || failed[0].Status.Value != fakeinband.Failure || failed[0].Seq != got[fakeinband.FailAt].Seq {
			t.Errorf("ioctl %#x: %d calls, failures %+v; want %d with the 15th's %#x", w.Request, len(got), failed, fakeinband.Calls, fakeinband.Failure)
			continue
		}
		var stored []tracer.Event
		for _, e := range rec.Events() {
			if e.Kind == tracer.KindIoctl && e.Request == w.Request {
				stored = append(stored, e)
			}
		}
		if len(stored) != record.IoctlSamplePerSite+1 || stored[len(stored)-1].Seq != failed[0].Seq {
			t.Errorf("ioctl %#x: recorder stored %d, want the first %d and the failure", w.Request, len(stored), record.IoctlSamplePerSite)
		}
	}
	var counted uint64
	for _, s := range rec.Ioctls() {
		if s.Request == fakeinband.RndGetEntCnt || s.Request == fakeinband.FIOCLEX {
			counted += s.Count
		}
	}
	if counted != 2*fakeinband.Calls {
		t.Errorf("recorder counted %d ioctls, want %d", counted, 2*fakeinband.Calls)
	}
}
