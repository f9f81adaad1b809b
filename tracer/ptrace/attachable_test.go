package ptrace

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// A kernel thread and a zombie are refused in one line that says what
// they are; the answer is never "run as root" (even when run as root).
func TestAttachKernelThreadAndZombie(t *testing.T) {
	z := exec.Command("/bin/true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	for deadline := time.Now().Add(30 * time.Second); !isZombie(z.Process.Pid); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child never became a zombie")
		}
	}
	cases := []struct {
		pid  int
		want string
	}{{z.Process.Pid, "has exited"}}
	if readComm(2) == "kthreadd" {
		cases = append(cases, struct {
			pid  int
			want string
		}{2, "PID 2 is a kernel thread"})
	}
	for _, c := range cases {
		_, err := New().Run(context.Background(), tracer.Spec{PIDs: []int{c.pid}, Duration: time.Second}, &collector{})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "run as root") || strings.Contains(err.Error(), "\n") {
			t.Errorf("attach %d: %v, want one line with %q", c.pid, err, c.want)
		}
	}
}

// The tracer already attached is named by its process, not the thread
// that /proc's TracerPid gives.
func TestDescribeTracer(t *testing.T) {
	if got := describeTracer(0); got != "" {
		t.Errorf("no tracer: %q", got)
	}
	// A thread of this process that is not the leader.
	tids := make(chan int)
	release := make(chan struct{})
	defer close(release)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		<-release
	}()
	tid := <-tids
	if tid == os.Getpid() {
		t.Skip("the goroutine got the main thread")
	}
	want := fmt.Sprintf("process %d (%q)", os.Getpid(), readComm(os.Getpid()))
	if got := describeTracer(tid); got != want {
		t.Errorf("thread %d: %q, want %q", tid, got, want)
	}
}
