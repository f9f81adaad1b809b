package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// plantedNodes starts an unprivileged target (uid 65534, in a user and
// mount namespace of its own) that binds device nodes the test made over
// its /etc/passwd, /etc/group and /etc/ld.so.cache, and returns its PID and
// a function that says which of the nodes anyone opened since (inotify
// IN_OPEN fires on an open, never on an O_PATH lookup or an fstat).
func plantedNodes(t *testing.T) (pid int, opened func() []string) {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		privtest.Skip(t, "needs unshare (util-linux)")
	}
	dir := sharedDir(t)
	nodes := map[string]string{ // name in /etc: node (major, minor)
		"passwd":      "zero",
		"group":       "zero2",
		"ld.so.cache": "null",
	}
	devs := map[string]int{"zero": int(unix.Mkdev(1, 5)), "zero2": int(unix.Mkdev(1, 5)), "null": int(unix.Mkdev(1, 3))}
	ino, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(ino) })
	watches := map[int32]string{}
	var script strings.Builder
	for etc, n := range nodes {
		p := filepath.Join(dir, n)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, devs[n]); err != nil {
			t.Fatal(err)
		}
		wd, err := unix.InotifyAddWatch(ino, p, unix.IN_OPEN)
		if err != nil {
			t.Fatal(err)
		}
		watches[int32(wd)] = "/etc/" + etc
		script.WriteString("mount --bind " + p + " /etc/" + etc + " && ")
	}
	// sh waits on a builtin: nothing the target runs opens the nodes.
	script.WriteString("echo ready && read x")
	cmd := exec.Command("unshare", "-Urm", "--propagation", "private", "/bin/sh", "-c", script.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		privtest.Skip(t, "an unprivileged user and mount namespace could not be made: "+strconv.Quote(line)+" "+errString(err))
	}
	drain := func() []string {
		var got []string
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(ino, buf)
			if n <= 0 || err != nil {
				return got
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafePointer(buf[off:]))
				got = append(got, watches[ev.Wd])
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
	drain()
	return cmd.Process.Pid, drain
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// doctor --pid and attach read the target's passwd, group and
// ld.so.cache: as root they must look each up O_PATH, see a device, and
// never open it (a watchdog's open can reboot the host).
func TestPlantedNodesNeverOpened(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	pid, opened := plantedNodes(t)
	p := strconv.Itoa(pid)
	r := runBinary(t, exec.Command(cudatraceBin, "doctor", "--pid", p, "-u", "65534"))
	if got := opened(); len(got) != 0 {
		t.Errorf("doctor --pid %s -u 65534 opened the planted nodes at %v; exit %d, stderr:\n%s", p, got, r.code, r.stderr)
	}
	for _, backend := range []string{"ptrace", "ebpf"} {
		r = runBinary(t, exec.Command(cudatraceBin, "--backend", backend, "-q", "--duration", "500ms", "-p", p))
		if got := opened(); len(got) != 0 {
			t.Errorf("--backend %s -p %s opened the planted nodes at %v; exit %d, stderr:\n%s", backend, p, got, r.code, r.stderr)
		}
	}
}

func unsafePointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
