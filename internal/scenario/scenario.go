// Package scenario builds real broken GPU environments for end-to-end tests:
// a private /dev holding fake NVIDIA nodes, a fake /proc/devices, scratch
// device cgroups (v2 BPF program in runc's shape, v1 devices.deny) and an
// optional unprivileged user. Everything needs root.
//
// Env.Command returns an exec.Cmd that runs
//
//	unshare --mount --propagation private -- /bin/sh -c SETUP scenario ARGV...
//
// SETUP mounts a tmpfs on /dev (nodev if asked), creates null, zero, random,
// urandom, the fd symlinks and the Env's nodes, moves itself into the scratch
// cgroups, drops to Env.User if set (setpriv), and execs ARGV. All of that
// happens before ARGV starts, so a tracer run as ARGV never sees the setup's
// own calls. Faults that are neither cgroups nor nodes (a seccomp filter
// refusing chosen syscalls, a low RLIMIT_NOFILE) are set last by a helper
// that then execs ARGV in the same process; FaultsOnTarget puts them on a
// tracer's target instead of on the tracer (see Env.SeccompDeny). A setup failure exits with SetupFailed (125) and a line on
// stderr that starts with "scenario setup:".
//
// Fake nodes are backed by real drivers whose ioctls fail with ENOTTY (see
// testdata/fakecuda/README.md): StandInNodes puts nvidiactl on 1:7
// (/dev/full), nvidia0 on 1:5 (/dev/zero) and nvidia-uvm on 7:0 (/dev/vcs),
// and StandInProcDevices registers those majors under the NVIDIA names, so
// fakecuda finds nvidia-uvm's major (7) by name as libcuda would.
//
// unshare and the setup shell exec into ARGV, so the started command's PID
// is ARGV's: attach tests can pass cmd.Process.Pid to a tracer.
//
// Resources are made by Prepare (Command calls it) and removed by
// t.Cleanup: processes still in the scratch cgroups are killed, BPF
// programs detached, cgroups removed, temp files deleted.
//
// FakeCUDA builds testdata/fakecuda (once per test binary when the package's
// TestMain calls RunMain, else once per test) into a directory every user
// can read. A typical test:
//
//	env := &scenario.Env{
//		Nodes:        scenario.StandInNodes(),
//		ProcDevices:  scenario.StandInProcDevices,
//		CgroupV2Deny: []scenario.DeviceRule{{'c', scenario.UVMMajor, scenario.Wildcard, "rwm"}},
//	}
//	env.Prepare(t)
//	cmd := env.Command(t, cudatrace, "--", scenario.FakeCUDA(t), "--proc-devices", env.ProcDevicesPath())
//	// fakecuda prints "cuInit 999"; the program that denied it is env.ProgramIDs()[0].
package scenario

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario/faults"
)

// SetupFailed is the exit status of a Command whose setup failed.
const SetupFailed = 125

// Node is a character device node created in the private /dev.
type Node struct {
	Path         string // relative to /dev, e.g. "nvidia-uvm" or "nvidia-caps/nvidia-cap1"
	Major, Minor uint32
	Mode         uint32 // permission bits; 0 means 0666
	UID, GID     int    // owner; 0 is root
}

// Stand-in device numbers: real drivers that open and answer NVIDIA's ioctls
// with ENOTTY.
const (
	CtlMajor, CtlMinor = 1, 7 // /dev/full
	GPUMajor, GPUMinor = 1, 5 // /dev/zero
	UVMMajor, UVMMinor = 7, 0 // /dev/vcs; minor 0 because libcuda recreates uvm as minor 0
	// NoDriverMajor is nvidia-uvm's major on the recorded H200 host; no
	// driver owns it here, so opening a node on it fails with ENXIO.
	NoDriverMajor = 238
)

// StandInNodes returns nvidiactl, nvidia0 and nvidia-uvm on the stand-in
// drivers, mode 0666, owned by root.
func StandInNodes() []Node {
	return []Node{
		{Path: "nvidiactl", Major: CtlMajor, Minor: CtlMinor},
		{Path: "nvidia0", Major: GPUMajor, Minor: GPUMinor},
		{Path: "nvidia-uvm", Major: UVMMajor, Minor: UVMMinor},
	}
}

// StandInProcDevices is /proc/devices as it would read if the stand-in
// drivers were NVIDIA's (same as testdata/fakecuda/procdevices-standin).
const StandInProcDevices = `Character devices:
  1 mem
  1 nvidia
  1 nvidiactl
  4 /dev/vc/0
  4 tty
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
  7 nvidia-uvm
 10 misc

Block devices:
  7 loop
`

// H200ProcDevices is the recorded H200 host's layout (nvidia 195,
// nvidia-uvm 238, ...), the same as testdata/fakecuda/procdevices-h200.
const H200ProcDevices = `Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  4 ttyS
  5 /dev/tty
  5 /dev/console
  5 /dev/ptmx
  7 vcs
 10 misc
 13 input
195 nvidia
195 nvidiactl
238 nvidia-uvm
239 nvidia-nvswitch
240 nvidia-nvlink
241 nvidia-caps
242 nvidia-caps-imex-channels

Block devices:
  7 loop
259 blkext
`

// Env describes one environment. Fill it in, then call Command (or Prepare
// first to learn the paths and program IDs). An Env is prepared once; call
// Command as often as needed afterwards.
type Env struct {
	Nodes []Node
	NoDev bool // mount the private /dev nodev

	// ProcDevices is written to a temp file (ProcDevicesPath) for fakecuda's
	// --proc-devices; the real /proc/devices is untouched. Empty: no file.
	ProcDevices string

	// CgroupV2Deny makes a scratch cgroup v2 whose device program allows
	// everything except these rules; CgroupV2AllowOnly one that allows only
	// these. Setting both is an error.
	CgroupV2Deny      []DeviceRule
	CgroupV2AllowOnly []DeviceRule
	// CgroupV2Leaf puts ARGV in a child of that scratch cgroup, whose own
	// program allows every device: the scratch cgroup's program denies
	// from above it (BPF_F_ALLOW_MULTI, as runc attaches), as a slice's
	// program does above a container's.
	CgroupV2Leaf bool

	// CgroupV1Deny lines ("c 7:0 rwm") are written to devices.deny of a
	// scratch v1 devices cgroup. Skips the test if that controller is not
	// mounted.
	CgroupV1Deny []string

	// User, when set, is the user ARGV runs as (setpriv, after the setup, with
	// the user's primary group and no supplementary groups). Leave it empty
	// when ARGV is a tracer that must stay root and drops privileges itself.
	User string

	// Faults, set on ARGV just before it runs (after the cgroups and the
	// user drop) by a helper that then execs ARGV in the same process, so
	// ARGV's PID is the one that set them (internal/scenario/faults).
	//
	// SeccompDeny names the syscalls a seccomp filter refuses with EPERM:
	// "ioctl", "ioctl:nvidia" (requests of type 'F' only), "openat", "open",
	// "memfd_create", "mknodat", "mknod".
	SeccompDeny []string
	// SeccompNotify refuses them through SECCOMP_RET_USER_NOTIF instead: a
	// supervisor in this process answers each call with EPERM
	// (SeccompNotified counts them).
	SeccompNotify bool
	// SeccompAction is what the filter does to the denied calls instead of
	// EPERM: "kill-process", "kill-thread" or "trap" (faults.ParseAction).
	SeccompAction string
	// NoFile, when non-zero, is ARGV's RLIMIT_NOFILE (soft and hard).
	NoFile uint64
	// AS, when non-zero, is ARGV's RLIMIT_AS in bytes (soft and hard).
	AS uint64
	// FaultsOnTarget moves the faults from ARGV to the command after ARGV's
	// first "--" (a tracer's target): the tracer runs without them, and
	// traces the helper setting them up and exec'ing the target.
	FaultsOnTarget bool
	// FaultHelper is the helper's command (faults.Main's command line);
	// empty: internal/scenario/faults/faultexec, built on first use.
	FaultHelper []string

	t               testing.TB
	prepared        bool
	procDevicesPath string
	v2              *cgroupV2
	v2leaf          *cgroupV2 // CgroupV2Leaf: the child ARGV joins
	v1Path          string
	supervisor      *faults.Supervisor
	notifySocket    string
}

// SeccompNotified is how many calls the SeccompNotify supervisor refused.
func (e *Env) SeccompNotified() int {
	if e.supervisor == nil {
		return 0
	}
	return e.supervisor.Answered()
}

func (e *Env) hasFaults() bool { return len(e.SeccompDeny) > 0 || e.NoFile > 0 || e.AS > 0 }

// ProcDevicesPath is the fake /proc/devices file, or "" if ProcDevices is
// empty. Valid after Prepare.
func (e *Env) ProcDevicesPath() string { return e.procDevicesPath }

// CgroupV2Path is the scratch cgroup v2 directory, or "". Valid after Prepare.
func (e *Env) CgroupV2Path() string {
	if e.v2 == nil {
		return ""
	}
	return e.v2.path
}

// CgroupV2LeafPath is the child cgroup ARGV runs in under CgroupV2Leaf,
// or "". Valid after Prepare.
func (e *Env) CgroupV2LeafPath() string {
	if e.v2leaf == nil {
		return ""
	}
	return e.v2leaf.path
}

// CgroupV1Path is the scratch v1 devices cgroup directory, or "".
func (e *Env) CgroupV1Path() string { return e.v1Path }

// ProgramIDs are the IDs of the BPF device programs attached to the scratch
// cgroup v2, as bpftool and the kernel report them.
func (e *Env) ProgramIDs() []uint32 {
	if e.v2 == nil {
		return nil
	}
	return e.v2.progIDs
}

// Prepare creates the temp files, cgroups and programs, and registers their
// removal with t.Cleanup. Command calls it; calling it again does nothing.
func (e *Env) Prepare(t testing.TB) {
	t.Helper()
	if e.prepared {
		return
	}
	privtest.RequireRoot(t)
	for _, tool := range []string{"unshare", "mount", "mknod", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			privtest.Skip(t, "scenario needs "+tool+" (util-linux/coreutils): "+err.Error())
		}
	}
	if len(e.CgroupV2Deny) > 0 && len(e.CgroupV2AllowOnly) > 0 {
		t.Fatal("scenario: set CgroupV2Deny or CgroupV2AllowOnly, not both")
	}
	for _, n := range e.Nodes {
		if err := n.validate(); err != nil {
			t.Fatalf("scenario: %v", err)
		}
	}
	if _, err := faults.ParseDenies(e.SeccompDeny); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	if _, err := faults.ParseAction(e.SeccompAction); err != nil || (e.SeccompAction != "" && (e.SeccompNotify || len(e.SeccompDeny) == 0)) {
		t.Fatalf("scenario: SeccompAction %q needs SeccompDeny, without SeccompNotify (%v)", e.SeccompAction, err)
	}
	if e.SeccompNotify && len(e.SeccompDeny) == 0 {
		t.Fatal("scenario: SeccompNotify needs SeccompDeny")
	}
	e.t = t
	e.prepared = true
	if e.hasFaults() && len(e.FaultHelper) == 0 {
		e.FaultHelper = []string{faultExec(t)}
	}
	if e.SeccompNotify {
		e.notifySocket = filepath.Join(sharedTempDir(t, "cudatrace-seccomp-"), "notify.sock")
		sup, err := faults.NewSupervisor(e.notifySocket)
		if err != nil {
			t.Fatalf("scenario: seccomp supervisor: %v", err)
		}
		e.supervisor = sup
		// Registered after the temp dir, so it runs first.
		t.Cleanup(func() {
			if err := sup.Close(); err != nil {
				t.Errorf("scenario: %v", err)
			}
		})
	}

	if e.ProcDevices != "" {
		dir := sharedTempDir(t, "cudatrace-scenario-")
		e.procDevicesPath = filepath.Join(dir, "proc-devices")
		if err := os.WriteFile(e.procDevicesPath, []byte(e.ProcDevices), 0o644); err != nil {
			t.Fatalf("scenario: %v", err)
		}
	}
	if len(e.CgroupV1Deny) > 0 {
		e.v1Path = newCgroupV1(t, e.CgroupV1Deny)
	}
	switch {
	case len(e.CgroupV2Deny) > 0:
		e.v2 = newCgroupV2(t, e.CgroupV2Deny, false)
	case len(e.CgroupV2AllowOnly) > 0:
		e.v2 = newCgroupV2(t, e.CgroupV2AllowOnly, true)
	}
	if e.CgroupV2Leaf {
		if e.v2 == nil {
			t.Fatal("scenario: CgroupV2Leaf needs CgroupV2Deny or CgroupV2AllowOnly")
		}
		e.v2leaf = newCgroupV2In(t, e.v2.path, "leaf", nil, false)
	}
}

// Command returns a command that builds the environment and then execs argv
// in it. Processes it leaves running are killed at cleanup.
func (e *Env) Command(t testing.TB, argv ...string) *exec.Cmd {
	t.Helper()
	if len(argv) == 0 {
		t.Fatal("scenario: Command needs a program to run")
	}
	e.Prepare(t)
	script, err := e.script()
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	if e.FaultsOnTarget && e.hasFaults() {
		i := slices.Index(argv, "--")
		if i < 0 {
			t.Fatal("scenario: FaultsOnTarget needs a \"--\" before the target in ARGV")
		}
		argv = slices.Concat(argv[:i+1], e.faultPrefix(), argv[i+1:])
	}
	args := append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "scenario"}, argv...)
	cmd := exec.Command("unshare", args...)
	t.Cleanup(func() {
		if cmd.Process != nil && cmd.ProcessState == nil {
			_ = cmd.Process.Kill() // it may have exited already
		}
	})
	return cmd
}

func (n Node) validate() error {
	clean := path.Clean(n.Path)
	if n.Path == "" || path.IsAbs(n.Path) || clean != n.Path || strings.HasPrefix(clean, "..") {
		return fmt.Errorf("node path %q must be relative to /dev and clean", n.Path)
	}
	if n.Mode&^0o7777 != 0 {
		return fmt.Errorf("node %s: mode %#o has bits beyond permissions", n.Path, n.Mode)
	}
	return nil
}

// script is the setup run by /bin/sh inside the new mount namespace; "$@"
// is ARGV.
func (e *Env) script() (string, error) {
	var b strings.Builder
	line := func(cmd, what string) { fmt.Fprintf(&b, "%s || die %s\n", cmd, quote(what)) }
	fmt.Fprintf(&b, "die() { echo \"scenario setup: $1\" >&2; exit %d; }\n", SetupFailed)
	opts := "mode=0755,nosuid"
	if e.NoDev {
		opts += ",nodev"
	}
	line("mount -t tmpfs -o "+opts+" cudatrace-scenario /dev", "mount tmpfs on /dev")
	for _, base := range []struct {
		name         string
		major, minor int
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}} {
		line(fmt.Sprintf("mknod -m 0666 /dev/%s c %d %d", base.name, base.major, base.minor), "mknod /dev/"+base.name)
	}
	line("ln -s /proc/self/fd /dev/fd && ln -s /proc/self/fd/0 /dev/stdin && ln -s /proc/self/fd/1 /dev/stdout && ln -s /proc/self/fd/2 /dev/stderr", "fd symlinks")
	line("mkdir -m 1777 /dev/shm", "mkdir /dev/shm")
	for _, n := range e.Nodes {
		p := quote("/dev/" + n.Path)
		mode := n.Mode
		if mode == 0 {
			mode = 0o666
		}
		if dir := path.Dir(n.Path); dir != "." {
			line("mkdir -p "+quote("/dev/"+dir), "mkdir /dev/"+dir)
		}
		line(fmt.Sprintf("rm -f %s && mknod %s c %d %d && chown %d:%d %s && chmod %04o %s",
			p, p, n.Major, n.Minor, n.UID, n.GID, p, mode, p), "node /dev/"+n.Path)
	}
	if join := e.v2; join != nil {
		if e.v2leaf != nil {
			join = e.v2leaf
		}
		line("echo $$ > "+quote(filepath.Join(join.path, "cgroup.procs")), "join cgroup v2 "+join.path)
	}
	if e.v1Path != "" {
		line("echo $$ > "+quote(filepath.Join(e.v1Path, "cgroup.procs")), "join cgroup v1 "+e.v1Path)
	}
	run := `"$@"`
	if e.hasFaults() && !e.FaultsOnTarget {
		var q []string
		for _, a := range e.faultPrefix() {
			q = append(q, quote(a))
		}
		run = strings.Join(q, " ") + " " + run
	}
	exec := "exec " + run
	if e.User != "" {
		u, err := user.Lookup(e.User)
		if err != nil {
			return "", err
		}
		if _, err := strconv.Atoi(u.Uid); err != nil {
			return "", fmt.Errorf("user %s: uid %q", e.User, u.Uid)
		}
		exec = fmt.Sprintf(`exec setpriv --reuid=%s --regid=%s --clear-groups -- %s`, u.Uid, u.Gid, run)
	}
	b.WriteString(exec + "\n")
	return b.String(), nil
}

// faultPrefix is the helper's command line up to the "--" before ARGV.
func (e *Env) faultPrefix() []string {
	return slices.Concat(e.FaultHelper, faults.Args(e.SeccompDeny, e.SeccompAction, e.notifySocket, e.NoFile, e.AS))
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// sharedTempDir makes a temp dir other users can read and enter (t.TempDir
// is 0700), removed at cleanup.
func sharedTempDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatalf("scenario: %v", err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("scenario: remove %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	return dir
}
