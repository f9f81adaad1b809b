package tracer

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
		if st, ok := readProcStat("/proc/" + strconv.Itoa(pid) + "/stat"); ok && st.state == 'Z' {
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
	if st, ok := readProcStat("/proc/2/stat"); ok && st.flags&pfKthread != 0 {
		err := CheckAttachable(2)
		if err == nil || !strings.Contains(err.Error(), "PID 2 is a kernel thread") || strings.Contains(err.Error(), "\n") {
			t.Errorf("PID 2 (%s): %v", st.comm, err)
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

// A comm may hold parentheses and spaces: the state and flags are found
// after the last ')'.
func TestReadProcStatOddComm(t *testing.T) {
	f := t.TempDir() + "/stat"
	os.WriteFile(f, []byte("42 (a) Z (b) S 1 1 1 0 -1 2097152 0 0\n"), 0o600)
	st, ok := readProcStat(f)
	if !ok || st.comm != "a) Z (b" || st.state != 'S' || st.flags != pfKthread {
		t.Errorf("got %+v %v", st, ok)
	}
}
