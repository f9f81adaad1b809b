package tracer

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/procfs"
)

// unreapedChild returns the PID of a child that has exited and is not
// reaped: a zombie.
func unreapedChild(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, err := procfs.ReadStat(pid); err == nil && st.State == 'Z' {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d never became a zombie", pid)
		}
	}
}

func TestCheckAttachable(t *testing.T) {
	if err := CheckAttachable(os.Getpid()); err != nil {
		t.Errorf("this process: %v", err)
	}
	// kthreadd is PID 2 in the initial PID namespace; elsewhere there may
	// be no kernel thread in sight.
	if st, err := procfs.ReadStat(2); err == nil && st.Flags&procfs.PFKthread != 0 {
		err := CheckAttachable(2)
		if err == nil || !strings.Contains(err.Error(), "PID 2 is a kernel thread") || strings.Contains(err.Error(), "\n") {
			t.Errorf("PID 2 (%s): %v", st.Comm, err)
		}
	}
	zombie := unreapedChild(t)
	if err := CheckAttachable(zombie); err == nil || !strings.Contains(err.Error(), "has exited") {
		t.Errorf("zombie %d: %v", zombie, err)
	}
	if err := CheckAttachable(1 << 30); err == nil || !strings.Contains(err.Error(), "no such process") {
		t.Errorf("missing PID: %v", err)
	}
}
