// Command scenario builds one broken GPU environment with internal/scenario
// (private /dev, fake or host-derived nodes, cgroup device policies, a user)
// and runs a command in it. The demo and the GPU acceptance script use it, so
// the environments they show are the ones the end-to-end tests assert.
//
//	scenario [flags] -- COMMAND [ARGS...]
//	scenario faultexec [--seccomp-deny SYSCALL]... [--nofile N] [--as BYTES] -- COMMAND [ARGS...]
//
// It exits with COMMAND's status, or 125 when the setup fails. The
// faultexec form is the helper that sets --seccomp-deny and --nofile on a
// command and execs it (internal/scenario/faults); the scenario runs itself
// that way, so no other binary has to be carried to a GPU host.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/internal/scenario/faults"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "faultexec" {
		os.Exit(faults.Main(os.Args[2:], os.Stderr))
	}
	var (
		nodes       = pflag.String("nodes", "standin", "node set: standin (fake nodes on harmless drivers) or host (copies of this host's /dev/nvidia* nodes)")
		drop        = pflag.StringSlice("drop", nil, "leave out this node (e.g. nvidia-uvm)")
		nodeMajor   = pflag.StringSlice("node-major", nil, "NODE=MAJOR: give a node another major (a stale node)")
		procDevices = pflag.String("proc-devices", "standin", "fake /proc/devices: standin, h200, host (none) or a file")
		noDev       = pflag.Bool("nodev", false, "mount the private /dev nodev")
		denyV2      = pflag.StringArray("deny-v2", nil, "cgroup v2 program denying this rule, e.g. 'c 7:* rwm' (repeatable)")
		allowOnlyV2 = pflag.StringArray("allow-only-v2", nil, "cgroup v2 program allowing only these rules (repeatable)")
		leafV2      = pflag.Bool("v2-leaf", false, "run COMMAND in a child of that cgroup whose own program allows every device: the --deny-v2/--allow-only-v2 program applies from above, as a slice's does")
		denyV1      = pflag.StringArray("deny-v1", nil, "cgroup v1 devices.deny line (repeatable)")
		user        = pflag.String("user", "", "run COMMAND as this user (setpriv)")
		printPath   = pflag.Bool("print-proc-devices", false, "print the fake /proc/devices path on stderr first")
		deny        = pflag.StringArray("seccomp-deny", nil, "a seccomp filter refuses this syscall with EPERM (repeatable): "+strings.Join(faults.Specs(), ", "))
		action      = pflag.String("seccomp-action", "", "what the filter does to --seccomp-deny calls instead of EPERM: kill-process, kill-thread, trap")
		notify      = pflag.Bool("seccomp-notify", false, "refuse through SECCOMP_RET_USER_NOTIF, answered EPERM by this process")
		nofile      = pflag.Uint64("nofile", 0, "RLIMIT_NOFILE of COMMAND (soft and hard)")
		as          = pflag.Uint64("as", 0, "RLIMIT_AS of COMMAND in bytes (soft and hard), as ulimit -v sets it")
		onTarget    = pflag.Bool("faults-on-target", false, "set --seccomp-deny/--nofile/--as on the command after COMMAND's first -- (a tracer's target), not on COMMAND")
	)
	pflag.Parse()
	if pflag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: scenario [flags] -- COMMAND [ARGS...]")
		os.Exit(2)
	}
	t := &runner{}
	defer t.cleanup()
	env := &scenario.Env{NoDev: *noDev, User: *user, SeccompDeny: *deny, SeccompNotify: *notify, SeccompAction: *action, NoFile: *nofile, AS: *as, FaultsOnTarget: *onTarget}
	if len(env.SeccompDeny) > 0 || env.NoFile > 0 || env.AS > 0 {
		self, err := os.Executable()
		if err != nil {
			t.Fatalf("%v", err)
		}
		env.FaultHelper = []string{self, "faultexec"}
	}
	var err error
	if env.Nodes, err = nodeSet(*nodes); err != nil {
		t.Fatalf("%v", err)
	}
	env.Nodes = adjust(env.Nodes, *drop, *nodeMajor, t)
	switch *procDevices {
	case "standin":
		env.ProcDevices = scenario.StandInProcDevices
	case "h200":
		env.ProcDevices = scenario.H200ProcDevices
	case "host", "":
	default:
		b, err := os.ReadFile(*procDevices)
		if err != nil {
			t.Fatalf("%v", err)
		}
		env.ProcDevices = string(b)
	}
	for _, r := range *denyV2 {
		env.CgroupV2Deny = append(env.CgroupV2Deny, parseRule(r, t))
	}
	for _, r := range *allowOnlyV2 {
		env.CgroupV2AllowOnly = append(env.CgroupV2AllowOnly, parseRule(r, t))
	}
	env.CgroupV2Leaf = *leafV2
	env.CgroupV1Deny = *denyV1

	env.Prepare(t)
	if *printPath {
		fmt.Fprintln(os.Stderr, env.ProcDevicesPath())
	}
	cmd := env.Command(t, substitute(pflag.Args(), env.ProcDevicesPath())...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			code = 128 + int(st.Signal())
		} else {
			code = ee.ExitCode()
		}
	} else if err != nil {
		t.Fatalf("%v", err)
	}
	t.cleanup()
	os.Exit(code)
}

// substitute replaces @PROC_DEVICES@ in arguments with the fake file's path,
// so a command line can point cudatrace and fakecuda at it.
func substitute(argv []string, path string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "@PROC_DEVICES@", path)
	}
	return out
}

func nodeSet(name string) ([]scenario.Node, error) {
	switch name {
	case "standin":
		return scenario.StandInNodes(), nil
	case "host":
		return hostNodes()
	}
	return nil, fmt.Errorf("unknown node set %q: use standin or host", name)
}

// hostNodes copies this host's NVIDIA nodes (type, numbers, mode, owner).
func hostNodes() ([]scenario.Node, error) {
	var out []scenario.Node
	paths, _ := filepath.Glob("/dev/nvidia*")
	caps, _ := filepath.Glob("/dev/nvidia-caps/*")
	for _, p := range append(paths, caps...) {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			continue
		}
		out = append(out, scenario.Node{
			Path:  strings.TrimPrefix(p, "/dev/"),
			Major: uint32((st.Rdev >> 8) & 0xfff), Minor: uint32((st.Rdev & 0xff) | ((st.Rdev >> 12) & 0xfff00)),
			Mode: st.Mode & 0o7777, UID: int(st.Uid), GID: int(st.Gid),
		})
	}
	if len(out) == 0 {
		return nil, errors.New("no /dev/nvidia* character devices on this host")
	}
	return out, nil
}

func adjust(nodes []scenario.Node, drop, majors []string, t *runner) []scenario.Node {
	var out []scenario.Node
	skip := map[string]bool{}
	for _, d := range drop {
		skip[d] = true
	}
	override := map[string]uint32{}
	for _, nm := range majors {
		name, num, ok := strings.Cut(nm, "=")
		m, err := strconv.ParseUint(num, 10, 32)
		if !ok || err != nil {
			t.Fatalf("--node-major %q: want NODE=MAJOR", nm)
		}
		override[name] = uint32(m)
	}
	for _, n := range nodes {
		if skip[n.Path] {
			continue
		}
		if m, ok := override[n.Path]; ok {
			n.Major = m
		}
		out = append(out, n)
	}
	return out
}

// parseRule reads "c 7:* rwm".
func parseRule(s string, t *runner) scenario.DeviceRule {
	f := strings.Fields(s)
	if len(f) != 3 || len(f[0]) != 1 {
		t.Fatalf("rule %q: want 'c MAJOR:MINOR ACCESS'", s)
	}
	maj, min, ok := strings.Cut(f[1], ":")
	num := func(x string) int64 {
		if x == "*" {
			return scenario.Wildcard
		}
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			t.Fatalf("rule %q: bad number %q", s, x)
		}
		return n
	}
	if !ok {
		t.Fatalf("rule %q: want MAJOR:MINOR", s)
	}
	return scenario.DeviceRule{Type: rune(f[0][0]), Major: num(maj), Minor: num(min), Access: f[2]}
}

// runner lets a command-line program drive internal/scenario, which is
// written against testing.TB. The embedded interface is nil: scenario calls
// only the methods defined here (Helper, Cleanup, Errorf, Fatal, Fatalf,
// Skip), and a call to any other would panic loudly rather than misbehave.
type runner struct {
	testing.TB
	cleanups []func()
}

func (r *runner) Helper()                           {}
func (r *runner) Context() context.Context          { return context.Background() }
func (r *runner) Cleanup(f func())                  { r.cleanups = append(r.cleanups, f) }
func (r *runner) Fatal(args ...any)                 { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *runner) Skip(args ...any)                  { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *runner) Errorf(format string, args ...any) { say(format, args...) }
func (r *runner) Fatalf(format string, args ...any) {
	say(format, args...)
	r.cleanup()
	os.Exit(scenario.SetupFailed)
}

// say prints one line; internal/scenario's messages already start with
// "scenario: ".
func say(format string, args ...any) {
	fmt.Fprintln(os.Stderr, "scenario: "+strings.TrimPrefix(fmt.Sprintf(format, args...), "scenario: "))
}

// cleanup runs the registered cleanups, last first, once.
func (r *runner) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}
