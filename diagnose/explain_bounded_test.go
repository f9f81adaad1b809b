package diagnose

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// explain keeps what a live trace would of a long log: one process's
// 50,000 successful ioctls are folded per site and counted, the failing
// open after them is kept, and the report is complete (nothing was lost).
func TestExplainFoldsRepeats(t *testing.T) {
	privtest.Deadline(t)
	l, err := stracelog.ParseWith(bytes.NewReader(onePIDLog(50_000)), StraceLogOptions)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Events) > 16*8+10 {
		t.Errorf("%d events kept of 50,000 repeats of 16 sites, want at most 8 per site", len(l.Events))
	}
	rep := FromStraceLog(l, "test")
	var n uint64
	for _, s := range rep.Ioctls {
		n += s.Count
	}
	if n != 50_000 || !rep.Trace.Complete {
		t.Errorf("ioctls counted %d, complete %v: want 50000, true", n, rep.Trace.Complete)
	}
	if f := rep.Analysis.Failing; f == nil || f.Path != "/dev/nvidia-uvm" {
		t.Errorf("failing call %+v, want the uvm open", f)
	}
}

// Past the kept events' cap, calls are counted only and the report says it
// is incomplete, with the count; the log's exec and exits are kept.
func TestExplainMarksIncompletePastCap(t *testing.T) {
	privtest.Deadline(t)
	var b bytes.Buffer
	b.WriteString("7 execve(\"/usr/bin/python3\", [\"python3\"], 0x7ffd /* 1 var */) = 0\n")
	const n = 230_000
	for i := range n {
		fmt.Fprintf(&b, "7 openat(AT_FDCWD, \"/dev/nvidia0\", O_RDWR) = -1 ENOENT (No such file or directory) <%d>\n", i)
	}
	b.WriteString("7 +++ exited with 1 +++\n")
	l, err := stracelog.ParseWith(&b, StraceLogOptions)
	if err != nil {
		t.Fatal(err)
	}
	rep := FromStraceLog(l, "test")
	if rep.Trace.Complete || rep.Trace.Events != n+2 {
		t.Errorf("complete %v, events %d: want incomplete, %d", rep.Trace.Complete, rep.Trace.Events, n+2)
	}
	if !strings.Contains(strings.Join(rep.Trace.Notes, "\n"), "neither stored nor counted") {
		t.Errorf("notes %q say nothing of the calls lost", rep.Trace.Notes)
	}
	if rep.Target.Exit == nil || rep.Target.Exit.Code != 1 {
		t.Errorf("exit %+v, want code 1 (the exit is kept past the cap)", rep.Target.Exit)
	}
}
