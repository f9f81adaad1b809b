package launch

import (
	"os"
	"strconv"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

func TestMain(m *testing.M) {
	RunLoaderIfRequested()
	os.Exit(m.Run())
}

func TestTargetWaitsForRelease(t *testing.T) {
	privtest.Deadline(t) // a loader that never execs would hang Wait
	c, err := Start(Options{Argv: []string{"/bin/sh", "-c", "exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(c.PID) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	if exe != self {
		t.Fatalf("before Release the child runs %s, want the loader %s", exe, self)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if st.Code != 7 || st.Signal != 0 || st.ShellCode() != 7 {
		t.Fatalf("exit = %+v, want code 7", st)
	}
}

func TestSignalledTarget(t *testing.T) {
	privtest.Deadline(t)
	c, err := Start(Options{Argv: []string{"/bin/sh", "-c", "kill -9 $$"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	st, _ := c.Wait()
	if st.Signal != 9 || st.ShellCode() != 137 {
		t.Fatalf("exit = %+v, want signal 9", st)
	}
}

func TestExecFailure(t *testing.T) {
	privtest.Deadline(t)
	c, err := Start(Options{Argv: []string{"/nonexistent/cmd"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	st, _ := c.Wait()
	if st.Code != 127 {
		t.Fatalf("exit = %+v, want 127", st)
	}
}

func TestAbortBeforeRelease(t *testing.T) {
	privtest.Deadline(t)
	c, err := Start(Options{Argv: []string{"/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if err := c.cmd.Process.Signal(os.Signal(nil)); err == nil {
		t.Fatal("loader still running after Abort")
	}
}
