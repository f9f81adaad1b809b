package ptrace

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/tracer"
)

// collector is a Sink that keeps every event.
type collector struct {
	mu     sync.Mutex
	events []tracer.Event
	onAdd  func(*tracer.Event)
}

// Event keeps a deep copy: the backend reuses what e points to.
func (c *collector) Event(e *tracer.Event) {
	c.mu.Lock()
	c.events = append(c.events, e.Copy())
	c.mu.Unlock()
	if c.onAdd != nil {
		c.onAdd(e)
	}
}

func (c *collector) all() []tracer.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

func (c *collector) where(f func(*tracer.Event) bool) []tracer.Event {
	var out []tracer.Event
	for _, e := range c.all() {
		if f(&e) {
			out = append(out, e)
		}
	}
	return out
}

func dump(t *testing.T, evs []tracer.Event) {
	t.Helper()
	for _, e := range evs {
		t.Logf("  #%d %d/%d %s %s %s %q ret=%d dev=%v fd=%d req=%#x mode=%#o flags=%#x argv=%q exit=%d sig=%d",
			e.Seq, e.PID, e.TID, e.Comm, e.Kind, e.Syscall, e.Path, e.Ret, e.Dev, e.FD, e.Request, e.Mode, e.Flags, e.Argv, e.ExitCode, e.Signal)
	}
}

func randName() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// fakeNode creates /dev/nvidiactl-cudatrace-ptest-RAND as c 1:3 (a second
// /dev/null) and returns its path and a prefix for other test paths.
func fakeNode(t *testing.T) (node, prefix string) {
	t.Helper()
	privtest.RequireRoot(t)
	r := randName()
	node = "/dev/nvidiactl-cudatrace-ptest-" + r
	prefix = "/dev/nvidia-cudatrace-ptest-" + r
	if err := unix.Mknod(node, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod %s: %v", node, err)
	}
	t.Cleanup(func() {
		os.Remove(node)
		for _, s := range []string{"-mk", "-link", "-dir", "-creat", "-ldir"} {
			os.Remove(prefix + s)
		}
	})
	return node, prefix
}

func runLaunch(t *testing.T, argv []string, majors []uint32) (*tracer.Result, *collector, Stats) {
	t.Helper()
	b := New().(*Backend)
	c := &collector{}
	res, err := b.Run(privtest.Deadline(t), tracer.Spec{Argv: argv, DeviceMajors: majors}, c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res, c, b.Stats()
}

func devIs(d *tracer.Dev, major, minor uint32) bool {
	return d != nil && d.Major == major && d.Minor == minor
}

func TestLaunchDeviceCalls(t *testing.T) {
	node, prefix := fakeNode(t)
	res, c, stats := runLaunch(t, helperArgv("calls", node, prefix), []uint32{1})
	if res.Exit == nil || res.Exit.Code != 0 || res.Exit.Signal != 0 {
		dump(t, c.all())
		t.Fatalf("exit = %+v, want 0", res.Exit)
	}
	if res.Backend != "ptrace" || !res.Launched || res.Events != uint64(len(c.all())) {
		t.Errorf("result = %+v", res)
	}
	evs := c.all()
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
	root := evs[0].PID
	mine := c.where(func(e *tracer.Event) bool { return e.PID == root })
	find := func(kind tracer.Kind, path string, syscall string) *tracer.Event {
		for i := range mine {
			e := &mine[i]
			if e.Kind == kind && (path == "" || e.Path == path) && (syscall == "" || e.Syscall == syscall) {
				return e
			}
		}
		dump(t, evs)
		t.Fatalf("no %s %s %s event", kind, syscall, path)
		return nil
	}

	exec0 := find(tracer.KindExec, "", "execve")
	if exec0.Ret != 0 || len(exec0.Argv) != 4 || exec0.Argv[1] != helperArg || exec0.Argv[2] != "calls" || exec0.Argv[3] != node {
		t.Errorf("exec = %+v", exec0)
	}
	open := find(tracer.KindOpen, node, "openat")
	if open.Ret < 0 || !devIs(open.Dev, 1, 3) || open.Flags&unix.O_RDWR == 0 || open.Comm != "ptrace.test" {
		t.Errorf("open = %+v", open)
	}
	ioctl := find(tracer.KindIoctl, "", "")
	want := make([]byte, 32)
	for i := range want {
		want[i] = byte(i + 1)
	}
	if ioctl.Request != testIoctl || ioctl.FD != int(open.Ret) || ioctl.Errno() != unix.ENOTTY || !devIs(ioctl.Dev, 1, 3) || len(ioctl.Arg) != 64 || !bytes.Equal(ioctl.Arg[:32], want) {
		t.Errorf("ioctl = %+v", ioctl)
	}
	var badFD *tracer.Event
	for i := range mine {
		if mine[i].Kind == tracer.KindIoctl && mine[i].FD == -1 {
			badFD = &mine[i]
		}
	}
	if badFD == nil || badFD.Errno() != unix.EBADF || badFD.Dev != nil || badFD.Request != testIoctl {
		t.Errorf("ioctl on fd -1 = %+v", badFD)
	}
	missing := find(tracer.KindOpen, prefix+"-missing", "openat")
	if missing.Errno() != unix.ENOENT || missing.Dev != nil {
		t.Errorf("missing open = %+v", missing)
	}
	var nodeSt unix.Stat_t
	unix.Stat(node, &nodeSt)
	for _, sc := range []string{"newfstatat", "statx"} {
		st := find(tracer.KindStat, node, sc)
		if st.Ret != 0 || st.Mode != nodeSt.Mode || st.Mode&unix.S_IFMT != unix.S_IFCHR || !devIs(st.Dev, 1, 3) {
			t.Errorf("%s = %+v", sc, st)
		}
	}
	if a := find(tracer.KindAccess, node, ""); a.Ret != 0 || a.Flags != unix.R_OK {
		t.Errorf("access = %+v", a)
	}
	if m := find(tracer.KindMknod, prefix+"-mk", "mknodat"); m.Ret != 0 || m.Mode != unix.S_IFCHR|0o600 || !devIs(m.Dev, 1, 3) {
		t.Errorf("mknod = %+v", m)
	}
	if s := find(tracer.KindSymlink, prefix+"-link", "symlinkat"); s.Ret != 0 || s.Target != "nvidiactl" {
		t.Errorf("symlink = %+v", s)
	}
	find(tracer.KindUnlink, prefix+"-link", "unlinkat")
	find(tracer.KindUnlink, prefix+"-mk", "unlinkat")
	if m := find(tracer.KindMkdir, prefix+"-dir", "mkdirat"); m.Ret != 0 || m.Mode != 0o700 {
		t.Errorf("mkdir = %+v", m)
	}
	if m := find(tracer.KindMemfd, "cudatrace-ptest", "memfd_create"); m.Ret < 0 || m.Flags != unix.MFD_CLOEXEC {
		t.Errorf("memfd = %+v", m)
	}
	if haveLegacy {
		for _, k := range []struct {
			kind tracer.Kind
			sc   string
		}{{tracer.KindOpen, "open"}, {tracer.KindStat, "stat"}, {tracer.KindAccess, "access"}} {
			if e := find(k.kind, prefix+"-missing", k.sc); e.Errno() != unix.ENOENT {
				t.Errorf("%s = %+v", k.sc, e)
			}
		}
		if e := find(tracer.KindOpen, prefix+"-creat", "creat"); e.Ret < 0 || e.Flags != creatFlags || e.Mode != 0o600 {
			t.Errorf("creat = %+v", e)
		}
		find(tracer.KindUnlink, prefix+"-creat", "unlink")
	}
	for _, e := range mine {
		if strings.HasPrefix(e.Path, "/proc/self") || (e.Kind == tracer.KindIoctl && e.FD >= 0 && e.FD != int(open.Ret)) {
			t.Errorf("untraced call recorded: %+v", e)
		}
	}
	last := evs[len(evs)-1]
	if last.Kind != tracer.KindExit || last.Syscall != "exit" || last.PID != root || last.ExitCode != 0 {
		t.Errorf("last event = %+v, want the exit of %d", last, root)
	}
	if stats.MaxStopsPerCall < 1 || stats.MaxStopsPerCall > 2 {
		t.Errorf("a traced syscall took %d stops, want at most 2 (%+v)", stats.MaxStopsPerCall, stats)
	}
	if stats.SyscallStops > stats.SeccompStops || stats.SeccompStops < uint64(len(mine)-1) {
		t.Errorf("stops %+v for %d events", stats, len(mine))
	}
}

func TestLaunchProcessTree(t *testing.T) {
	missing := "/dev/nvidia-cudatrace-ptest-missing-" + randName()
	script := fmt.Sprintf(`/bin/sh -c '/bin/cat %s; exit 3'; exit 7`, missing)
	res, c, stats := runLaunch(t, []string{"/bin/sh", "-c", script}, nil)
	evs := c.all()
	if res.Exit == nil || res.Exit.Code != 7 {
		dump(t, evs)
		t.Fatalf("exit = %+v, want 7", res.Exit)
	}
	root := evs[0].PID
	opens := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == missing })
	if len(opens) != 1 || opens[0].Errno() != unix.ENOENT || opens[0].Comm != "cat" {
		dump(t, evs)
		t.Fatalf("opens of %s: %+v", missing, opens)
	}
	cat := opens[0].PID
	execs := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExec && e.Ret == 0 })
	var child int
	for _, e := range execs {
		if e.Path == "/bin/sh" && e.PID != root {
			child = e.PID
		}
	}
	if child == 0 || cat == root || cat == child {
		dump(t, evs)
		t.Fatalf("root %d, child sh %d, cat %d: want three processes", root, child, cat)
	}
	exits := map[int]tracer.Event{}
	for _, e := range c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExit }) {
		exits[e.PID] = e
	}
	if exits[cat].ExitCode != 1 || exits[child].ExitCode != 3 || exits[root].ExitCode != 7 || len(exits) != 3 {
		dump(t, evs)
		t.Errorf("exits = %+v", exits)
	}
	if stats.MaxStopsPerCall > 2 {
		t.Errorf("a traced syscall took %d stops", stats.MaxStopsPerCall)
	}
}

func TestLaunchKilled(t *testing.T) {
	res, c, _ := runLaunch(t, []string{"/bin/sh", "-c", "kill -9 $$"}, nil)
	if res.Exit == nil || res.Exit.Signal != 9 || res.Exit.ShellCode() != 137 {
		t.Fatalf("exit = %+v", res.Exit)
	}
	evs := c.all()
	if last := evs[len(evs)-1]; last.Kind != tracer.KindExit || last.Signal != 9 {
		dump(t, evs)
		t.Errorf("last event = %+v", last)
	}
}

func TestLaunchCommandNotFound(t *testing.T) {
	res, c, _ := runLaunch(t, []string{"/nonexistent/cudatrace-ptest"}, nil)
	if res.Exit == nil || res.Exit.Code != 127 {
		t.Fatalf("exit = %+v, want 127", res.Exit)
	}
	ex := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExec })
	if len(ex) != 1 || ex[0].Errno() != unix.ENOENT || ex[0].Path != "/nonexistent/cudatrace-ptest" {
		dump(t, c.all())
		t.Errorf("exec events = %+v", ex)
	}
}

func TestLaunchSecondThread(t *testing.T) {
	missing := "/dev/nvidia-cudatrace-ptest-missing-" + randName()
	out := filepath.Join(t.TempDir(), "tids")
	_, c, _ := runLaunch(t, helperArgv("thread", missing, out), nil)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var pid, tid int
	fmt.Sscanf(string(b), "%d %d", &pid, &tid)
	opens := c.where(func(e *tracer.Event) bool { return e.Path == missing })
	if len(opens) != 1 || opens[0].PID != pid || opens[0].TID != tid || tid == pid {
		dump(t, c.all())
		t.Fatalf("open from thread %d of %d: %+v", tid, pid, opens)
	}
}

// startLoop starts (untraced) a shell that keeps spawning cat on node and
// appends a line to a log after each round.
func startLoop(t *testing.T, node string) (*exec.Cmd, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf(`while :; do /bin/cat %s >/dev/null; echo x >> %s; sleep 0.02; done`, node, log))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, log
}

// waitGrowth waits until the file has grown by n lines, failing after a
// generous deadline (a hang guard, not a timing assertion).
func waitGrowth(t *testing.T, path string, n int) {
	t.Helper()
	count := func() int { b, _ := os.ReadFile(path); return bytes.Count(b, []byte("\n")) }
	start := count()
	for deadline := time.Now().Add(30 * time.Second); count() < start+n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not grow: the target is stuck", path)
		}
	}
}

func assertUntraced(t *testing.T, pid int) {
	t.Helper()
	tids, err := listTasks(pid)
	if err != nil {
		t.Fatalf("target %d gone: %v", pid, err)
	}
	for _, tid := range tids {
		if tp := tracerOf(tid); tp != 0 {
			t.Errorf("thread %d still traced by %d", tid, tp)
		}
		if st, _ := procStatusField(tid, "State"); strings.HasPrefix(st, "t") || strings.HasPrefix(st, "T") || strings.HasPrefix(st, "Z") {
			t.Errorf("thread %d left in state %s", tid, st)
		}
	}
}

// attachUntil attaches to pid and cancels once enough events matched.
func attachUntil(t *testing.T, pid int, majors []uint32, enough func(*tracer.Event) bool, n int) (*tracer.Result, *collector) {
	t.Helper()
	ctx, cancel := context.WithCancel(privtest.Deadline(t))
	defer cancel()
	seen := 0
	c := &collector{onAdd: func(e *tracer.Event) {
		if enough(e) {
			if seen++; seen == n {
				cancel()
			}
		}
	}}
	res, err := New().Run(ctx, tracer.Spec{PIDs: []int{pid}, DeviceMajors: majors}, c)
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	return res, c
}

// attachNode is the node the attach tests open: the fake NVIDIA node as
// root, else /dev/null (its major is given as the NVIDIA major).
func attachNode(t *testing.T) string {
	if os.Geteuid() == 0 {
		node, _ := fakeNode(t)
		return node
	}
	return "/dev/null"
}

func TestAttachShellLoop(t *testing.T) {
	node := attachNode(t)
	cmd, log := startLoop(t, node)
	waitGrowth(t, log, 1)
	// The shell's own ">/dev/null" shows when node is /dev/null: count cat's.
	catOpen := func(e *tracer.Event) bool {
		return e.Kind == tracer.KindOpen && e.Path == node && e.Flags&unix.O_ACCMODE == unix.O_RDONLY
	}
	res, c := attachUntil(t, cmd.Process.Pid, []uint32{1}, catOpen, 3)
	evs := c.all()
	opens := c.where(catOpen)
	if len(opens) < 3 {
		dump(t, evs)
		t.Fatalf("%d opens of %s", len(opens), node)
	}
	for _, o := range opens {
		// Each cat was forked after the attach: following children works.
		if o.PID == cmd.Process.Pid || o.Comm != "cat" || !devIs(o.Dev, 1, 3) || o.Ret < 0 {
			t.Errorf("open = %+v", o)
		}
	}
	if len(c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindExec && e.Path == "/bin/cat" })) == 0 {
		t.Errorf("no exec of cat recorded")
	}
	if res.Exit != nil || res.Launched || len(res.Notes) == 0 || !strings.Contains(res.Notes[0], "calls made before the attach are not in this trace") {
		t.Errorf("result = %+v", res)
	}
	// Detached: it runs on, untraced.
	assertUntraced(t, cmd.Process.Pid)
	waitGrowth(t, log, 3)
	assertUntraced(t, cmd.Process.Pid)
	if n := len(c.all()); n != len(evs) {
		t.Errorf("%d events arrived after Run returned", n-len(evs))
	}
}

func TestAttachThreadedProcess(t *testing.T) {
	node := attachNode(t)
	log := filepath.Join(t.TempDir(), "log")
	cmd := exec.Command(helperArgv("spin", node, log)[0], helperArgv("spin", node, log)[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitGrowth(t, log, 2)
	pid := cmd.Process.Pid
	_, c := attachUntil(t, pid, []uint32{1}, func(e *tracer.Event) bool { return e.Path == node }, 12)
	tids := map[int]bool{}
	for _, e := range c.where(func(e *tracer.Event) bool { return e.Path == node }) {
		if e.PID != pid || e.TID == pid || !devIs(e.Dev, 1, 3) {
			t.Errorf("event = %+v", e)
		}
		tids[e.TID] = true
	}
	if len(tids) < 2 {
		t.Errorf("opens came from threads %v, want the spinning threads", tids)
	}
	assertUntraced(t, pid)
	waitGrowth(t, log, 3)
	assertUntraced(t, pid)
}

func TestAttachDuration(t *testing.T) {
	cmd, log := startLoop(t, "/dev/null")
	res, err := New().Run(privtest.Deadline(t), tracer.Spec{PIDs: []int{cmd.Process.Pid}, Duration: 200 * time.Millisecond}, &collector{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Ended.Before(res.Started) {
		t.Errorf("result = %+v", res)
	}
	assertUntraced(t, cmd.Process.Pid)
	waitGrowth(t, log, 2)
}

func TestAttachErrors(t *testing.T) {
	runtime.LockOSThread() // keep this thread (and its tid) alive
	defer runtime.UnlockOSThread()
	// A PID that existed and was reaped: free, barring reuse.
	dead := exec.Command("/bin/true")
	dead.Run()
	cases := []struct {
		pids []int
		want string
	}{
		{[]int{dead.Process.Pid}, "no such process"},
		{[]int{-4}, "no such process"},
		{[]int{os.Getpid()}, "cudatrace itself"},
		{[]int{unix.Gettid()}, "cudatrace itself"}, // this thread
	}
	for _, tc := range cases {
		_, err := New().Run(privtest.Deadline(t), tracer.Spec{PIDs: tc.pids}, &collector{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("attach %v: err = %v, want %q", tc.pids, err, tc.want)
		}
	}
	if _, err := New().Run(privtest.Deadline(t), tracer.Spec{}, &collector{}); err == nil {
		t.Error("empty spec accepted")
	}
}

// TestAttachRefused runs as a user who cannot trace pid 1.
func TestAttachRefused(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may trace anything; TestUnprivileged runs this as nobody")
	}
	_, err := New().Run(privtest.Deadline(t), tracer.Spec{PIDs: []int{1}}, &collector{})
	if err == nil || !strings.Contains(err.Error(), "ptrace refused") {
		t.Fatalf("err = %v", err)
	}
}

func TestNoNewPrivsNote(t *testing.T) {
	res, _, _ := runLaunch(t, []string{"/bin/true"}, nil)
	has := slices.Contains(res.Notes, NoNewPrivsNote)
	if has == hasCapSysAdmin() {
		t.Errorf("notes = %q with CAP_SYS_ADMIN=%v", res.Notes, hasCapSysAdmin())
	}
}

// TestUnprivileged re-runs the tests that need no root as user nobody,
// from a copy of the test binary nobody can execute.
func TestUnprivileged(t *testing.T) {
	privtest.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		privtest.Skip(t, "setpriv not installed")
	}
	dir, err := os.MkdirTemp("", "cudatrace-ptest-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	self, _ := os.Executable()
	bin := filepath.Join(dir, "ptrace.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all",
		bin, "-test.run", "^(TestLaunchProcessTree|TestLaunchKilled|TestLaunchSecondThread|TestLaunchCommandNotFound|TestAttachShellLoop|TestAttachThreadedProcess|TestAttachRefused|TestNoNewPrivsNote|TestUnprivilegedDevice|TestSignalsReachTarget|TestGroupStop|TestExecFromThread|TestLaunchLeftoverDescendant|TestAttachStoppedProcess|TestAttachZombieLeader|TestAttachHeldDevices|TestSIGCHLDQuietDuringRun)$", "-test.v", "-test.count=1")
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o700)
	os.Chown(tmp, 65534, 65534)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, privtest.EnvRequire+"=")
	out, err := cmd.CombinedOutput()
	t.Logf("as nobody:\n%s", out)
	if err != nil {
		t.Fatalf("tests as nobody failed: %v", err)
	}
	for _, name := range []string{"TestLaunchProcessTree", "TestLaunchKilled", "TestLaunchSecondThread", "TestAttachShellLoop",
		"TestAttachThreadedProcess", "TestAttachRefused", "TestNoNewPrivsNote", "TestUnprivilegedDevice",
		"TestSignalsReachTarget", "TestGroupStop", "TestExecFromThread", "TestLaunchLeftoverDescendant", "TestAttachStoppedProcess",
		"TestAttachHeldDevices", "TestSIGCHLDQuietDuringRun"} {
		if !strings.Contains(string(out), "--- PASS: "+name) {
			t.Errorf("%s did not pass as nobody", name)
		}
	}
}

// TestUnprivilegedDevice: without root, /dev/null stands in for an NVIDIA
// node (its major given as the NVIDIA major).
func TestUnprivilegedDevice(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as nobody under TestUnprivileged")
	}
	prefix := "/dev/nvidia-cudatrace-ptest-" + randName()
	res, c, stats := runLaunch(t, helperArgv("calls", "/dev/null", prefix), []uint32{1})
	if res.Exit == nil || res.Exit.Code != 0 || !slices.Contains(res.Notes, NoNewPrivsNote) {
		t.Fatalf("result = %+v", res)
	}
	// No uprobes without privileges: one line says CUDA's code is unknown.
	var unknown []string
	for _, n := range res.Notes {
		if strings.HasPrefix(n, apiUnknownNote) {
			unknown = append(unknown, n)
		}
	}
	if res.APIReturns || len(unknown) != 1 || !strings.Contains(unknown[0], "CAP_BPF+CAP_PERFMON") {
		t.Errorf("api_returns %v, notes %q", res.APIReturns, res.Notes)
	}
	open := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindOpen && e.Path == "/dev/null" })
	ioctl := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindIoctl && e.FD >= 0 })
	mknod := c.where(func(e *tracer.Event) bool { return e.Kind == tracer.KindMknod })
	if len(open) != 1 || !devIs(open[0].Dev, 1, 3) || len(ioctl) != 1 || ioctl[0].Errno() != unix.ENOTTY ||
		len(mknod) != 1 || mknod[0].Errno() != unix.EACCES {
		dump(t, c.all())
		t.Errorf("open %+v ioctl %+v mknod %+v", open, ioctl, mknod)
	}
	if stats.MaxStopsPerCall > 2 {
		t.Errorf("a traced syscall took %d stops", stats.MaxStopsPerCall)
	}
}

func TestProbe(t *testing.T) {
	if err := Probe(); err != nil {
		t.Fatalf("Probe on this host: %v", err)
	}
}

// An attach lists the device files the process already held: their opens
// are not in the trace.
func TestAttachHeldDevices(t *testing.T) {
	node := attachNode(t)
	f, err := os.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := exec.Command("/bin/sleep", "300") // fds 0-2: /dev/null (c 1:3)
	cmd.ExtraFiles = []*os.File{f, r}        // fd 3, and a pipe as fd 4
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	held := func(majors []uint32) []string {
		t.Helper()
		res, err := New().Run(privtest.Deadline(t), tracer.Spec{PIDs: []int{cmd.Process.Pid}, DeviceMajors: majors, Duration: 50 * time.Millisecond}, &collector{})
		if err != nil {
			t.Fatal(err)
		}
		// Higher fds may come from whoever started this test.
		var out []string
		for _, n := range res.Notes {
			var fd int
			if _, err := fmt.Sscanf(n, "fd %d", &fd); err == nil && fd <= 4 && strings.HasSuffix(n, "held before the attach") {
				out = append(out, n)
			}
		}
		return out
	}
	var want []string
	for fd := 0; fd < 3; fd++ {
		want = append(want, fmt.Sprintf("fd %d → /dev/null (c 1:3), held before the attach", fd))
	}
	want = append(want, fmt.Sprintf("fd 3 → %s (c 1:3), held before the attach", node))
	if got := held([]uint32{1}); !slices.Equal(got, want) {
		t.Errorf("major 1 as NVIDIA's: held = %q, want %q", got, want)
	}
	// Without NVIDIA majors, only /dev/nvidia* paths count.
	want = nil
	if strings.HasPrefix(node, "/dev/nvidia") {
		want = []string{fmt.Sprintf("fd 3 → %s (c 1:3), held before the attach", node)}
	}
	if got := held(nil); !slices.Equal(got, want) {
		t.Errorf("no majors: held = %q, want %q", got, want)
	}
	assertUntraced(t, cmd.Process.Pid)
}

// A node under /dev/nvidia* whose major is another driver's (a stale
// node): its ioctls are recorded, so the ENOTTY they get is seen.
func TestIoctlOnNvidiaPathOfAnotherDriver(t *testing.T) {
	node, prefix := fakeNode(t) // c 1:3 at /dev/nvidiactl-...
	_, c, _ := runLaunch(t, helperArgv("calls", node, prefix), []uint32{195})
	got := c.where(func(e *tracer.Event) bool {
		return e.Kind == tracer.KindIoctl && e.Request == testIoctl && e.FD >= 0
	})
	if len(got) != 1 || got[0].Dev == nil || got[0].Dev.Major != 1 || got[0].Dev.Minor != 3 || got[0].Errno() != unix.ENOTTY {
		dump(t, c.all())
		t.Fatalf("ioctls on %s: %+v, want one on c 1:3 failing ENOTTY", node, got)
	}
}
