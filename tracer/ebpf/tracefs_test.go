package ebpftrace

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

func countTracefs(mountinfo string) (int, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), " - tracefs "), nil
}

// tracefsCycle runs in a private mount namespace: it drops the tracefs
// mounts it inherited, acquires tracefs (so mounts it), says "acquired",
// waits for a line on stdin, releases, and says how many tracefs mounts its
// namespace still has.
func tracefsCycle() error {
	for _, m := range []string{tracefsDir, "/sys/kernel/debug/tracing", "/sys/kernel/debug"} {
		for unix.Unmount(m, unix.MNT_DETACH) == nil {
		}
	}
	if n, err := countTracefs("/proc/self/mountinfo"); err != nil || n != 0 {
		return fmt.Errorf("tracefs still mounted (%d, %v)", n, err)
	}
	release, err := acquireTracefs()
	if err != nil {
		return err
	}
	n, err := countTracefs("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	fmt.Printf("acquired %d\n", n)
	bufio.NewReader(os.Stdin).ReadString('\n')
	if err := release(); err != nil {
		return err
	}
	n, err = countTracefs("/proc/self/mountinfo")
	fmt.Printf("released %d\n", n)
	return err
}

// A cudatrace that mounted tracefs in its own mount namespace unmounts it
// when it is done, even while a cudatrace elsewhere (here: this process, in
// the host's namespace) still uses its own; and it touches nothing outside
// its namespace.
func TestTracefsPerMountNamespace(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hostBefore, err := countTracefs("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	release, err := acquireTracefs()
	if err != nil {
		t.Fatal(err)
	}
	defer release()

	cmd := exec.Command(self, helperArg, "tracefs-cycle", "-")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes it private
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	line, _ := out.ReadString('\n')
	if line != "acquired 1\n" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("helper said %q, stderr %q; want one tracefs mounted in its namespace", line, stderr.String())
	}
	// We still hold the host namespace's tracefs while the helper releases.
	io.WriteString(stdin, "go\n")
	line, _ = out.ReadString('\n')
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v, stderr %q", err, stderr.String())
	}
	if line != "released 0\n" {
		t.Errorf("helper said %q: its tracefs mount was left behind while another namespace's cudatrace ran", line)
	}
	n, err := countTracefs("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Errorf("the helper's release unmounted the host's tracefs (%d mounts, %d before our acquire)", n, hostBefore)
	}
}

// The state files are named per mount namespace, and the last user removes
// them: namespaces that come and go leave nothing in /run.
func TestTracefsStateFilesRemoved(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, helperArg, "tracefs-cycle", "-")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	cmd.Stdin = strings.NewReader("go\n")
	out, err := cmd.Output()
	if err != nil || string(out) != "acquired 1\nreleased 0\n" {
		t.Fatalf("helper: %v, output %q", err, out)
	}
	// The helper's namespace is gone, and so must its files be. Files of
	// namespaces that still have processes may belong to other runs.
	ents, err := os.ReadDir(stateDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	live := liveMountNamespaces(t)
	for _, e := range ents {
		var ino uint64
		var kind string
		if _, err := fmt.Sscanf(strings.Replace(e.Name(), ".", " ", 1), "tracefs-%d %s", &ino, &kind); err != nil {
			continue
		}
		if !live[ino] {
			t.Errorf("%s left behind for a mount namespace no process is in", filepath.Join(stateDir, e.Name()))
		}
	}
}

// liveMountNamespaces are the inodes of every process's mount namespace.
func liveMountNamespaces(t *testing.T) map[uint64]bool {
	t.Helper()
	live := map[uint64]bool{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		var st unix.Stat_t
		if unix.Stat("/proc/"+p.Name()+"/ns/mnt", &st) == nil {
			live[st.Ino] = true
		}
	}
	return live
}
