package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/report"
)

// The target, another user, owns the directory -o names and changes the
// path while it runs: root cudatrace must neither block on a FIFO planted
// there nor follow a symlink planted there (here to a FIFO the test
// reads, standing for /dev/kmsg), and the report must still be saved.
func TestOutputPathPlantedByTarget(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	victim := filepath.Join(t.TempDir(), "victim") // root's own, 0700 directory
	if err := unix.Mkfifo(victim, 0o600); err != nil {
		t.Fatal(err)
	}
	// Held open for reading (and writing, so it never blocks or sees EOF):
	// whatever root writes through the link lands here.
	// A raw fd: os.File would wait in the poller instead of saying EAGAIN.
	fifo, err := unix.Open(victim, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fifo)
	for _, tc := range []struct{ name, plant string }{
		{"fifo", `mkfifo "$1"`},
		{"symlink", `ln -s "$2" "$1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := sharedDir(t)
			out := filepath.Join(dir, "r.json")
			r := runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "-q", "-u", "65534", "-o", out, "--",
				"/bin/sh", "-c", tc.plant, "sh", out, victim))
			if r.code != 0 {
				t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
			}
			st, err := os.Lstat(out)
			if err != nil || !st.Mode().IsRegular() {
				t.Fatalf("%s is not the report (a regular file): %v %v; stderr:\n%s", out, st, err, r.stderr)
			}
			if _, err := report.LoadFile(out); err != nil {
				t.Errorf("%s does not hold the report: %v", out, err)
			}
			buf := make([]byte, 4096)
			if n, _ := unix.Read(fifo, buf); n > 0 {
				t.Errorf("root wrote through the planted link: %q", buf[:n])
			}
		})
	}
}

// The directory -o names is swapped for a symlink (to root's own
// directory) while the target runs: the report goes to the directory
// first opened, never through the link, and cudatrace says where it went.
func TestOutputDirectorySwappedByTarget(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	parent := sharedDir(t)
	sub := filepath.Join(parent, "sub")
	if err := os.Mkdir(sub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sub, 0o777); err != nil {
		t.Fatal(err)
	}
	protected := t.TempDir()
	out := filepath.Join(sub, "r.json")
	r := runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "-u", "65534", "-o", out, "--",
		"/bin/sh", "-c", `mv "$1/sub" "$1/moved" && ln -s "$2" "$1/sub"`, "sh", parent, protected))
	if r.code != 0 {
		t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if ents, _ := os.ReadDir(protected); len(ents) != 0 {
		t.Errorf("root wrote through the swapped-in symlink: %v", ents)
	}
	moved := filepath.Join(parent, "moved", "r.json")
	if _, err := report.LoadFile(moved); err != nil {
		t.Errorf("the report is not in the directory first opened: %v", err)
	}
	if !strings.Contains(r.stderr, "report written to "+moved) {
		t.Errorf("stderr does not say the report went to %s:\n%s", moved, r.stderr)
	}
}

// -o ” is a usage error, not "no file"; a report asked for and not
// written (-o /dev/full) fails with 1 unless a launched target's status
// wins, as --help says.
func TestOutputEmptyAndUnwritable(t *testing.T) {
	needBinaries(t)
	r := runCLI(t, "explain", recordings+"cuinit-deny-uvm.strace", "-o", "")
	if r.code != exitUsage || !strings.Contains(r.stderr, "empty path") {
		t.Errorf("-o '': exit %d, stderr %q; want 2 and a word on the empty path", r.code, r.stderr)
	}
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full here")
	}
	r = runCLI(t, "explain", recordings+"cuinit-deny-uvm.strace", "-q", "-o", "/dev/full")
	if r.code != exitFailure || !strings.Contains(r.stderr, "report not saved") {
		t.Errorf("explain -o /dev/full: exit %d, stderr %q; want 1, report not saved", r.code, r.stderr)
	}
	r = runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "-q", "-o", "/dev/full", "--", "/bin/sh", "-c", "exit 5"))
	if r.code != 5 || !strings.Contains(r.stderr, "report not saved") {
		t.Errorf("launched -o /dev/full: exit %d, stderr %q; want the target's 5, report not saved", r.code, r.stderr)
	}
	var help strings.Builder
	if err := writeMainHelp(&help); err != nil || !strings.Contains(help.String(), "report not written") {
		t.Errorf("--help does not say which status a failed -o gives:\n%s", help.String())
	}
}
