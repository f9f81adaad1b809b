package ptrace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/tracer"
)

// A launch that --duration ends keeps its target working: the target,
// still under its SECCOMP_RET_TRACE filter, makes traced calls (open,
// fork, execve) after the deadline, and they must succeed, not fail with
// ENOSYS as they do with no tracer. Run returns at the deadline; Finish
// waits for the target and brings its exit status; nothing is recorded
// after the deadline.
func TestLaunchDurationKeepsTargetWorking(t *testing.T) {
	for d := time.Second; ; d *= 2 {
		if durationRun(t, d) || t.Failed() {
			return
		}
		if d >= 16*time.Second {
			t.Fatal("the target never made its first call before the deadline")
		}
	}
}

// durationRun is one try; false: the deadline came before the target's
// first call (a slow start), so the test learnt nothing.
func durationRun(t *testing.T, d time.Duration) bool {
	dir := t.TempDir()
	fifo, result := filepath.Join(dir, "fifo"), filepath.Join(dir, "result")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	gate, err := os.OpenFile(fifo, os.O_RDWR, 0) // O_RDWR: does not wait for the reader
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()
	// The missing node's open is recorded before the deadline, not after.
	missing := "/dev/nvidia-cudatrace-ptest-missing-" + randName()
	script := `{ true < "$3"; } 2>/dev/null; read x < "$1"; { true < "$3"; } 2>/dev/null; if /bin/cat /proc/self/stat >/dev/null; then echo ok > "$2"; fi; exit 42`
	c := &collector{}
	type ran struct {
		res *tracer.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := New().Run(context.Background(), tracer.Spec{
			Argv:         []string{"/bin/sh", "-c", script, "sh", fifo, result, missing},
			Duration:     d,
			DeferRelease: true,
		}, c)
		done <- ran{res, err}
	}()
	var r ran
	select {
	case r = <-done:
	case <-time.After(60*time.Second + d):
		gate.Write([]byte("x\n"))
		t.Fatal("Run did not return at the end of the duration")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	recorded := len(c.all())
	before := len(c.where(func(e *tracer.Event) bool { return e.Path == missing }))
	if _, err := gate.Write([]byte("x\n")); err != nil { // let the target go on, past the deadline
		t.Fatal(err)
	}
	if r.res.Finish == nil {
		t.Fatalf("result %+v: no Finish to wait for the target with", r.res)
	}
	finished := make(chan error, 1)
	go func() { finished <- r.res.Finish() }()
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Finish did not return after the target exited")
	}
	if r.res.Exit == nil || r.res.Exit.Code != 42 {
		t.Errorf("exit = %+v, want code 42", r.res.Exit)
	}
	if b, err := os.ReadFile(result); strings.TrimSpace(string(b)) != "ok" {
		t.Errorf("the target's calls after the deadline failed (result %q, %v)", b, err)
	}
	if !strings.Contains(strings.Join(r.res.Notes, "\n"), "stays attached") {
		t.Errorf("notes = %q", r.res.Notes)
	}
	opens := c.where(func(e *tracer.Event) bool { return e.Path == missing })
	if before == 0 {
		return false
	}
	if n := len(c.all()); n != recorded || len(opens) != 1 {
		dump(t, c.all())
		t.Errorf("%d events recorded by the deadline, %d after Finish, %d opens of %s: want the first open only", recorded, n, len(opens), missing)
	}
	return true
}
