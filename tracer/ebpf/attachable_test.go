package ebpf

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

func procState(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// A kernel thread and a zombie are refused in one line that says what
// they are (kthreadd used to be "traced").
func TestAttachKernelThreadAndZombie(t *testing.T) {
	privtest.RequireRoot(t)
	z := exec.Command("/bin/true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	for deadline := time.Now().Add(30 * time.Second); procState(z.Process.Pid) != "Z"; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child never became a zombie")
		}
	}
	pids := map[int]string{z.Process.Pid: "has exited"}
	if b, _ := os.ReadFile("/proc/2/comm"); strings.TrimSpace(string(b)) == "kthreadd" {
		pids[2] = "PID 2 is a kernel thread"
	}
	for pid, want := range pids {
		_, err := New().Run(context.Background(), tracer.Spec{PIDs: []int{pid}, Duration: time.Second}, &recorder{})
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("attach %d: %v, want one line with %q", pid, err, want)
		}
	}
}

// A process whose main thread exited while another runs on is traced,
// as the ptrace backend does.
func TestAttachZombieLeader(t *testing.T) {
	privtest.RequireRoot(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: no portable way to make a leader exit alone")
	}
	node := fakeNode(t, "nvidia")
	started := filepath.Join(t.TempDir(), "started")
	script := `
import ctypes, os, threading, time
def spin():
    open("` + started + `", "w").close()
    while True:
        os.close(os.open("` + node + `", os.O_RDONLY))
        time.sleep(0.02)
threading.Thread(target=spin).start()
ctypes.CDLL(None).pthread_exit(None)
`
	cmd := exec.Command(py, "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil && procState(pid) == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the leader never exited alone")
		}
	}
	rec := &recorder{}
	res, err := New().Run(context.Background(), tracer.Spec{PIDs: []int{pid}, DeviceMajors: []uint32{1}, Duration: 500 * time.Millisecond}, rec)
	if err != nil {
		t.Fatalf("attach to a process whose leader exited: %v", err)
	}
	opens := rec.find(byPath(node))
	if len(opens) == 0 || res.Events == 0 {
		t.Fatalf("no opens of %s traced:\n%s", node, rec.dump())
	}
	for _, e := range opens {
		if e.PID != pid || e.TID == pid {
			t.Errorf("event = %+v, want PID %d from another thread", e, pid)
		}
	}
}
