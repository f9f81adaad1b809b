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
// after the deadline. The deadline comes with the target's first call (the
// backend's expiry, closed by the sink), not after a wall-clock time that a
// loaded machine may reach before the target has started.
func TestLaunchDurationKeepsTargetWorking(t *testing.T) {
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
	expire := make(chan time.Time)
	c.onAdd = func(e *tracer.Event) {
		if e.Path == missing {
			close(expire) // the target now waits on the gate
		}
	}
	type ran struct {
		res *tracer.Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		b := &Backend{expiry: expire}
		res, err := b.Run(context.Background(), tracer.Spec{
			Argv:         []string{"/bin/sh", "-c", script, "sh", fifo, result, missing},
			Duration:     time.Hour, // a trace that can expire; expire says when
			DeferRelease: true,
		}, c)
		done <- ran{res, err}
	}()
	var r ran
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
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
	if n := len(c.all()); before != 1 || n != recorded || len(opens) != 1 {
		dump(t, c.all())
		t.Errorf("%d events recorded by the deadline, %d after Finish, %d opens of %s (%d by the deadline): want the first open only", recorded, n, len(opens), missing, before)
	}
}
