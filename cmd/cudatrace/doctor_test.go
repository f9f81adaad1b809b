package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/doctor"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
)

// h200Nodes are the recorded H200's nodes. doctor never opens a node, so
// real NVIDIA numbers work without the driver: mknod makes them, and the
// fake /proc/devices registers them.
func h200Nodes() []scenario.Node {
	return []scenario.Node{
		{Path: "nvidiactl", Major: 195, Minor: 255},
		{Path: "nvidia0", Major: 195, Minor: 0},
		{Path: "nvidia-uvm", Major: 238, Minor: 0},
		{Path: "nvidia-uvm-tools", Major: 238, Minor: 1},
	}
}

func runDoctor(t *testing.T, env *scenario.Env, args ...string) (*doctor.Result, result) {
	t.Helper()
	env.Prepare(t)
	argv := append([]string{cudatraceBin, "doctor", "--format", "json", "--nvidia-smi", "-", "--proc-devices", env.ProcDevicesPath()}, args...)
	r := runBinary(t, env.Command(t, argv...))
	var res doctor.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("doctor output is not its JSON (%v):\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	if res.Schema != doctor.Schema {
		t.Fatalf("schema %q", res.Schema)
	}
	return &res, r
}

func doctorCheck(t *testing.T, res *doctor.Result, id, subject string, want doctor.Status) doctor.Check {
	t.Helper()
	for _, c := range res.Checks {
		if c.ID == id && (subject == "" || c.Subject == subject) {
			if c.Status != want {
				t.Fatalf("%s %s: %s, want %s: %s (fix: %s)", id, subject, c.Status, want, c.Summary, c.Fix)
			}
			return c
		}
	}
	t.Fatalf("no %s check for %s in %+v", id, subject, res.Checks)
	return doctor.Check{}
}

// Doctor inside the real broken states: nodes made with mknod in a private
// mount namespace, a runc-shaped cgroup v2 program attached to a real
// cgroup, a real v1 devices.deny.
func TestDoctorInScenarios(t *testing.T) {
	privtest.RequireRoot(t)
	h200 := func() *scenario.Env { return &scenario.Env{Nodes: h200Nodes(), ProcDevices: scenario.H200ProcDevices} }

	t.Run("healthy", func(t *testing.T) {
		res, r := runDoctor(t, h200())
		for _, n := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"} {
			doctorCheck(t, res, "node", n, doctor.Pass)
			doctorCheck(t, res, "device-policy", n, doctor.Pass)
		}
		// No NVIDIA driver on this machine: the driver check fails, and so
		// does the run.
		doctorCheck(t, res, "driver-modules", "", doctor.Fail)
		if r.code != exitFound {
			t.Errorf("exit %d, want %d", r.code, exitFound)
		}
	})
	t.Run("deny-uvm-v2", func(t *testing.T) {
		env := h200()
		env.CgroupV2Deny = []scenario.DeviceRule{{Type: 'c', Major: 238, Minor: scenario.Wildcard, Access: "rwm"}}
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "device-policy", "/dev/nvidia-uvm", doctor.Fail)
		id := env.ProgramIDs()[0]
		if !strings.Contains(c.Summary, "program "+itoa(id)+" (attached to /"+lastElem(env.CgroupV2Path())+")") || !strings.Contains(c.Fix, "c 238:* rwm") {
			t.Errorf("summary %q fix %q (program %d)", c.Summary, c.Fix, id)
		}
		doctorCheck(t, res, "device-policy", "/dev/nvidiactl", doctor.Pass)
	})
	t.Run("stale-allow-v2", func(t *testing.T) {
		env := h200()
		env.CgroupV2AllowOnly = []scenario.DeviceRule{{Type: 'c', Major: 1, Minor: scenario.Wildcard, Access: "rwm"}, {Type: 'c', Major: 195, Minor: scenario.Wildcard, Access: "rwm"}, {Type: 'c', Major: 504, Minor: scenario.Wildcard, Access: "rwm"}}
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "device-policy", "/dev/nvidia-uvm", doctor.Fail)
		if !strings.Contains(strings.Join(c.Detail, " "), "allows `c 504:* rwm`, a major no driver holds now") || !strings.Contains(c.Fix, "c 238:* rwm") {
			t.Errorf("stale rule not named: %q fix %q", c.Detail, c.Fix)
		}
		doctorCheck(t, res, "device-policy", "/dev/nvidia0", doctor.Pass)
	})
	t.Run("v1-allow-list", func(t *testing.T) {
		if scenario.CgroupV1DevicesRoot() == "" {
			privtest.Skip(t, "the cgroup v1 devices controller is not mounted")
		}
		env := h200()
		env.CgroupV1Deny = []string{"a"}
		env.Prepare(t)
		for _, rule := range []string{"c 1:* rwm", "c 5:* rwm", "c 136:* rwm", "c 4:* rwm", "c 195:* rwm"} {
			if err := os.WriteFile(filepath.Join(env.CgroupV1Path(), "devices.allow"), []byte(rule), 0); err != nil {
				t.Fatal(err)
			}
		}
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "device-policy", "/dev/nvidia-uvm", doctor.Fail)
		if !strings.Contains(c.Summary, "cgroup v1 devices.list") || !strings.Contains(c.Fix, "c 238:* rwm") {
			t.Errorf("%q %q", c.Summary, c.Fix)
		}
		doctorCheck(t, res, "device-policy", "/dev/nvidiactl", doctor.Pass)
	})
	t.Run("v1-deny-exception-is-invisible", func(t *testing.T) {
		if scenario.CgroupV1DevicesRoot() == "" {
			privtest.Skip(t, "the cgroup v1 devices controller is not mounted")
		}
		env := h200()
		env.CgroupV1Deny = []string{"c 238:0 rwm"}
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "device-policy", "/dev/nvidia-uvm", doctor.Pass)
		if !strings.Contains(strings.Join(c.Detail, " "), "does not show the deny exceptions") {
			t.Errorf("the limitation is not said: %q", c.Detail)
		}
	})
	t.Run("uvm-missing", func(t *testing.T) {
		env := h200()
		env.Nodes = env.Nodes[:2]
		res, _ := runDoctor(t, env, "-u", "nobody")
		doctorCheck(t, res, "node-missing", "/dev/nvidia-uvm", doctor.Fail)
	})
	t.Run("uvm-stale", func(t *testing.T) {
		env := h200()
		env.Nodes[2].Major = 504
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "node", "/dev/nvidia-uvm", doctor.Fail)
		if !strings.Contains(c.Summary, "c 504:0") {
			t.Errorf("%q", c.Summary)
		}
	})
	t.Run("nodev", func(t *testing.T) {
		env := h200()
		env.NoDev = true
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "node", "/dev/nvidiactl", doctor.Fail)
		if !strings.Contains(c.Summary, "nodev") {
			t.Errorf("%q", c.Summary)
		}
	})
	t.Run("mode-for-user", func(t *testing.T) {
		env := h200()
		for i := range env.Nodes {
			env.Nodes[i].Mode, env.Nodes[i].GID = 0o660, 44
		}
		res, _ := runDoctor(t, env, "-u", "nobody")
		doctorCheck(t, res, "node", "/dev/nvidiactl", doctor.Fail)
		res, _ = runDoctor(t, env)
		doctorCheck(t, res, "node", "/dev/nvidiactl", doctor.Pass) // root
	})
	t.Run("unprivileged-skips", func(t *testing.T) {
		env := h200()
		env.User = "nobody"
		env.CgroupV2Deny = []scenario.DeviceRule{{Type: 'c', Major: 238, Minor: scenario.Wildcard, Access: "rwm"}}
		res, _ := runDoctor(t, env)
		c := doctorCheck(t, res, "device-policy", "/dev/nvidia-uvm", doctor.Skip)
		if !strings.Contains(c.Summary, "needs root") {
			t.Errorf("%q", c.Summary)
		}
		doctorCheck(t, res, "kernel-log", "", doctor.Skip)
	})
}

func itoa(n uint32) string     { return strconv.FormatUint(uint64(n), 10) }
func lastElem(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// -u USER is looked up in the subject's root: when that cannot be read
// (/proc/1/root, unprivileged), doctor says so, not "no such user".
func TestDoctorUserUnreadableRoot(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		privtest.Skip(t, "no setpriv (apt-get install util-linux)")
	}
	r := runBinary(t, exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		cudatraceBin, "doctor", "-u", "root", "--pid", "1", "--nvidia-smi", "-"))
	if r.code != exitFailure || !strings.Contains(r.stderr, "/proc/1/root could not be read") || strings.Contains(r.stderr, "no such user") {
		t.Errorf("exit %d, stderr %q; want %d and why /proc/1/root could not be read", r.code, r.stderr, exitFailure)
	}
	// Where the root can be read (this test's own), root is found.
	r = runBinary(t, exec.Command(cudatraceBin, "doctor", "-u", "root", "--pid", strconv.Itoa(os.Getpid()), "--nvidia-smi", "-", "--format", "json"))
	if strings.Contains(r.stderr, "-u root") {
		t.Errorf("as root: %q", r.stderr)
	}
}

func TestDoctorUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--pid", "-3"}, "is not a process ID"},
		{[]string{"doctor", "--format", "yaml"}, "unknown format"},
		{[]string{"doctor", "extra"}, "unexpected argument"},
		{[]string{"doctor", "--pid", "2147483646"}, "no process 2147483646"},
		{[]string{"doctor", "--pid", "1", "--cgroup", "/x"}, "not both"},
		{[]string{"doctor", "--cgroup", "/../x"}, ".. is not allowed"},
		{[]string{"doctor", "--bogus"}, "unknown flag"},
		{[]string{"doctor", "-u", "no-such-user-xyz", "--nvidia-smi", "-"}, "no such user"},
		{[]string{"doctor", "--cgroup", "/no-such-cgroup-xyz", "--nvidia-smi", "-"}, "--cgroup /no-such-cgroup-xyz: no such cgroup"},
		{[]string{"doctor", "--cgroup", "/sys/fs/cgroup/no-such-cgroup-xyz", "--nvidia-smi", "-"}, "no such cgroup"},
		{[]string{"doctor", "--color", "sometimes"}, `--color "sometimes"`},
		{[]string{"doctor", "-f", "json"}, "unknown shorthand flag: 'f'"},
	} {
		r := runBinary(t, exec.Command(cudatraceBin, tc.args...))
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
			t.Errorf("%v: exit %d stderr %q, want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	r := runBinary(t, exec.Command(cudatraceBin, "doctor", "--help"))
	if r.code != 0 || !strings.Contains(r.stdout, "5    no FAIL, but at least one WARN") || !strings.Contains(r.stdout, "--cgroup PATH") {
		t.Errorf("help: %d %q", r.code, r.stdout)
	}
}
