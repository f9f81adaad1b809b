package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/report"
)

var containerSeq atomic.Int32

// lxcCase is one real LXC container started with lxc-execute: the
// stand-in nodes are made with mknod in a private host directory and bound
// in with lxc.mount.entry ... create=file, as users bind /dev/nvidia*.
type lxcCase struct {
	allow       []string // device rules besides "deny a"
	noHostUVM   bool     // the host node is missing at container start
	procDevices string   // testdata/fakecuda file the target reads
}

// needRuntime skips (or fails, in CI) when a runtime's binary is absent.
func needRuntime(t *testing.T, bin string) string {
	t.Helper()
	privtest.RequireRoot(t)
	p, err := exec.LookPath(bin)
	if err != nil {
		privtest.Skip(t, bin+" is not installed (.ci/run installs it)")
	}
	return p
}

// runtimeDir is a scratch directory the container runtime can read: a
// rootfs holding the static fakecuda and its /proc/devices stand-in, and
// the host nodes.
func runtimeDir(t *testing.T, procDevices string) (dir, rootfs string) {
	t.Helper()
	needBinaries(t)
	dir, err := os.MkdirTemp("", "cudatrace-rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rootfs = filepath.Join(dir, "rootfs")
	for _, d := range []string{"dev", "proc", "sys", "nodes"} {
		p := filepath.Join(rootfs, d)
		if d == "nodes" {
			p = filepath.Join(dir, d)
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)
	copyFile(t, fakecudaBin, filepath.Join(rootfs, "fakecuda"), 0o755)
	copyFile(t, filepath.Join(scenario.ModuleRoot(t), "testdata", "fakecuda", procDevices), filepath.Join(rootfs, "pd"), 0o644)
	return dir, rootfs
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err == nil {
		err = os.WriteFile(to, b, mode)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// hostNodes makes the stand-in nodes in dir/nodes; skip names one left out.
func hostNodes(t *testing.T, dir string, skip string) {
	t.Helper()
	for _, n := range scenario.StandInNodes() {
		if n.Path == skip {
			continue
		}
		if err := unix.Mknod(filepath.Join(dir, "nodes", n.Path), unix.S_IFCHR|0o666, int(unix.Mkdev(n.Major, n.Minor))); err != nil {
			t.Fatal(err)
		}
	}
}

// devicesKey is the LXC key the host's device controller honours.
func devicesKey() string {
	if scenario.CgroupV1DevicesRoot() != "" {
		return "lxc.cgroup.devices.allow"
	}
	return "lxc.cgroup2.devices.allow"
}

// start writes the config and returns the container's name and the
// lxc-execute command line running fakecuda; cleanup stops the container
// and checks that no cgroup or mount of it is left.
func (c lxcCase) start(t *testing.T) (name string, argv []string, rootfs string) {
	t.Helper()
	needRuntime(t, "lxc-execute")
	dir, rootfs := runtimeDir(t, c.procDevices)
	skip := ""
	if c.noHostUVM {
		skip = "nvidia-uvm"
	}
	hostNodes(t, dir, skip)
	name = fmt.Sprintf("cudatrace-ct%d-%d", os.Getpid(), containerSeq.Add(1))
	key := devicesKey()
	conf := []string{
		"lxc.uts.name = " + name,
		"lxc.rootfs.path = dir:" + rootfs,
		"lxc.net.0.type = empty",
		"lxc.mount.auto = proc:rw sys:ro",
		"lxc.autodev = 1",
		strings.Replace(key, ".allow", ".deny", 1) + " = a",
	}
	// null, zero, full, tty and pts, as LXC's common config allows.
	for _, r := range append([]string{"c 1:3 rwm", "c 5:* rwm", "c 136:* rwm"}, c.allow...) {
		conf = append(conf, key+" = "+r)
	}
	for _, n := range scenario.StandInNodes() {
		conf = append(conf, fmt.Sprintf("lxc.mount.entry = %s dev/%s none bind,optional,create=file", filepath.Join(dir, "nodes", n.Path), n.Path))
	}
	cf := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(cf, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("lxc-stop", "-k", "-n", name).Run() // normally long gone
		if left := containerLeftovers(name, dir); len(left) > 0 {
			t.Errorf("left behind by container %s: %v", name, left)
		}
	})
	return name, []string{"lxc-execute", "-n", name, "-f", cf, "--", "/fakecuda", "--proc-devices", "/pd"}, rootfs
}

// containerLeftovers lists cgroups named after the container and mounts
// under its directory that are still there.
func containerLeftovers(name, dir string) []string {
	var left []string
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		subs, _ := os.ReadDir(root)
		for _, s := range append(subs, nil) {
			base := root
			if s != nil {
				base = filepath.Join(root, s.Name())
			}
			m, _ := filepath.Glob(filepath.Join(base, "*"+name+"*"))
			left = append(left, m...)
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if strings.Contains(l, dir) {
				left = append(left, l)
			}
		}
	}
	return left
}

// traceHost runs cudatrace on the host around argv.
func traceHost(t *testing.T, backend, procDevices string, argv ...string) traceRun {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	pd := filepath.Join(scenario.ModuleRoot(t), "testdata", "fakecuda", procDevices)
	cmd := exec.Command(cudatraceBin, append([]string{"--backend", backend, "-o", out, "--proc-devices", pd, "--"}, argv...)...)
	r := runBinary(t, cmd)
	rep, err := report.LoadFile(out)
	if err != nil {
		t.Fatalf("load report: %v\nexit %d, stdout:\n%s\nstderr:\n%s", err, r.code, r.stdout, r.stderr)
	}
	return traceRun{result: r, rep: rep, backend: backend}
}

// S1: the allow-list lacks uvm's major; S2: it allows a stale one (the
// H200's 238, which no driver owns here). Traced from the host, through
// lxc-execute: the failing open, LXC named, the fix an LXC config line.
func TestLXCAllowList(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow []string
		want  []string
	}{
		{"S1-missing", []string{"c 1:7 rwm", "c 1:5 rwm"}, nil},
		{"S2-stale", []string{"c 1:7 rwm", "c 1:5 rwm", fmt.Sprintf("c %d:* rwm", scenario.NoDriverMajor)}, []string{fmt.Sprintf(" %d, which no driver owns now", scenario.NoDriverMajor)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, backend := range backends {
				t.Run(backend, func(t *testing.T) {
					name, argv, _ := lxcCase{allow: tc.allow, procDevices: "procdevices-standin"}.start(t)
					// lingerArgs: the container lives on after the failing
					// open, so the snapshot reads its cgroup.
					tr := traceHost(t, backend, "procdevices-standin", append(argv, lingerArgs...)...)
					if !strings.Contains(tr.stdout, "cuInit 999\ncuInit 999") {
						t.Fatalf("target printed %q\nstderr:\n%s", tr.stdout, tr.stderr)
					}
					tr.failing(t, "openat", "/dev/nvidia-uvm", unix.EPERM)
					id := "cgroup1-denied"
					if devicesKey() == "lxc.cgroup2.devices.allow" {
						id = "cgroup2-denied"
					}
					tr.requireFinding(t, id, analysis.SeverityError)
					if c := tr.rep.Snapshot.Container; c.Runtime != "lxc" || c.ID != name || c.Manager != "lxc" {
						t.Errorf("container %+v, want lxc %s (plain LXC)", c, name)
					}
					text := tr.findingText(id)
					for _, w := range append([]string{"`" + devicesKey() + " = c 7:* rwm`"}, tc.want...) {
						if !strings.Contains(text, w) {
							t.Errorf("%s lacks %q:\n%s", id, w, text)
						}
					}
					if strings.Contains(text, devicesKey()+":") {
						t.Errorf("plain LXC fix in Proxmox syntax:\n%s", text)
					}
					if tr.findingText("node-repaired") != "" {
						t.Errorf("LXC's own setup reported as a repair:\n%s", tr.findingText("node-repaired"))
					}
				})
			}
		})
	}
}

// The host had no nvidia-uvm when the container started: create=file
// leaves an empty regular file, which opens. The report must say it is not
// a device, why, and the fix, in plain LXC's syntax.
func TestLXCPlaceholderFile(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			name, argv, _ := lxcCase{allow: []string{"c 1:7 rwm", "c 1:5 rwm", "c 7:* rwm"}, noHostUVM: true, procDevices: "procdevices-no-uvm"}.start(t)
			tr := traceHost(t, backend, "procdevices-no-uvm", argv...)
			f := tr.requireFinding(t, "node-not-device", analysis.SeverityError)
			if f.Summary != "/dev/nvidia-uvm is a regular file, not a character device" {
				t.Errorf("summary %q", f.Summary)
			}
			text := tr.findingText("node-not-device")
			for _, w := range []string{"did not exist when the container started", "LXC bound nothing over it", "nvidia-modprobe -u -c=0", "`lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file`", "restart the container"} {
				if !strings.Contains(text, w) {
					t.Errorf("node-not-device lacks %q:\n%s", w, text)
				}
			}
			if v := tr.rep.Analysis.Verdict; !strings.HasPrefix(v, "cuInit cannot succeed: /dev/nvidia-uvm is a regular file") {
				t.Errorf("verdict %q", v)
			}
			if ok := tr.findingText("calls-ok"); strings.Contains(ok, "nvidia-uvm") {
				t.Errorf("calls-ok still says the placeholder opened fine:\n%s", ok)
			}
			if tr.findingText("node-repaired") != "" {
				t.Errorf("LXC's mknodat(S_IFREG) reported as a repair:\n%s", tr.findingText("node-repaired"))
			}
			if c := tr.rep.Snapshot.Container; c.Runtime != "lxc" || c.ID != name {
				t.Errorf("container %+v (snapshot of pid %d %q; not read: %q)", c, tr.rep.Snapshot.Process.PID, tr.rep.Snapshot.Process.Comm, tr.rep.Snapshot.Unavailable)
			}
		})
	}
}

// Traced from inside: cudatrace run in the container itself (what a user
// with a shell in it does). The container's view has no cgroup mount and
// its own cgroup namespace, so the policy is inferred from the errno; the
// failing call, the node and the runtime must still be right.
//
// Inside the container's PID namespace the eBPF programs cannot know its
// PIDs: --backend ebpf refuses in one line (it used to wait forever), and
// auto falls back to ptrace.
func TestLXCTraceFromInside(t *testing.T) {
	t.Run("ebpf-refused", func(t *testing.T) {
		_, argv, rootfs := lxcCase{allow: []string{"c 1:7 rwm", "c 1:5 rwm"}, procDevices: "procdevices-standin"}.start(t)
		copyFile(t, cudatraceBin, filepath.Join(rootfs, "cudatrace"), 0o755)
		i := slices.Index(argv, "--")
		inner := append(append(append([]string{}, argv[:i+1]...), "/cudatrace", "--backend", "ebpf", "--"), argv[i+1:]...)
		r := runBinary(t, exec.Command(inner[0], inner[1:]...))
		if r.code != exitFailure || !strings.Contains(r.stderr, "PID namespace of its own") || strings.Contains(r.stdout, "cuInit") {
			t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
	})
	for _, backend := range []string{"auto", "ptrace"} {
		t.Run(backend, func(t *testing.T) {
			name, argv, rootfs := lxcCase{allow: []string{"c 1:7 rwm", "c 1:5 rwm"}, procDevices: "procdevices-standin"}.start(t)
			copyFile(t, cudatraceBin, filepath.Join(rootfs, "cudatrace"), 0o755)
			// lxc-execute ... -- /cudatrace ... -- /fakecuda --proc-devices /pd
			i := slices.Index(argv, "--")
			inner := append(append(append([]string{}, argv[:i+1]...), "/cudatrace", "--backend", backend, "--proc-devices", "/pd", "-o", "/r.json", "--"), argv[i+1:]...)
			r := runBinary(t, exec.Command(inner[0], inner[1:]...))
			if !strings.Contains(r.stdout, "cuInit 999") {
				t.Fatalf("container %s printed %q (exit %d); stderr:\n%s", name, r.stdout, r.code, r.stderr)
			}
			rep, err := report.LoadFile(filepath.Join(rootfs, "r.json"))
			if err != nil {
				t.Fatalf("load report: %v\nstderr:\n%s", err, r.stderr)
			}
			f := rep.Analysis.Failing
			if f == nil || f.Path != "/dev/nvidia-uvm" || f.Errno() != unix.EPERM {
				t.Fatalf("failing %+v; verdict %q", f, rep.Analysis.Verdict)
			}
			if rep.Trace.Backend != "ptrace" {
				t.Errorf("backend %q, want ptrace", rep.Trace.Backend)
			}
			if !strings.Contains(rep.Analysis.Verdict, "/dev/nvidia-uvm") || strings.Contains(rep.Analysis.Verdict, "No NVIDIA device call failed") {
				t.Errorf("verdict %q", rep.Analysis.Verdict)
			}
		})
	}
}
