package report_test

import (
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

// onlyFile checks that dir holds exactly name: no temporary file of an
// earlier Save is left behind.
func onlyFile(t *testing.T, dir, name string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != name {
		t.Errorf("directory holds %q, want only %q", names, name)
	}
}

func TestSaveReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, []byte("an older report\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := reportfixture.Build(t, reportfixture.All[0])
	if err := report.Save(path, rep); err != nil {
		t.Fatal(err)
	}
	onlyFile(t, dir, "report.json")
	got, err := report.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reportfixture.SameJSON(t, got, rep) {
		t.Error("the saved report does not read back as written")
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0o666 &^ currentUmask(); st.Mode().Perm() != os.FileMode(want) {
		t.Errorf("mode %v, want %v (0666 less the umask)", st.Mode().Perm(), os.FileMode(want))
	}

	// Again over itself: still one file.
	rep.Trace.Notes = []string{"second save"}
	if err := report.Save(path, rep); err != nil {
		t.Fatal(err)
	}
	onlyFile(t, dir, "report.json")
	if got, err := report.LoadFile(path); err != nil || len(got.Trace.Notes) != 1 {
		t.Errorf("second save: %v, notes %v", err, got.Trace.Notes)
	}
}

// A report that fails half-way through encoding leaves the old file as it
// was and no temporary file.
func TestSaveFailedEncodingKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	old := reportfixture.Build(t, reportfixture.All[1])
	if err := report.Save(path, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	bad := reportfixture.Build(t, reportfixture.All[0])
	bad.Trace.Started = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC) // JSON cannot encode years past 9999
	err := report.Save(path, bad)
	if err == nil {
		t.Fatal("Save of an unencodable report succeeded")
	}
	checkOneLine(t, err)
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Error("a failed Save changed the existing report")
	}
	onlyFile(t, dir, "report.json")
}

// A directory Save cannot write to: the error says so and the old report
// stays. As root, permissions do not stop writes, so the directory is made
// read-only with a bind mount in a mount namespace private to one thread,
// which disappears with the thread.
func TestSaveUnwritableDirKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	old := reportfixture.Build(t, reportfixture.All[1])
	if err := report.Save(path, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	rep := reportfixture.Build(t, reportfixture.All[0])

	var saveErr error
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		saveErr = report.Save(path, rep)
	} else {
		done := make(chan error, 1)
		go func() {
			// Never unlocked: the thread, and its namespace, exit with
			// this goroutine.
			runtime.LockOSThread()
			if err := readOnlyView(dir); err != nil {
				done <- err
				return
			}
			saveErr = report.Save(path, rep)
			done <- nil
		}()
		if err := <-done; err != nil {
			t.Fatalf("making %s read-only: %v", dir, err)
		}
	}
	if saveErr == nil {
		t.Fatal("Save into a read-only directory succeeded")
	}
	checkOneLine(t, saveErr)
	if !strings.Contains(saveErr.Error(), dir) {
		t.Errorf("error %q does not name the directory", saveErr)
	}
	after, err := os.ReadFile(path)
	if err != nil || string(after) != string(before) {
		t.Errorf("the old report changed (%v)", err)
	}
	onlyFile(t, dir, "report.json")
}

// readOnlyView gives the calling thread its own mount namespace in which
// dir is a read-only bind mount of itself.
func readOnlyView(dir string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	return unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
}
