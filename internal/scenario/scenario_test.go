package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(probeEnv) != "" {
		probeMain()
	}
	RunMain(m)
}

type outcome struct {
	stdout, stderr string
	exit           int
}

// runFake runs fakecuda -v in env with the fake /proc/devices.
func runFake(t *testing.T, env *Env, args ...string) outcome {
	t.Helper()
	bin := FakeCUDA(t)
	env.Prepare(t)
	argv := []string{bin, "-v"}
	if p := env.ProcDevicesPath(); p != "" {
		argv = append(argv, "--proc-devices", p)
	}
	cmd := env.Command(t, append(argv, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	o := outcome{stdout: stdout.String(), stderr: stderr.String()}
	switch {
	case err == nil:
	case errors.As(err, &exit):
		o.exit = exit.ExitCode()
	default:
		t.Fatalf("run: %v", err)
	}
	if o.exit == SetupFailed {
		t.Fatalf("scenario setup failed:\n%s", o.stderr)
	}
	return o
}

func withNode(nodes []Node, path string, edit func(*Node)) []Node {
	out := append([]Node(nil), nodes...)
	for i := range out {
		if out[i].Path == path {
			edit(&out[i])
			return out
		}
	}
	panic("no node " + path)
}

func withoutNode(nodes []Node, path string) []Node {
	var out []Node
	for _, n := range nodes {
		if n.Path != path {
			out = append(out, n)
		}
	}
	return out
}

// The cuInit results and the calls that explain them, for each fault the
// H200 recordings (testdata/strace/h200) show or users have reported.
func TestScenarios(t *testing.T) {
	privtest.RequireRoot(t)
	nodes := StandInNodes()
	const (
		uvmOpen     = `openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) = `
		uvmRetry    = `openat(AT_FDCWD, "/dev/nvidia-uvm", O_RDWR) = `
		ctlOpen     = `openat(AT_FDCWD, "/dev/nvidiactl", O_RDWR) = `
		ctlRetry    = `openat(AT_FDCWD, "/dev/nvidiactl", O_RDONLY) = `
		gpuOpen     = `openat(AT_FDCWD, "/dev/nvidia0", O_RDWR|O_CLOEXEC) = `
		uvmTeardown = `ioctl(-1, 0x30000002) = -1 EBADF`
		fd          = "<fd>" // any descriptor: the Go runtime holds some of its own
	)
	cases := []struct {
		name string
		env  Env
		want int
		logs []string // substrings of the -v log, in order
	}{
		{"healthy", Env{Nodes: nodes, ProcDevices: StandInProcDevices}, 0,
			[]string{ctlOpen + fd, "ioctl(<fd>, 0xc0104629) = -1 ENOTTY", uvmOpen, "ioctl(<fd>, 0x30000001) = -1 ENOTTY", gpuOpen, "ioctl(<fd>, 0xc00446c9) = -1 ENOTTY"}},
		{"healthy as nobody", Env{Nodes: nodes, ProcDevices: StandInProcDevices, User: "nobody"}, 0,
			[]string{ctlOpen + fd, uvmOpen + fd, gpuOpen + fd}},
		{"cgroup2 denies uvm", Env{Nodes: nodes, ProcDevices: StandInProcDevices, CgroupV2Deny: []DeviceRule{{'c', UVMMajor, Wildcard, "rwm"}}}, 999,
			[]string{ctlOpen + fd, uvmOpen + "-1 EPERM", uvmRetry + "-1 EPERM", uvmTeardown, "ioctl(<fd>, 0xc0104629)", "ioctl(<fd>, 0xc0104629)"}},
		{"cgroup2 allows only ctl and gpu", Env{Nodes: nodes, ProcDevices: StandInProcDevices, CgroupV2AllowOnly: []DeviceRule{
			{'c', CtlMajor, CtlMinor, "rwm"}, {'c', GPUMajor, GPUMinor, "rwm"}, {'c', 1, 3, "rwm"}}}, 999,
			[]string{ctlOpen + fd, uvmOpen + "-1 EPERM", uvmRetry + "-1 EPERM", uvmTeardown}},
		{"cgroup2 denies nvidiactl", Env{Nodes: nodes, ProcDevices: StandInProcDevices, CgroupV2Deny: []DeviceRule{{'c', CtlMajor, CtlMinor, "rwm"}}}, 100,
			[]string{ctlOpen + "-1 EPERM", ctlRetry + "-1 EPERM"}},
		{"cgroup1 denies uvm", Env{Nodes: nodes, ProcDevices: StandInProcDevices, CgroupV1Deny: []string{"c 7:0 rwm"}}, 999,
			[]string{uvmOpen + "-1 EPERM", uvmRetry + "-1 EPERM", uvmTeardown}},
		{"cgroup1 denies mknod of missing uvm", Env{Nodes: withoutNode(nodes, "nvidia-uvm"), ProcDevices: StandInProcDevices, CgroupV1Deny: []string{"c 7:0 rwm"}}, 999,
			[]string{`stat("/dev/nvidia-uvm") = -1 ENOENT`, `mknodat(AT_FDCWD, "/dev/nvidia-uvm", 020666, makedev(7, 0)) = -1 EPERM`, uvmOpen + "-1 ENOENT", uvmRetry + "-1 ENOENT", uvmTeardown}},
		{"uvm missing as root is repaired", Env{Nodes: withoutNode(nodes, "nvidia-uvm"), ProcDevices: StandInProcDevices}, 0,
			[]string{`stat("/dev/nvidia-uvm") = -1 ENOENT`, `mknodat(AT_FDCWD, "/dev/nvidia-uvm", 020666, makedev(7, 0)) = 0`, uvmOpen + fd}},
		{"uvm missing as nobody", Env{Nodes: withoutNode(nodes, "nvidia-uvm"), ProcDevices: StandInProcDevices, User: "nobody"}, 999,
			[]string{`mknodat(AT_FDCWD, "/dev/nvidia-uvm", 020666, makedev(7, 0)) = -1 EACCES`, uvmOpen + "-1 ENOENT", uvmRetry + "-1 ENOENT", uvmTeardown}},
		{"uvm module not loaded", Env{Nodes: withoutNode(nodes, "nvidia-uvm"), ProcDevices: strings.ReplaceAll(StandInProcDevices, "  7 nvidia-uvm\n", "")}, 999,
			[]string{`stat("/dev/nvidia-uvm") = -1 ENOENT`, uvmOpen + "-1 ENOENT", uvmTeardown}},
		{"uvm stale major as root is repaired", Env{Nodes: withNode(nodes, "nvidia-uvm", func(n *Node) { n.Major = NoDriverMajor }), ProcDevices: StandInProcDevices}, 0,
			[]string{`stat("/dev/nvidia-uvm", {st_mode=020666, st_rdev=238:0}) = 0`, `unlink("/dev/nvidia-uvm") = 0`, `mknodat(AT_FDCWD, "/dev/nvidia-uvm", 020666, makedev(7, 0)) = 0`, uvmOpen + fd}},
		{"uvm stale major as nobody", Env{Nodes: withNode(nodes, "nvidia-uvm", func(n *Node) { n.Major = NoDriverMajor }), ProcDevices: StandInProcDevices, User: "nobody"}, 999,
			[]string{`unlink("/dev/nvidia-uvm") = -1 EACCES`, uvmOpen + "-1 ENXIO", uvmRetry + "-1 ENXIO", uvmTeardown}},
		{"uvm major without a driver", Env{Nodes: withNode(nodes, "nvidia-uvm", func(n *Node) { n.Major = NoDriverMajor }), ProcDevices: H200ProcDevices}, 999,
			[]string{`stat("/dev/nvidia-uvm", {st_mode=020666, st_rdev=238:0}) = 0`, uvmOpen + "-1 ENXIO", uvmRetry + "-1 ENXIO", uvmTeardown}},
		{"dev mounted nodev", Env{Nodes: nodes, ProcDevices: StandInProcDevices, NoDev: true}, 100,
			[]string{ctlOpen + "-1 EACCES", ctlRetry + "-1 EACCES"}},
		{"nvidiactl 0600 as nobody", Env{Nodes: withNode(nodes, "nvidiactl", func(n *Node) { n.Mode = 0o600 }), ProcDevices: StandInProcDevices, User: "nobody"}, 100,
			[]string{ctlOpen + "-1 EACCES", ctlRetry + "-1 EACCES"}},
		{"uvm 0600 as nobody", Env{Nodes: withNode(nodes, "nvidia-uvm", func(n *Node) { n.Mode = 0o600 }), ProcDevices: StandInProcDevices, User: "nobody"}, 999,
			[]string{uvmOpen + "-1 EACCES", uvmRetry + "-1 EACCES", uvmTeardown}},
		{"nvidia0 0660 video as nobody", Env{Nodes: withNode(nodes, "nvidia0", func(n *Node) { n.Mode, n.GID = 0o660, 44 }), ProcDevices: StandInProcDevices, User: "nobody"}, 100,
			[]string{uvmOpen + fd, gpuOpen + "-1 EACCES"}},
		{"nvidia0 0600 as root", Env{Nodes: withNode(nodes, "nvidia0", func(n *Node) { n.Mode = 0o600 }), ProcDevices: StandInProcDevices}, 0,
			[]string{gpuOpen + fd}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := runFake(t, &tc.env)
			if want := "cuInit " + strconv.Itoa(tc.want) + "\n"; o.stdout != want || o.exit != 0 {
				t.Fatalf("got stdout %q exit %d, want %q exit 0; log:\n%s", o.stdout, o.exit, want, o.stderr)
			}
			assertInOrder(t, o.stderr, tc.logs)
		})
	}
}

// assertInOrder checks that log holds each of want, in order; "<fd>" in a
// want matches any descriptor number.
func assertInOrder(t *testing.T, log string, want []string) {
	t.Helper()
	rest := log
	for _, w := range want {
		re := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(w), "<fd>", `\d+`))
		loc := re.FindStringIndex(rest)
		if loc == nil {
			t.Fatalf("log lacks %q after the previous match; log:\n%s", w, log)
		}
		rest = rest[loc[1]:]
	}
}

var tidPrefix = regexp.MustCompile(`(?m)^\[(\d+)\] `)

// tids returns the distinct thread IDs in a -v log.
func tids(t *testing.T, log string) []int {
	t.Helper()
	seen := map[int]bool{}
	var out []int
	for _, m := range tidPrefix.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.Atoi(m[1])
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no calls logged:\n%s", log)
	}
	return out
}

// startFake runs fakecuda in env and returns the command (its PID is the
// target's: unshare and the setup shell exec into it) and its output.
func startFake(t *testing.T, env *Env, args ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	bin := FakeCUDA(t)
	env.Prepare(t)
	argv := append([]string{bin, "-v", "--proc-devices", env.ProcDevicesPath()}, args...)
	cmd := env.Command(t, argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &stdout, &stderr
}

func TestFakeCUDAThreadsAndForks(t *testing.T) {
	privtest.RequireRoot(t)
	cases := []struct {
		name     string
		args     []string
		samePID  bool // calls come from the PID Command started
		wantLine int  // cuInit lines
	}{
		{"main thread", nil, true, 1},
		{"second thread", []string{"--thread"}, false, 1},
		{"grandchild", []string{"--fork-depth", "2"}, false, 1},
		{"loop", []string{"--loop", "3", "--interval", "0"}, true, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := &Env{Nodes: StandInNodes(), ProcDevices: StandInProcDevices}
			cmd, stdout, stderr := startFake(t, env, tc.args...)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			if want := strings.Repeat("cuInit 0\n", tc.wantLine); stdout.String() != want {
				t.Fatalf("stdout %q, want %q", stdout, want)
			}
			got := tids(t, stderr.String())
			if len(got) != 1 {
				t.Fatalf("calls from threads %v, want one thread", got)
			}
			if (got[0] == cmd.Process.Pid) != tc.samePID {
				t.Fatalf("calls from thread %d, command PID %d, same wanted: %v", got[0], cmd.Process.Pid, tc.samePID)
			}
		})
	}
}

func TestFakeCUDAExitAndErrors(t *testing.T) {
	privtest.RequireRoot(t)
	root := ModuleRoot(t)
	cases := []struct {
		name   string
		env    Env
		args   []string
		stdout string
		exit   int
		stderr string
	}{
		{"exit-nonzero on failure", Env{Nodes: withoutNode(StandInNodes(), "nvidiactl")}, []string{"--exit-nonzero"}, "cuInit 100\n", 1, ""},
		{"exit-nonzero on success", Env{Nodes: StandInNodes()}, []string{"--exit-nonzero"}, "cuInit 0\n", 0, ""},
		{"libcuda opened", Env{Nodes: StandInNodes()}, []string{"--libcuda", filepath.Join(root, "testdata/fakecuda/lib/libcuda.so.1")}, "cuInit 0\n", 0, `/lib/libcuda.so.1", O_RDONLY|O_CLOEXEC) = `},
		{"stub libcuda", Env{Nodes: StandInNodes()}, []string{"--libcuda", filepath.Join(root, "testdata/fakecuda/lib/stubs/libcuda.so")}, "cuInit 34\n", 0, ""},
		{"libcuda missing", Env{Nodes: StandInNodes()}, []string{"--libcuda", "/nonexistent/libcuda.so.1"}, "", 1, "fakecuda: libcuda.so.1: cannot open shared object file"},
		{"exit status through two forks", Env{Nodes: withoutNode(StandInNodes(), "nvidiactl")}, []string{"--fork-depth", "2", "--exit-nonzero"}, "cuInit 100\n", 1, ""},
		{"bad flag", Env{Nodes: StandInNodes()}, []string{"--loop", "-1"}, "", 2, "fakecuda: --fork-depth, --loop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.env.ProcDevices = StandInProcDevices
			o := runFake(t, &tc.env, tc.args...)
			if o.stdout != tc.stdout || o.exit != tc.exit || !strings.Contains(o.stderr, tc.stderr) {
				t.Fatalf("got stdout %q exit %d, want %q exit %d and stderr containing %q; stderr:\n%s",
					o.stdout, o.exit, tc.stdout, tc.exit, tc.stderr, o.stderr)
			}
			if tc.name == "stub libcuda" && strings.Contains(o.stderr, "/dev/") {
				t.Fatalf("the stub touched device nodes:\n%s", o.stderr)
			}
		})
	}
	t.Run("CUDA_VISIBLE_DEVICES hides every GPU", func(t *testing.T) {
		env := &Env{Nodes: StandInNodes(), ProcDevices: StandInProcDevices}
		env.Prepare(t)
		cmd := env.Command(t, FakeCUDA(t), "-v", "--proc-devices", env.ProcDevicesPath())
		cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES=-1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || string(out) != "cuInit 100\n" {
			t.Fatalf("got %q, %v, want cuInit 100", out, err)
		}
		if strings.Contains(stderr.String(), `"/dev/nvidia0", O_RDWR`) {
			t.Fatalf("opened nvidia0 although hidden:\n%s", stderr.String())
		}
	})
}

// The Env's own pieces: the program is runc's cgroup_device program, and
// the setup's files and nodes are as asked.
func TestEnvResources(t *testing.T) {
	privtest.RequireRoot(t)
	env := &Env{
		Nodes:        []Node{{Path: "nvidia-caps/nvidia-cap1", Major: 1, Minor: 5, Mode: 0o400, UID: 65534, GID: 65534}},
		ProcDevices:  H200ProcDevices,
		CgroupV2Deny: []DeviceRule{{'c', NoDriverMajor, Wildcard, "rwm"}},
	}
	env.Prepare(t)
	if len(env.ProgramIDs()) != 1 {
		t.Fatalf("program IDs %v, want one", env.ProgramIDs())
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(env.ProgramIDs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if prog.Type() != ebpf.CGroupDevice {
		t.Fatalf("program type %v, want CGroupDevice", prog.Type())
	}
	if data, err := os.ReadFile(env.ProcDevicesPath()); err != nil || string(data) != H200ProcDevices {
		t.Fatalf("proc devices file: %q, %v", data, err)
	}
	out, err := env.Command(t, "sh", "-c", `stat -c '%F %t:%T %a %u:%g' /dev/nvidia-caps/nvidia-cap1; cat /proc/self/cgroup; findmnt -no OPTIONS /dev`).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"character special file 1:5 400 65534:65534", "0::/" + filepath.Base(env.CgroupV2Path()), "nosuid"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "nodev") {
		t.Errorf("/dev is nodev without NoDev:\n%s", out)
	}
}

func TestProcDevicesFilesMatchConstants(t *testing.T) {
	root := ModuleRoot(t)
	for file, want := range map[string]string{
		"procdevices-standin": StandInProcDevices,
		"procdevices-h200":    H200ProcDevices,
		"procdevices-no-uvm":  strings.ReplaceAll(StandInProcDevices, "  7 nvidia-uvm\n", ""),
	} {
		data, err := os.ReadFile(filepath.Join(root, "testdata/fakecuda", file))
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != want {
			t.Errorf("%s differs from its constant:\n%s", file, data)
		}
	}
}

func TestBadInput(t *testing.T) {
	privtest.RequireRoot(t)
	for name, env := range map[string]*Env{
		"absolute node path": {Nodes: []Node{{Path: "/dev/nvidia0"}}},
		"escaping node path": {Nodes: []Node{{Path: "../etc/x"}}},
		"both v2 lists":      {CgroupV2Deny: []DeviceRule{{'c', 1, 3, "r"}}, CgroupV2AllowOnly: []DeviceRule{{'c', 1, 3, "r"}}},
	} {
		ft := &fatalRecorder{TB: t}
		func() {
			defer func() { recover() }()
			env.Prepare(ft)
		}()
		if !ft.failed || strings.Contains(ft.msg, "\n") {
			t.Errorf("%s: want a one-line fatal error, got failed=%v %q", name, ft.failed, ft.msg)
		}
	}
}

// fatalRecorder captures Fatal instead of failing the real test.
type fatalRecorder struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fatalRecorder) Fatal(args ...any) {
	f.failed, f.msg = true, fmt.Sprint(args...)
	panic(f)
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	panic(f)
}

// When it cannot repair a node itself, fakecuda runs nvidia-modprobe as
// libcuda does, and waits for it.
func TestFakeCUDARunsModprobe(t *testing.T) {
	privtest.RequireRoot(t)
	dir := sharedTempDir(t, "cudatrace-modprobe-")
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	modprobe := filepath.Join(dir, "nvidia-modprobe")
	script := "#!/bin/sh\necho \"$@\" >> " + quote(filepath.Join(dir, "args")) + "\nexit 1\n"
	if err := os.WriteFile(modprobe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := &Env{Nodes: withoutNode(StandInNodes(), "nvidia-uvm"), ProcDevices: StandInProcDevices, User: "nobody"}
	o := runFake(t, env, "--modprobe", modprobe)
	if o.stdout != "cuInit 999\n" {
		t.Fatalf("stdout %q; log:\n%s", o.stdout, o.stderr)
	}
	args, err := os.ReadFile(filepath.Join(dir, "args"))
	if err != nil || string(args) != "-u -c=0\n" {
		t.Fatalf("nvidia-modprobe ran with %q (%v), want once with -u -c=0", args, err)
	}
	assertInOrder(t, o.stderr, []string{`mknodat(AT_FDCWD, "/dev/nvidia-uvm"`, "EACCES", modprobe + " -u -c=0: exit status 1", `"/dev/nvidia-uvm", O_RDWR|O_CLOEXEC) = -1 ENOENT`})
}
