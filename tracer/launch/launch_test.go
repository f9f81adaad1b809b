package launch

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/procfs"
	"github.com/cudatrace/cudatrace/tracer"
	"github.com/cudatrace/cudatrace/tracer/launch/internal/loader"
)

// dumpArg makes the test binary a target that copies its own
// /proc/self/cmdline and /proc/self/environ to FILE.cmdline and
// FILE.environ: `TEST dumpArg FILE ARGS...`.
const dumpArg = "launch-test-dump"

// orphanArg makes the test binary a parent that starts a DieWithParent
// loader, stops it at once (as the signal sentinel is), writes its PID to
// FILE and waits to be killed: `TEST orphanArg FILE`.
const orphanArg = "launch-test-orphan"

// noProcArg makes the test binary detach /proc in its mount namespace and
// exec itself as a loader, FILE (the configuration) on fd 3, whose target
// checks that /proc is gone and prints $V: `TEST noProcArg FILE`.
const noProcArg = "launch-test-noproc"

func TestMain(m *testing.M) {
	RunLoaderIfRequested()
	if len(os.Args) > 2 && os.Args[1] == noProcArg {
		self, err := os.Executable()
		var f *os.File
		if err == nil {
			f, err = os.Open(os.Args[2])
		}
		if err == nil {
			err = unix.Dup2(int(f.Fd()), 3)
		}
		if err == nil {
			err = unix.Unmount("/proc", unix.MNT_DETACH)
		}
		if err == nil {
			err = unix.Exec(self, []string{loaderArg0, "/bin/sh", "-c", `test ! -e /proc/self && echo "$V"`}, os.Environ())
		}
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(3)
	}
	if len(os.Args) > 2 && os.Args[1] == orphanArg {
		c, err := Start(Options{Argv: []string{"never-released"}, DieWithParent: true})
		if err == nil {
			err = unix.Kill(c.PID, unix.SIGSTOP)
		}
		if err == nil {
			err = os.WriteFile(os.Args[2], []byte(strconv.Itoa(c.PID)), 0o600)
		}
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(3)
		}
		select {} // until killed
	}
	if len(os.Args) > 2 && os.Args[1] == dumpArg {
		for _, what := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile("/proc/self/" + what)
			if err == nil {
				err = os.WriteFile(os.Args[2]+"."+what, b, 0o600)
			}
			if err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(3)
			}
		}
		os.Exit(0)
	}
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
	if err := c.proc.Signal(os.Signal(nil)); err == nil {
		t.Fatal("loader still running after Abort")
	}
}

// A loader started DieWithParent dies with its parent even when it was
// stopped straight after Start, before it could run a line of its own:
// set by the loader itself, the parent-death signal came too late for
// the sentinel, which a killed cudatrace left behind, stopped.
func TestDieWithParentWhenStoppedAtOnce(t *testing.T) {
	privtest.Deadline(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	parent := exec.Command(self, orphanArg, pidFile)
	parent.Stderr = os.Stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()
	var pid int
	for pid == 0 {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
			pid, _ = strconv.Atoi(string(b))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	// Reparented and then killed: gone, or a zombie until init reaps it.
	defer func() { _ = unix.Kill(pid, unix.SIGKILL) }() // a failed run's orphan
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st, err := procfs.ReadStat(pid); err != nil || st.Gone() {
			return
		}
	}
	t.Fatalf("the loader (pid %d) outlived its killed parent", pid)
}

// launchDump launches argv (argv[2] is the dump file) and returns the
// target's cmdline and environ as the kernel shows them.
func launchDump(t *testing.T, opts Options) (cmdline, environ []byte) {
	t.Helper()
	c, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	st, err := c.Wait()
	if err != nil || st.Code != 0 || st.Signal != 0 {
		t.Fatalf("target: %+v %v", st, err)
	}
	out := opts.Argv[2]
	cmdline, err = os.ReadFile(out + ".cmdline")
	if err != nil {
		t.Fatal(err)
	}
	environ, err = os.ReadFile(out + ".environ")
	if err != nil {
		t.Fatal(err)
	}
	return cmdline, environ
}

// joinNUL is how /proc shows a string list.
func joinNUL(list []string) []byte {
	var b bytes.Buffer
	for _, s := range list {
		b.WriteString(s)
		b.WriteByte(0)
	}
	return b.Bytes()
}

func dumpTarget(t *testing.T, name string) (exe, out string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	exe = filepath.Join(dir, name)
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	return exe, filepath.Join(dir, "dump")
}

// Bytes that are not UTF-8 (an executable named with \xff among them), odd
// environment entries (duplicates, no '=', empty) and escapes reach the
// target exactly as given.
func TestArgvAndEnvBytesUnchanged(t *testing.T) {
	exe, out := dumpTarget(t, "target-\xff\xfe")
	argv := []string{exe, dumpArg, out, "\xff", "caf\xc3", "", "a b\n", "\x1b[31m", "\u00e9"}
	env := []string{"A=\xff\xfe", "D=1", "D=2", "NOEQUALS", "", "PATH=/usr/bin:/bin", "E="}
	cmdline, environ := launchDump(t, Options{Argv: argv, Env: env})
	if want := joinNUL(argv); !bytes.Equal(cmdline, want) {
		t.Errorf("argv reached the target as %q\nwant %q", cmdline, want)
	}
	if want := joinNUL(env); !bytes.Equal(environ, want) {
		t.Errorf("env reached the target as %q\nwant %q", environ, want)
	}
}

// Without Options.Env the target gets the caller's environment exactly,
// with nothing of the loader's added.
func TestEnvPassedThrough(t *testing.T) {
	exe, out := dumpTarget(t, "target")
	want, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		t.Fatal(err)
	}
	_, environ := launchDump(t, Options{Argv: []string{exe, dumpArg, out}})
	if !bytes.Equal(environ, want) {
		t.Errorf("env reached the target as %q\nwant %q", environ, want)
	}
}

// argLimit is the kernel's limit on argv+envp (fs/exec.c
// bprm_stack_limits): a quarter of the stack limit, at most 6 MiB, at
// least ARG_MAX.
func argLimit(t *testing.T) int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &rl); err != nil {
		t.Fatal(err)
	}
	limit := uint64(6 << 20)
	if rl.Cur/4 < limit {
		limit = rl.Cur / 4
	}
	return max(int(limit), 128<<10)
}

// An argv close to the kernel's limit, with one argument of the largest
// size a single string may have (MAX_ARG_STRLEN less its NUL), launches
// when the same argv runs without the loader.
func TestArgvNearKernelLimit(t *testing.T) {
	exe, out := dumpTarget(t, "target")
	const maxArgStrlen = 32 * 4096 // MAX_ARG_STRLEN, NUL included
	argv := []string{exe, dumpArg, out, strings.Repeat("L", maxArgStrlen-1)}
	env, _ := os.ReadFile("/proc/self/environ")
	used := len(exe) + 1 + len(joinNUL(argv)) + len(env) + 8*(len(argv)+bytes.Count(env, []byte{0}))
	// Fill to 8 KiB short of the limit with 1000-byte arguments.
	for used+1001+8 < argLimit(t)-8<<10 {
		argv = append(argv, strings.Repeat(strconv.Itoa(len(argv)%10), 1000))
		used += 1001 + 8
	}
	total := len(joinNUL(argv))
	if total < 1<<20 {
		t.Fatalf("argv of %d bytes: the test wants over 1 MiB", total)
	}
	// The control: this argv runs without the loader.
	direct := exec.Command(exe, argv[1:]...)
	if b, err := direct.CombinedOutput(); err != nil {
		t.Fatalf("without the loader, an argv of %d bytes in %d strings fails: %v %s", total, len(argv), err, b)
	}
	os.Remove(out + ".cmdline")
	cmdline, _ := launchDump(t, Options{Argv: argv})
	if !bytes.Equal(cmdline, joinNUL(argv)) {
		t.Errorf("an argv of %d bytes in %d strings reached the target as %d bytes", total, len(argv), len(cmdline))
	}
}

// With a Cred, HOME, USER and LOGNAME are the user's (not root's), as with
// su and sudo -u; the rest of the environment is unchanged.
func TestCredSetsUserEnv(t *testing.T) {
	privtest.RequireRoot(t) // setgroups
	exe, out := dumpTarget(t, "target")
	env := []string{"HOME=/root", "KEEP=\xff", "USER=root", "LOGNAME=root", "HOME=/dup"}
	cred := &tracer.Cred{UID: 0, GID: 0, User: "someone", Home: "/home/someone"}
	_, environ := launchDump(t, Options{Argv: []string{exe, dumpArg, out}, Env: env, Cred: cred})
	want := []string{"KEEP=\xff", "HOME=/home/someone", "USER=someone", "LOGNAME=someone"}
	if !bytes.Equal(environ, joinNUL(want)) {
		t.Errorf("env reached the target as %q\nwant %q", environ, joinNUL(want))
	}
}

// Where /proc cannot be read, the loader package's init cannot see argv;
// the loader then runs from os.Args (this package's init, or
// RunLoaderIfRequested), with the environment the runtime was given.
func TestLoaderWithoutProc(t *testing.T) {
	privtest.Deadline(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a mount namespace without /proc")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "cfg")
	if err := os.WriteFile(cfg, append((&loader.Config{}).Encode(), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", self, noProcArg, cfg)
	cmd.Env = append(os.Environ(), "V=kept")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr // the race detector warns there of the missing /proc
	out, err := cmd.Output()
	if err != nil || string(out) != "kept\n" {
		t.Fatalf("loader without /proc: %v, output %q, stderr %q", err, out, stderr.Bytes())
	}
}
