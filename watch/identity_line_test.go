package watch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// The kept report names the process's uid (the line's), not 0; and an argv
// that only the exec event gave (the process gone before /proc was read:
// the kernel side copies the first few arguments only) is marked cut.
func TestReportUIDAndArgvCut(t *testing.T) {
	privtest.Deadline(t)
	h := &fakeHost{cgroups: map[int]string{91: "/"}}
	cut := []string{"python3", "a", "b", "c"}
	events := []tracer.Event{
		{PID: 91, TID: 91, Comm: "sh", Kind: tracer.KindOpen, Syscall: "openat", Path: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Ret: 3},
		{PID: 91, TID: 91, Comm: "python3", Kind: tracer.KindExec, Syscall: "execve", Argv: cut},
	}
	events = append(append(events, deniedCtl(91, "python3")...), exitOf(91, 1))
	dir := t.TempDir()
	rd, err := OpenReportDir(dir, 10)
	if err != nil {
		t.Fatal(err)
	}
	_, _, out := watchWith(t, &fakeBackend{events: events, before: func(i int, _ *watcher) {
		if i == 1 { // gone from /proc at its exec
			h.mu.Lock()
			delete(h.cgroups, 91)
			h.mu.Unlock()
		}
	}}, h, func(o *Options) {
		o.ReportDir = rd
		collect := o.System.Collect
		o.System.Collect = func(so snapshot.Options) *snapshot.Snapshot {
			s := collect(so)
			s.Process.UID, s.Process.User = 65534, "nobody"
			return s
		}
	})
	lines := parseLines(t, out)
	if len(lines) != 1 || lines[0].UID != 65534 || !lines[0].ArgvCut {
		t.Fatalf("lines %+v, want one of uid 65534 with argv_cut", lines)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(names) != 1 {
		t.Fatalf("reports %v, want 1", names)
	}
	f, err := os.Open(names[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := report.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Target.UID != 65534 || rep.Target.User != "nobody" {
		t.Errorf("report target uid %d user %q, want 65534 nobody", rep.Target.UID, rep.Target.User)
	}
}
