package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario/faults"
)

// probeEnv makes the test binary, re-executed, a probe target: it reports
// its seccomp state, its fd limit and what a few calls return.
const probeEnv = "CUDATRACE_SCENARIO_PROBE"

// Requests the probe issues on /dev/null: a tty request, one of NVIDIA's
// ('F', RM_CONTROL) and nvidia-uvm's (UVM_INITIALIZE, type 0).
var probeIoctls = []uint32{unix.TCGETS, 0xc020462a, 0x30000001}

func probeMain() {
	status, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "Seccomp") || strings.HasPrefix(l, "NoNewPrivs") {
			fmt.Println(strings.Join(strings.Fields(l), " "))
		}
	}
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	fmt.Printf("nofile %d %d\n", lim.Cur, lim.Max)
	fd, err := unix.Open("/dev/null", unix.O_RDWR, 0)
	if err != nil {
		fmt.Println("open", unix.ErrnoName(err.(unix.Errno)))
		os.Exit(0)
	}
	var buf [64]byte
	for _, req := range probeIoctls {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&buf)))
		fmt.Printf("ioctl %#x %s\n", req, errnoWord(errno))
	}
	_, err = unix.MemfdCreate("probe", 0)
	fmt.Printf("memfd_create %s\n", errnoWord(err))
	// Open until the limit: how many fds the process may hold.
	n := 0
	for ; n < 1<<16; n++ {
		if _, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			fmt.Printf("open #%d %s\n", n, errnoWord(err))
			break
		}
	}
	os.Exit(0)
}

func errnoWord(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) && errno != 0 {
		return unix.ErrnoName(errno)
	}
	return "ok"
}

// runDeadline runs cmd, killing it after a minute, and returns stdout and
// stderr.
func runDeadline(t *testing.T, cmd *exec.Cmd) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	if !timer.Stop() {
		t.Fatalf("%v: killed after a minute\nstderr:\n%s", cmd.Args, stderr.String())
	}
	return stdout.String(), stderr.String(), err
}

func probe(t *testing.T, env *Env, argv ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := env.Command(t, append(argv, self)...)
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	out, stderr, err := runDeadline(t, cmd)
	if err != nil {
		t.Fatalf("probe: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	return out
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || l == w
		}
		if !found {
			t.Errorf("output lacks line %q:\n%s", w, out)
		}
	}
}

// The filter really refuses what it names, and only that: the target's own
// ioctl gets EPERM from the kernel, /proc/PID/status shows the filter, and
// "ioctl:nvidia" lets a tty or uvm request through.
func TestSeccompDenyRefuses(t *testing.T) {
	privtest.RequireRoot(t)
	cases := []struct {
		name string
		env  Env
		want []string
	}{
		{"none", Env{}, []string{"Seccomp: 0", "ioctl 0x5401 ENOTTY", "ioctl 0xc020462a ENOTTY", "memfd_create ok"}},
		{"ioctl", Env{SeccompDeny: []string{"ioctl"}}, []string{"Seccomp: 2", "Seccomp_filters: 1",
			"ioctl 0x5401 EPERM", "ioctl 0xc020462a EPERM", "ioctl 0x30000001 EPERM", "memfd_create ok"}},
		{"ioctl:nvidia", Env{SeccompDeny: []string{"ioctl:nvidia"}}, []string{"Seccomp: 2",
			"ioctl 0x5401 ENOTTY", "ioctl 0xc020462a EPERM", "ioctl 0x30000001 ENOTTY"}},
		{"memfd_create", Env{SeccompDeny: []string{"memfd_create"}}, []string{"ioctl 0xc020462a ENOTTY", "memfd_create EPERM"}},
		{"notify ioctl", Env{SeccompDeny: []string{"ioctl:nvidia", "memfd_create"}, SeccompNotify: true}, []string{"Seccomp: 2",
			"ioctl 0x5401 ENOTTY", "ioctl 0xc020462a EPERM", "memfd_create EPERM"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := probe(t, &tc.env)
			wantLines(t, out, tc.want...)
			if tc.env.SeccompNotify {
				if n := tc.env.SeccompNotified(); n != 2 {
					t.Errorf("supervisor answered %d calls, want 2 (one ioctl, one memfd_create)", n)
				}
			}
		})
	}
}

// RLIMIT_NOFILE applies to the target (soft and hard) and it really cannot
// open past it.
func TestNoFileLimits(t *testing.T) {
	privtest.RequireRoot(t)
	out := probe(t, &Env{NoFile: 9})
	// fds 0-2 are inherited; the probe holds /dev/null; the Go runtime may
	// hold a few of its own, so the count of extra opens is at most 5.
	wantLines(t, out, "nofile 9 9")
	for _, l := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(l, "open #"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			if !strings.HasSuffix(l, " EMFILE") || n > 5 {
				t.Errorf("%q: want EMFILE after at most 5 more opens", l)
			}
			return
		}
	}
	t.Errorf("probe never hit its fd limit:\n%s", out)
}

// fakecuda under each fault gives the cuInit result libcuda gives, with the
// refused call in its log.
func TestFaultsFakeCUDA(t *testing.T) {
	privtest.RequireRoot(t)
	nodes := StandInNodes()
	cases := []struct {
		name string
		env  Env
		args []string
		want int
		logs []string
	}{
		{"seccomp ioctl", Env{SeccompDeny: []string{"ioctl"}}, nil, 999,
			[]string{`openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = <fd>`, "ioctl(<fd>, 0xc00846d6) = -1 EPERM"}},
		// Not root: the helper needs no_new_privs to install the filter.
		{"seccomp ioctl as nobody", Env{SeccompDeny: []string{"ioctl"}, User: "nobody"}, nil, 999,
			[]string{"ioctl(<fd>, 0xc00846d6) = -1 EPERM"}},
		{"seccomp nvidia ioctl", Env{SeccompDeny: []string{"ioctl:nvidia"}}, nil, 999,
			[]string{"ioctl(<fd>, 0xc00846d6) = -1 EPERM"}},
		{"seccomp notify ioctl", Env{SeccompDeny: []string{"ioctl"}, SeccompNotify: true}, nil, 999,
			[]string{"ioctl(<fd>, 0xc00846d6) = -1 EPERM"}},
		{"seccomp openat", Env{SeccompDeny: []string{"openat"}}, nil, 100,
			[]string{`openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = -1 EPERM`, `openat(AT_FDCWD, "/dev/nvidiactl", O_RDONLY) = -1 EPERM`}},
		{"seccomp memfd", Env{SeccompDeny: []string{"memfd_create"}}, []string{"--memfd"}, 304,
			[]string{`memfd_create("cuda", MFD_CLOEXEC) = -1 EPERM`}},
		{"nofile", Env{NoFile: fakeCUDANoFile}, nil, 999,
			[]string{`openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = <fd>`, `openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) = -1 EMFILE`, `openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR) = -1 EMFILE`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.env.Nodes, tc.env.ProcDevices = nodes, StandInProcDevices
			o := runFake(t, &tc.env, tc.args...)
			if want := "cuInit " + strconv.Itoa(tc.want) + "\n"; o.stdout != want || o.exit != 0 {
				t.Fatalf("got stdout %q exit %d, want %q exit 0; log:\n%s", o.stdout, o.exit, want, o.stderr)
			}
			assertInOrder(t, o.stderr, tc.logs)
		})
	}
}

// fakeCUDANoFile is an fd limit that lets fakecuda (0-2, two fds of the Go
// runtime) open nvidiactl but not nvidia-uvm: EMFILE on a /dev/nvidia*
// open, cuInit 999.
const fakeCUDANoFile = 6

// FaultsOnTarget leaves ARGV (a stand-in tracer) unfiltered and puts the
// filter on the command after its "--", in the same process that then runs.
func TestFaultsOnTarget(t *testing.T) {
	privtest.RequireRoot(t)
	env := &Env{SeccompDeny: []string{"ioctl"}, NoFile: 64, FaultsOnTarget: true}
	// The "tracer" reports its own state, then execs its target.
	out := probe(t, env, "/bin/sh", "-c", `awk '/^Seccomp:/{print $1, $2}' /proc/$$/status; echo "sh nofile $(ulimit -n)"; shift; exec "$@"`, "sh", "--")
	wantLines(t, out, "Seccomp: 0", "Seccomp: 2", "ioctl 0x5401 EPERM", "nofile 64 64")
	if strings.Contains(out, "sh nofile 64\n") {
		t.Errorf("the stand-in tracer got the target's fd limit:\n%s", out)
	}
}

// Nothing is left once the Env's test ends: no supervisor socket, no fd of
// the supervisor in this process.
func TestFaultsCleanup(t *testing.T) {
	privtest.RequireRoot(t)
	before := openFDs(t)
	var sock string
	t.Run("notify", func(t *testing.T) {
		env := &Env{SeccompDeny: []string{"ioctl"}, SeccompNotify: true}
		out := probe(t, env)
		wantLines(t, out, "ioctl 0x5401 EPERM")
		sock = env.notifySocket
		if _, err := os.Stat(sock); err != nil {
			t.Fatalf("supervisor socket: %v", err)
		}
	})
	if sock == "" {
		t.Fatal("no supervisor socket")
	}
	if _, err := os.Stat(filepath.Dir(sock)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind (%v)", filepath.Dir(sock), err)
	}
	// The helper's build stays for the test binary; fds must not grow.
	if after := openFDs(t); after > before {
		t.Errorf("%d fds open after the scenario, %d before", after, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// A helper failure is the scenario's setup failure: exit 125, one line.
func TestFaultsBadInput(t *testing.T) {
	privtest.RequireRoot(t)
	env := &Env{NoFile: 8}
	env.Prepare(t)
	cmd := env.Command(t, "/nonexistent/target")
	_, stderr, err := runDeadline(t, cmd)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != SetupFailed || !strings.HasPrefix(stderr, "scenario setup: ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("got %v, stderr %q; want exit %d and one \"scenario setup:\" line", err, stderr, SetupFailed)
	}
}

// SeccompAction kill-process kills the target at its first denied call,
// with SIGSYS, after the calls before it ran; a bad action is refused.
func TestSeccompActionKills(t *testing.T) {
	privtest.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{SeccompDeny: []string{"ioctl:nvidia"}, SeccompAction: "kill-process"}
	cmd := env.Command(t, self)
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	out, stderr, err := runDeadline(t, cmd)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("probe: %v, want death by SIGSYS\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Errorf("probe ended %v, want SIGSYS\nstdout:\n%s", exit, out)
	}
	wantLines(t, out, "Seccomp: 2", "ioctl 0x5401 ENOTTY")
	if strings.Contains(out, "ioctl 0xc020462a") {
		t.Errorf("the denied ioctl returned:\n%s", out)
	}
	if _, err := faults.ParseAction("kill"); err == nil {
		t.Error(`ParseAction("kill") accepted`)
	}
}
