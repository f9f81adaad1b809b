package snapshot

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"golang.org/x/sys/unix"
)

// startPrivateDev starts a shell in its own mount namespace whose /dev is a
// nodev tmpfs holding NVIDIA-like nodes, one of them bind-mounted from
// another tmpfs, and waits until it is set up. The child is killed at the
// end of the test; its namespace, and with it every mount, dies with it.
func startPrivateDev(t *testing.T) *exec.Cmd {
	t.Helper()
	script := strings.Join([]string{
		"set -e",
		"mkdir -p /run/cudatrace-test-src",
		"mount -t tmpfs none /run/cudatrace-test-src",
		"mknod -m 660 /run/cudatrace-test-src/uvm c 238 0",
		"chown 0:44 /run/cudatrace-test-src/uvm",
		"mount -t tmpfs -o nodev none /dev",
		"mknod -m 666 /dev/nvidiactl c 195 255",
		"mknod -m 600 /dev/nvidia0 c 195 0",
		"mkdir /dev/char /dev/nvidia-caps",
		"ln -s ../nvidiactl /dev/char/195:255",
		"mknod -m 400 /dev/nvidia-caps/nvidia-cap1 c 241 1",
		"touch /dev/nvidia-uvm",
		"mount --bind /run/cudatrace-test-src/uvm /dev/nvidia-uvm",
		"echo ready",
		"exec sleep 60",
	}, "\n")
	return startReady(t, []string{"-m", "--propagation", "private"}, script)
}

// startReady runs script under unshare with args, killed at the end of the
// test, and waits until it prints "ready" (failing the test if it does
// not, within a deadline).
func startReady(t *testing.T, args []string, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("unshare", append(args, "sh", "-c", script)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		privtest.Skip(t, "cannot start unshare: "+err.Error())
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("namespace setup failed: %q", stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("namespace setup did not finish: %q", stderr.String())
	}
	// "ready" comes just before the exec: wait for sleep to be running,
	// or a loaded host shows the snapshot the shell.
	ctx := privtest.Deadline(t)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		if err != nil || strings.TrimSpace(string(b)) == "sleep" || ctx.Err() != nil {
			return cmd
		}
		time.Sleep(time.Millisecond)
	}
}

// makeCgroup creates dir and removes it at cleanup. Call it before starting
// the process that joins it: cleanups run last-registered first, so the
// process is then killed before its cgroup is removed.
func makeCgroup(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		privtest.Skip(t, "cannot create cgroup "+dir+": "+err.Error())
	}
	t.Cleanup(func() {
		// The killed child may linger for a moment as a zombie member.
		for i := 0; i < 100; i++ {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})
}

func TestCollectPrivateDevNamespace(t *testing.T) {
	privtest.RequireRoot(t)
	const v1Root, v2Root = "/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified"
	for _, d := range []string{v1Root, v2Root} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
			privtest.Skip(t, d+" is not a cgroup mount on this host")
		}
	}
	name := fmt.Sprintf("cudatrace-snapshot-test-%d", os.Getpid())
	v1Dir, v2Dir := filepath.Join(v1Root, name), filepath.Join(v2Root, name)
	makeCgroup(t, v1Dir)
	makeCgroup(t, v2Dir)
	child := startPrivateDev(t)
	pid := child.Process.Pid
	for _, w := range [][2]string{
		{v1Dir + "/cgroup.procs", strconv.Itoa(pid)},
		{v2Dir + "/cgroup.procs", strconv.Itoa(pid)},
		{v1Dir + "/devices.deny", "a"}, // then allow only major 195
		{v1Dir + "/devices.allow", "c 195:* rwm"},
	} {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil {
			t.Fatal(err)
		}
	}

	fakeDevices := filepath.Join(t.TempDir(), "devices")
	if err := os.WriteFile(fakeDevices, []byte(procDevices580), 0o644); err != nil {
		t.Fatal(err)
	}
	var queried string
	s := Collect(Options{
		PID:             pid,
		ProcDevicesPath: fakeDevices,
		ExtraPaths:      []string{"/dev/nvidia-uvm-tools"},
		QueryCgroupPrograms: func(dir, root string) ([]DeviceProgram, error) {
			queried = dir
			return nil, errors.New("operation not permitted (needs root or CAP_BPF)")
		},
	})

	type nodeFacts struct {
		Exists              bool
		Type                string
		Major, Minor, Mode  uint32
		GID                 uint32
		LinkDest, MountPont string
	}
	want := map[string]nodeFacts{
		"/dev/nvidiactl":               {true, "c", 195, 255, 0o666, 0, "", "/dev"},
		"/dev/nvidia0":                 {true, "c", 195, 0, 0o600, 0, "", "/dev"},
		"/dev/nvidia-uvm":              {true, "c", 238, 0, 0o660, 44, "", "/dev/nvidia-uvm"},
		"/dev/nvidia-uvm-tools":        {false, "", 0, 0, 0, 0, "", "/dev"},
		"/dev/nvidia-caps/nvidia-cap1": {true, "c", 241, 1, 0o400, 0, "", "/dev"},
		"/dev/char/195:255":            {true, "l", 0, 0, 0o777, 0, "../nvidiactl", "/dev"},
	}
	if len(s.Nodes) != len(want) {
		t.Errorf("nodes = %+v", s.Nodes)
	}
	for p, w := range want {
		n := s.Node(p)
		if n == nil {
			t.Errorf("%s missing from snapshot", p)
			continue
		}
		got := nodeFacts{n.Exists, n.Type, n.Major, n.Minor, n.Mode, n.GID, n.LinkDest, n.MountPoint}
		if got != w {
			t.Errorf("%s = %+v, want %+v", p, got, w)
		}
	}
	// cudatrace's own /dev has no such nodes: the view is the target's.
	if _, err := os.Lstat("/dev/nvidiactl"); err == nil {
		t.Log("note: host has a real /dev/nvidiactl")
	}

	mounts := map[string]Mount{}
	for _, m := range s.Mounts {
		mounts[m.MountPoint] = m
	}
	if m, ok := mounts["/dev"]; !ok || !m.NoDev || m.FSType != "tmpfs" || m.Bind {
		t.Errorf("/dev mount = %+v (present %v)", m, ok)
	}
	if m, ok := mounts["/dev/nvidia-uvm"]; !ok || m.NoDev || !m.Bind || m.Root != "/uvm" {
		t.Errorf("uvm bind mount = %+v (present %v)", m, ok)
	}
	if len(s.Mounts) != 2 {
		t.Errorf("mounts = %+v", s.Mounts)
	}

	if m, _ := s.MajorOf("nvidia-uvm"); m != 238 {
		t.Errorf("majors from the fake /proc/devices not used: %v", s.ProcDevices)
	}
	if s.Process.PID != pid || s.Process.Comm != "sleep" || s.Process.UID != 0 || !s.Process.CanMknod() {
		t.Errorf("process = %+v", s.Process)
	}
	if s.CgroupV1 == nil || s.CgroupV1.Path != "/"+name || !reflect.DeepEqual(s.CgroupV1.DevicesList, []string{"c 195:* rwm"}) {
		t.Errorf("cgroup v1 = %+v", s.CgroupV1)
	}
	if s.CgroupV2 == nil || s.CgroupV2.Path != "/"+name || s.CgroupV2.MountPoint != v2Root ||
		queried != v2Dir || s.CgroupV2.QueryError != "operation not permitted (needs root or CAP_BPF)" {
		t.Errorf("cgroup v2 = %+v, queried %q", s.CgroupV2, queried)
	}
	wantUnavail := "cgroup v2 device programs: operation not permitted (needs root or CAP_BPF)"
	if !reflect.DeepEqual(s.Unavailable, []string{wantUnavail}) {
		t.Errorf("unavailable = %q", s.Unavailable)
	}
}

// mountedAt reports whether anything is mounted at dir in this namespace.
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ParseMountinfo(string(mi)) {
		if m.MountPoint == dir {
			return true
		}
	}
	return false
}

func TestMountCgroup2Helper(t *testing.T) {
	privtest.RequireRoot(t)
	dir, unmount, err := mountCgroup2()
	if err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
		unmount()
		t.Fatalf("%s is not cgroup2 (statfs %v, type %#x)", dir, err, fs.Type)
	}
	if !mountedAt(t, dir) {
		t.Errorf("%s not in mountinfo while mounted", dir)
	}
	// A held-open directory makes a plain unmount EBUSY; cleanup must still
	// leave nothing visible.
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unmount(); err != nil {
		t.Fatal(err)
	}
	if mountedAt(t, dir) {
		t.Errorf("%s still mounted", dir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s not removed: %v", dir, err)
	}
}

// TestCollectMountsCgroup2WhenMissing pretends nothing mounted cgroup2 (as
// on the GPU host): Collect mounts it for the query and leaves no trace.
func TestCollectMountsCgroup2WhenMissing(t *testing.T) {
	privtest.RequireRoot(t)
	c := newCollector(Options{
		PID: os.Getpid(),
		QueryCgroupPrograms: func(dir, root string) ([]DeviceProgram, error) {
			var fs unix.Statfs_t
			if err := unix.Statfs(root, &fs); err != nil || fs.Type != unix.CGROUP2_SUPER_MAGIC {
				return nil, fmt.Errorf("%s is not a cgroup2 mount during the query", root)
			}
			if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
				return nil, fmt.Errorf("target cgroup dir: %w", err)
			}
			return []DeviceProgram{{ID: 1, AttachedTo: "/"}}, nil
		},
	})
	c.selfMountinfo = func() (string, error) {
		mi, err := os.ReadFile("/proc/self/mountinfo")
		var kept []string
		for _, line := range strings.Split(string(mi), "\n") {
			if !strings.Contains(line, " - cgroup2 ") {
				kept = append(kept, line)
			}
		}
		return strings.Join(kept, "\n"), err
	}
	s := c.run()
	if s.CgroupV2 == nil || s.CgroupV2.QueryError != "" || len(s.CgroupV2.Programs) != 1 {
		t.Fatalf("cgroup v2 = %+v, unavailable %q", s.CgroupV2, s.Unavailable)
	}
	dir := s.CgroupV2.MountPoint
	if !strings.Contains(dir, "cudatrace-cgroup2-") {
		t.Fatalf("mount point %q is not a temporary one", dir)
	}
	if mountedAt(t, dir) {
		t.Errorf("temporary cgroup2 mount %s left behind", dir)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary dir %s left behind: %v", dir, err)
	}
}

// TestCollectSelfLive checks Collect against what Go itself knows about
// this process and host; it needs no root and no GPU.
func TestCollectSelfLive(t *testing.T) {
	s := Collect(Options{PID: os.Getpid(), ExtraPaths: []string{"/dev/null"}})
	if s.Process.UID != uint32(os.Geteuid()) || s.Process.GID != uint32(os.Getegid()) || s.Process.Comm == "" {
		t.Errorf("process = %+v", s.Process)
	}
	if len(s.ProcDevices) == 0 || s.MajorName(1) != "mem" {
		t.Errorf("proc devices = %v", s.ProcDevices)
	}
	if n := s.Node("/dev/null"); n == nil || !n.Exists || n.Type != "c" || n.Major != 1 || n.Minor != 3 {
		t.Errorf("/dev/null = %+v", n)
	}
	if h, _ := os.Hostname(); s.Host.Hostname != h || s.Host.Kernel == "" {
		t.Errorf("host = %+v", s.Host)
	}
	for _, u := range s.Unavailable {
		if strings.Contains(u, "panic") {
			t.Error(u)
		}
	}
}

const helperEnv = "CUDATRACE_SNAPSHOT_UNPRIV_TARGET"

// TestMain doubles as the helper of TestCollectUnprivileged: started as
// nobody with helperEnv set, the test binary collects a snapshot of another
// user's process, prints it and exits.
func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		os.Exit(unprivilegedHelper(v))
	}
	if pid := os.Getenv(nodeNameHelperEnv); pid != "" {
		initUTS = "/proc/" + pid + "/ns/uts"
		if err := syscall.Sethostname([]byte("pod-x")); err != nil {
			fmt.Println("sethostname:", err)
		}
		fmt.Println(NodeName())
		os.Exit(0)
	}
	if v := os.Getenv(podHelperEnv); v != "" {
		os.Exit(podHelper(v))
	}
	os.Exit(m.Run())
}

func unprivilegedHelper(pidText string) int {
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad pid:", err)
		return 2
	}
	s := Collect(Options{PID: pid, KmsgSince: time.Now().Add(-time.Minute),
		QueryCgroupPrograms: func(string, string) ([]DeviceProgram, error) { return nil, nil }})
	b, err := json.Marshal(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("SNAPSHOT %s\n", b)
	return 0
}

// TestCollectUnprivileged collects, as user nobody, a snapshot of a root
// process: nothing fails, and what nobody may not read is listed.
func TestCollectUnprivileged(t *testing.T) {
	privtest.RequireRoot(t)
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()

	// The test binary sits in a root-only build directory; nobody needs a
	// copy it can execute.
	dir, err := os.MkdirTemp("", "cudatrace-snapshot-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "snapshot.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil || os.Chmod(dir, 0o755) != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = "/"
	cmd.Env = []string{helperEnv + "=" + strconv.Itoa(target.Process.Pid)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as nobody: %v\n%s", err, out)
	}
	_, js, ok := strings.Cut(string(out), "SNAPSHOT ")
	if !ok {
		t.Fatalf("no snapshot in helper output:\n%s", out)
	}
	js, _, _ = strings.Cut(js, "\n")
	var s Snapshot
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	has := func(prefix string) bool {
		for _, u := range s.Unavailable {
			if strings.HasPrefix(u, prefix) {
				return true
			}
		}
		return false
	}
	for _, want := range []string{
		"target root (nodes, mounts and user names are cudatrace's own view): permission denied",
		"target environment: permission denied",
	} {
		if !has(want) {
			t.Errorf("unavailable lacks %q: %q", want, s.Unavailable)
		}
	}
	if restrict, _ := os.ReadFile("/proc/sys/kernel/dmesg_restrict"); strings.TrimSpace(string(restrict)) == "1" && !has("kernel log: /dev/kmsg: operation not permitted") {
		t.Errorf("unreadable kernel log not listed: %q", s.Unavailable)
	}
	// Status is world-readable, so the credentials are still right.
	if s.Process.PID != target.Process.Pid || s.Process.UID != 0 || s.Process.Comm != "sleep" || s.Env != nil {
		t.Errorf("process = %+v env %v", s.Process, s.Env)
	}
	if len(s.ProcDevices) == 0 || s.CgroupV2 == nil {
		t.Errorf("host-wide facts missing: devices %v cgroup v2 %+v", s.ProcDevices, s.CgroupV2)
	}
}
