package stracelog

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
)

// The logs under testdata/strace/synthetic were recorded by
// testdata/strace/gen/gen.sh: real strace output of gen/calls.c in each
// output format. calls makes libcuda's device-node calls on a host without
// NVIDIA devices (so they fail with ENOENT), from the process, from a thread,
// and from a child that re-executes the binary and exits 3 (or is killed by
// SIGKILL); the process exits 5.

const synthetic = "../../testdata/strace/synthetic"

// step is one expected event of calls.c.
type step struct {
	who   string // "main", "thread" or "child"
	kind  tracer.Kind
	path  string
	check func(e *tracer.Event) bool
}

func isENOENT(e *tracer.Event) bool { return e.Errno() == syscall.ENOENT }

// callsSteps is what calls.c does, in its order.
func callsSteps(killed bool) []step {
	childExit := func(e *tracer.Event) bool { return e.ExitCode == 3 && e.Signal == 0 }
	if killed {
		childExit = func(e *tracer.Event) bool { return e.ExitCode == 0 && e.Signal == 9 }
	}
	return []step{
		{"main", tracer.KindExec, "", func(e *tracer.Event) bool {
			return strings.HasSuffix(e.Path, "/cuda-calls-with-a-long-name") && e.Ret == 0 &&
				e.Comm == "cuda-calls-with" && len(e.Argv) == map[bool]int{false: 1, true: 2}[killed] &&
				strings.HasPrefix(e.Argv[0], "/tmp/")
		}},
		{"main", tracer.KindStat, "/dev/nvidiactl", func(e *tracer.Event) bool { return isENOENT(e) && e.Dev == nil && e.Mode == 0 }},
		{"main", tracer.KindUnlink, "/dev/char/nonexistent/195:255", isENOENT},
		{"main", tracer.KindSymlink, "/dev/char/nonexistent/195:255", func(e *tracer.Event) bool {
			return isENOENT(e) && e.Target == "../nvidiactl"
		}},
		{"main", tracer.KindMkdir, "/dev/nvidia-nonexistent/caps", func(e *tracer.Event) bool { return isENOENT(e) && e.Mode == 0o755 }},
		{"main", tracer.KindMknod, "/dev/nvidia-nonexistent/nvidia-uvm", func(e *tracer.Event) bool {
			return isENOENT(e) && e.Mode == 0o20666 && sameDev(e.Dev, dev(238, 0))
		}},
		{"main", tracer.KindOpen, "/dev/nvidiactl", func(e *tracer.Event) bool { return isENOENT(e) && e.Flags == 2 }},
		{"main", tracer.KindAccess, "/dev/nvidiactl", func(e *tracer.Event) bool { return isENOENT(e) && e.Flags == 6 }},
		{"main", tracer.KindMemfd, "cuda-jit", func(e *tracer.Event) bool { return e.Ret == 3 && e.Flags == 1 }},
		{"main", tracer.KindIoctl, "", func(e *tracer.Event) bool {
			return e.FD == -1 && e.Request == 0xC020462A && e.Errno() == syscall.EBADF
		}},
		{"thread", tracer.KindOpen, "/dev/nvidia0", func(e *tracer.Event) bool { return isENOENT(e) && e.Flags == 0x80002 }},
		{"child", tracer.KindExec, "", func(e *tracer.Event) bool {
			return e.Ret == 0 && e.Comm == "cuda-calls-with" && strings.Join(e.Argv, " ") == "child child "+map[bool]string{false: "exit", true: "kill"}[killed]
		}},
		{"child", tracer.KindOpen, "/dev/nvidia-uvm", func(e *tracer.Event) bool {
			return isENOENT(e) && e.Flags == 0x80002 && e.Comm == "cuda-calls-with"
		}},
		{"child", tracer.KindIoctl, "", func(e *tracer.Event) bool {
			return e.FD == -1 && e.Request == 0x30000002 && e.Errno() == syscall.EBADF
		}},
		{"child", tracer.KindExit, "", childExit},
		{"main", tracer.KindExit, "", func(e *tracer.Event) bool { return e.ExitCode == 5 && e.Syscall == "" }},
	}
}

func TestGeneratedFormats(t *testing.T) {
	glob := func(dir string) []string {
		m, err := filepath.Glob(filepath.Join(synthetic, dir, "calls.*"))
		if err != nil || len(m) != 3 {
			t.Fatalf("%s: want 3 -ff files, got %v %v", dir, m, err)
		}
		return m
	}
	for _, tc := range []struct {
		name                      string
		files                     []string
		pids, times, paths, whole bool // whole: one stream, in time order
		killed, followed          bool
	}{
		{name: "f-tt-yy", pids: true, times: true, paths: true, whole: true, followed: true},
		{name: "f-tt-yy-killed", pids: true, times: true, paths: true, whole: true, followed: true, killed: true},
		{name: "f-t", pids: true, times: true, whole: true, followed: true},
		{name: "f-ttt-T-y", pids: true, times: true, paths: true, whole: true, followed: true},
		{name: "stderr-r-y", pids: true, times: true, paths: true, whole: true, followed: true},
		{name: "nof", whole: true},
		{name: "ff", files: glob("ff"), pids: true, times: true, paths: true, whole: true, followed: true},
		{name: "ff-notime", files: glob("ff-notime"), pids: true, followed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lg *Log
			if tc.files != nil {
				var err error
				if lg, err = ParseFiles(tc.files); err != nil {
					t.Fatal(err)
				}
			} else {
				lg = parseFile(t, filepath.Join(synthetic, tc.name+".strace"))
			}
			checkStream(t, lg)
			if lg.HasPIDs != tc.pids || lg.HasTimes != tc.times || lg.HasFDPaths != tc.paths {
				t.Errorf("HasPIDs %v HasTimes %v HasFDPaths %v", lg.HasPIDs, lg.HasTimes, lg.HasFDPaths)
			}
			if lg.Skipped != 0 || lg.Unfinished != 0 {
				t.Errorf("Skipped %d Unfinished %d of %d lines", lg.Skipped, lg.Unfinished, lg.Lines)
			}
			if lg.Exit == nil || *lg.Exit != (tracer.ExitStatus{Code: 5}) {
				t.Errorf("Exit = %+v", lg.Exit)
			}
			if tc.times && lg.Events[len(lg.Events)-1].Time <= 0 && tc.name != "f-t" {
				t.Errorf("no time passed: %+v", lg.Events[len(lg.Events)-1])
			}
			checkSteps(t, lg, callsSteps(tc.killed), tc.followed, tc.whole)
		})
	}
}

// checkSteps matches the events against steps: each process's (and the
// thread's) events in order, and all of them in order when whole.
func checkSteps(t *testing.T, lg *Log, steps []step, followed, whole bool) {
	t.Helper()
	if !followed {
		// Without -f only the main thread of the process is traced.
		var kept []step
		for _, s := range steps {
			if s.who == "main" {
				kept = append(kept, s)
			}
		}
		steps = kept
	}
	if len(lg.Events) != len(steps) {
		for _, e := range lg.Events {
			t.Logf("%+v", e)
		}
		t.Fatalf("%d events, want %d", len(lg.Events), len(steps))
	}
	mainPID := lg.Events[0].PID
	if lg.HasPIDs != (mainPID != 0) {
		t.Fatalf("main pid %d with HasPIDs %v", mainPID, lg.HasPIDs)
	}
	who := func(e *tracer.Event) string {
		switch {
		case e.PID == mainPID && e.TID == mainPID:
			return "main"
		case e.PID == mainPID:
			return "thread"
		case e.PID == e.TID:
			return "child"
		}
		return "?"
	}
	// Match each actor's events to its steps in order.
	next := map[string]int{}
	byWho := map[string][]step{}
	for _, s := range steps {
		byWho[s.who] = append(byWho[s.who], s)
	}
	for i := range lg.Events {
		e := &lg.Events[i]
		w := who(e)
		if !lg.HasPIDs {
			w = "main"
		}
		var s step
		if whole {
			s = steps[i]
			if s.who != w {
				t.Errorf("event %d is by %s, want %s: %+v", i, w, s.who, e)
				continue
			}
		} else {
			if next[w] >= len(byWho[w]) {
				t.Errorf("extra event by %s: %+v", w, e)
				continue
			}
			s = byWho[w][next[w]]
			next[w]++
		}
		if e.Kind != s.kind || (s.path != "" && e.Path != s.path) || !s.check(e) {
			t.Errorf("event %d by %s: %+v\nwant %s %s", i, w, e, s.kind, s.path)
		}
	}
}
