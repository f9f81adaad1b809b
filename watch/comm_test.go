package watch

import (
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
)

// The line names the process by its leader: a CUDA worker thread's calls
// and the exit event (which carries the comm of the thread that ended
// last) do not rename it.
func TestLineNamesTheLeader(t *testing.T) {
	h := &fakeHost{cgroups: map[int]string{20: podCg}}
	events := missingUVM(20, "python3")
	worker := tracer.Event{PID: 20, TID: 27, Comm: "cuda00001400006", Kind: tracer.KindIoctl, Syscall: "ioctl", Dev: ctlDev, FD: 3, Request: 0x1234, Ret: -25}
	exit := exitOf(20, 1)
	exit.Comm = "cuda00001400006"
	events = append(events, worker, exit)
	_, _, out := watchWith(t, &fakeBackend{events: events}, h, nil)
	lines := byPID(parseLines(t, out))
	if len(lines[20]) != 1 {
		t.Fatalf("lines %v, want one for PID 20:\n%s", lines, out)
	}
	if c := lines[20][0].Comm; c != "python3" {
		t.Errorf("comm %q, want the leader's python3", c)
	}
}
