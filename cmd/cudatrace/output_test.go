package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/report"
)

// markerTarget is a target that leaves a file behind when it runs.
func markerTarget(t *testing.T) (marker string, argv []string) {
	marker = filepath.Join(t.TempDir(), "ran")
	return marker, []string{"/bin/sh", "-c", "touch " + marker}
}

// A bad -o is found before the target starts: one line, exit 1, and the
// target never ran.
func TestOutputCheckedBeforeLaunch(t *testing.T) {
	needBinaries(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ out, want string }{
		{filepath.Join(dir, "missing", "r.json"), "does not exist"},
		{dir, "is a directory"},
		{link, "is a symlink"},
		{filepath.Join(file, "r.json"), "not a directory"},
	} {
		marker, target := markerTarget(t)
		r := runBinary(t, exec.Command(cudatraceBin, append([]string{"--backend", "ptrace", "-o", tc.out, "--"}, target...)...))
		if r.code != exitFailure {
			t.Errorf("-o %s: exit %d, want 1; stderr:\n%s", tc.out, r.code, r.stderr)
		}
		oneLineError(t, r, tc.want)
		if !strings.Contains(r.stderr, tc.out) {
			t.Errorf("-o %s: the error does not name the path: %q", tc.out, r.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("-o %s: the target ran although -o was unusable", tc.out)
		}
	}
	// Attach and the offline commands check it first too.
	bad := filepath.Join(dir, "missing", "r.json")
	for _, args := range [][]string{{"-p", "1"}, {"explain", recordings + "cuinit-deny-uvm.strace"}} {
		r := runCLI(t, append(args, "-o", bad)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "does not exist") || r.stdout != "" {
			t.Errorf("%v -o %s: exit %d, stdout %q, stderr %q", args, bad, r.code, r.stdout, r.stderr)
		}
	}
}

// A read-only mount is found before the trace as well (root: a bind mount
// made read-only in the command's own mount namespace).
func TestOutputReadOnlyBeforeLaunch(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		privtest.Skip(t, "needs unshare (util-linux)")
	}
	dir := t.TempDir()
	marker, target := markerTarget(t)
	script := `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"`
	args := append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", dir,
		cudatraceBin, "--backend", "ptrace", "-o", filepath.Join(dir, "r.json"), "--"}, target...)
	r := runBinary(t, exec.Command("unshare", args...))
	if r.code != exitFailure {
		t.Errorf("exit %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	oneLineError(t, r, "read-only file system")
	if _, err := os.Stat(marker); err == nil {
		t.Error("the target ran although -o was on a read-only mount")
	}
}

// If saving fails at the end all the same, the report is still printed,
// the target's exit status is kept, and the last line says what failed.
func TestSaveFailureKeepsReportAndStatus(t *testing.T) {
	needBinaries(t)
	dir := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.json")
	r := runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "-o", out, "--", "/bin/sh", "-c", `rmdir "$1"; exit 7`, "sh", dir))
	if r.code != 7 {
		t.Errorf("exit %d, want the target's 7; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "Trace: backend: ptrace") {
		t.Errorf("the report was not printed:\n%s", r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "cudatrace: report not saved: ") || !strings.Contains(last, dir) {
		t.Errorf("last line %q does not say the report was not saved to %s", last, dir)
	}
}

// Where each kind of output goes (strace's convention for a launched
// target; stdout for everything else, and for --format json).
func TestOutputRouting(t *testing.T) {
	needBinaries(t)
	target := []string{"/bin/sh", "-c", "echo target-output"}
	launch := func(args ...string) result {
		return runBinary(t, exec.Command(cudatraceBin, append(append([]string{"--backend", "ptrace"}, args...), append([]string{"--"}, target...)...)...))
	}
	jsonAfter := func(name, s, prefix string) {
		t.Helper()
		rest, ok := strings.CutPrefix(s, prefix)
		if !ok {
			t.Errorf("%s: stdout does not start with %q:\n%.300s", name, prefix, s)
			return
		}
		if _, err := report.Load(strings.NewReader(rest)); err != nil {
			t.Errorf("%s: stdout after %q is not a report: %v", name, prefix, err)
		}
	}

	r := launch()
	if r.stdout != "target-output\n" || !strings.Contains(r.stderr, "Timeline") {
		t.Errorf("launched, text: stdout %q (want the target's only), stderr:\n%s", r.stdout, r.stderr)
	}
	r = launch("--format", "json")
	jsonAfter("launched --format json", r.stdout, "target-output\n")
	if strings.Contains(r.stderr, "Timeline") {
		t.Errorf("launched --format json: text report on stderr too:\n%s", r.stderr)
	}
	r = launch("-o", "-")
	jsonAfter("launched -o -", r.stdout, "target-output\n")
	if !strings.Contains(r.stderr, "Timeline") {
		t.Errorf("launched -o -: no text report on stderr:\n%s", r.stderr)
	}
	r = launch("-o", "-", "--format", "json")
	jsonAfter("launched -o - --format json", r.stdout, "target-output\n") // once, not twice

	log := recordings + "cuinit-deny-uvm.strace"
	r = runCLI(t, "explain", log)
	if !strings.Contains(r.stdout, "Timeline") || r.stderr != "" {
		t.Errorf("explain: stdout %.200q, stderr %q", r.stdout, r.stderr)
	}
	r = runCLI(t, "explain", log, "-o", "-")
	jsonAfter("explain -o -", r.stdout, "")
	if !strings.Contains(r.stderr, "Timeline") {
		t.Errorf("explain -o -: no text report on stderr:\n%s", r.stderr)
	}
}

// Attached, the report goes to stdout: nothing of the target's is there.
func TestAttachReportOnStdout(t *testing.T) {
	privtest.RequireRoot(t) // ptrace attach to a process that is not our child
	needBinaries(t)
	sleeper := exec.Command("/bin/sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() }()
	time.Sleep(50 * time.Millisecond) // let it exec
	r := runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "--duration", "300ms", "-p", strconv.Itoa(sleeper.Process.Pid)))
	if !strings.Contains(r.stdout, "Trace: backend: ptrace") || strings.Contains(r.stderr, "Trace:") {
		t.Errorf("attach: stdout %q\nstderr %q", r.stdout, r.stderr)
	}
}

// -o /dev/null writes through: the node stays a node, even as root.
func TestOutputDevNullStaysANode(t *testing.T) {
	needBinaries(t)
	before, err := os.Stat("/dev/null")
	if err != nil || before.Mode()&os.ModeCharDevice == 0 {
		t.Skip("no character device /dev/null here")
	}
	r := runBinary(t, exec.Command(cudatraceBin, "--backend", "ptrace", "-q", "-o", "/dev/null", "--", "true"))
	if r.code != 0 {
		t.Errorf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	after, err := os.Stat("/dev/null")
	if err != nil || !os.SameFile(before, after) || after.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null was replaced: %v %v", after.Mode(), err)
	}
}

// -o json writes a file named json, as asked, with a warning that says so.
func TestOutputFormatNameWarns(t *testing.T) {
	log, err := filepath.Abs(recordings + "cuinit-deny-uvm.strace")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Chdir(dir)
	r := runCLI(t, "explain", log, "-o", "json")
	if !strings.Contains(r.stderr, `warning: -o json writes a file named "json"`) {
		t.Errorf("no warning: %q", r.stderr)
	}
	if _, err := report.LoadFile(filepath.Join(dir, "json")); err != nil {
		t.Errorf("the file json was not written: %v", err)
	}
}
