package report_test

import (
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/report"
)

func currentUmask() int {
	m := unix.Umask(0)
	unix.Umask(m)
	return m
}

// A new report gets 0666 less the user's umask, not a fixed 0644: with
// umask 077 nobody else can read it.
func TestSaveHonoursUmask(t *testing.T) {
	for _, mask := range []int{0o077, 0o022, 0o002} {
		old := unix.Umask(mask)
		path := filepath.Join(t.TempDir(), "r.json")
		err := report.Save(path, reportfixture.Build(t, reportfixture.All[0]))
		unix.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if want := os.FileMode(0o666 &^ mask); st.Mode().Perm() != want {
			t.Errorf("umask %03o: mode %v, want %v", mask, st.Mode().Perm(), want)
		}
	}
}

// A character device is written through, never replaced: as root, -o
// /dev/null used to rename a regular file over the node.
func TestSaveWritesThroughCharDevice(t *testing.T) {
	before, err := os.Stat("/dev/null")
	if err != nil || before.Mode()&os.ModeCharDevice == 0 {
		t.Skipf("/dev/null is not a character device here: %v", err)
	}
	if err := report.CheckOutput("/dev/null"); err != nil {
		t.Fatalf("CheckOutput(/dev/null): %v", err)
	}
	if err := report.Save("/dev/null", reportfixture.Build(t, reportfixture.All[0])); err != nil {
		t.Fatalf("Save(/dev/null): %v", err)
	}
	after, err := os.Stat("/dev/null")
	if err != nil || after.Mode()&os.ModeCharDevice == 0 || !os.SameFile(before, after) {
		t.Fatalf("/dev/null was replaced: %v %v", after.Mode(), err)
	}
	ents, _ := os.ReadDir("/dev")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".null.tmp") {
			t.Errorf("temporary file left in /dev: %s", e.Name())
		}
	}
}

// A FIFO gets the report through it, and stays a FIFO.
func TestSaveWritesThroughFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pipe")
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := report.CheckOutput(path); err != nil {
		t.Fatalf("CheckOutput(fifo): %v", err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(path) // opens for reading, so Save's open returns
		got <- string(b)
	}()
	rep := reportfixture.Build(t, reportfixture.All[0])
	if err := report.Save(path, rep); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		back, err := report.Load(strings.NewReader(s))
		if err != nil || !reportfixture.SameJSON(t, back, rep) {
			t.Errorf("the FIFO's reader did not get the report: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the FIFO's reader got nothing")
	}
	if st, err := os.Lstat(path); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO was replaced: %v %v", st.Mode(), err)
	}
}

// What Save must not write, and CheckOutput reports before any trace: each
// in one line naming the path, leaving what is there as it was.
func TestSaveRefuses(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{sub, "is a directory"},
		{link, "is a symlink"},
		{sock, "not a regular file, character device or FIFO"},
		{filepath.Join(dir, "missing", "r.json"), "does not exist"},
		// A directory that exists but takes no files: not "does not exist".
		{"/proc/self/cudatrace-report.json", "/proc/self takes no new files"},
		{filepath.Join(victim, "r.json"), "not a directory"},
	} {
		for name, f := range map[string]func() error{
			"CheckOutput": func() error { return report.CheckOutput(tc.path) },
			"Save":        func() error { return report.Save(tc.path, reportfixture.Build(t, reportfixture.All[0])) },
		} {
			err := f()
			if err == nil {
				t.Errorf("%s(%s) succeeded", name, tc.path)
				continue
			}
			checkOneLine(t, err)
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("%s(%s): %q, want it to name the path and say %q", name, tc.path, err, tc.want)
			}
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Error("the symlink was replaced")
	}
	if st, err := os.Stat(sub); err != nil || !st.IsDir() {
		t.Error("the directory was replaced")
	}
}

// A read-only directory is found by CheckOutput, before the trace.
func TestCheckOutputReadOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	var err error
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		err = report.CheckOutput(path)
		if err == nil || !strings.Contains(err.Error(), "no permission") {
			t.Errorf("CheckOutput in a 0555 directory: %v", err)
		}
		return
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the namespace dies with the thread
		if e := readOnlyView(dir); e != nil {
			done <- e
			return
		}
		err = report.CheckOutput(path)
		done <- nil
	}()
	if e := <-done; e != nil {
		t.Fatalf("making %s read-only: %v", dir, e)
	}
	if err == nil || !strings.Contains(err.Error(), "read-only file system") || !strings.Contains(err.Error(), dir) {
		t.Errorf("CheckOutput on a read-only mount: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("CheckOutput left %d files behind", len(ents))
	}
}
