package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/scenario"
)

// ociBundle writes a bundle whose config.json runs fakecuda with the
// stand-in nodes in linux.devices (less those in drop) and a device
// allow-list of them (less the majors in noAllow).
func ociBundle(t *testing.T, withUVMNode bool, allowUVM bool) string {
	t.Helper()
	dir, _ := runtimeDir(t, "procdevices-standin")
	fm := os.FileMode(0o666)
	uid := uint32(0)
	deny, allow := false, true
	var devs []specs.LinuxDevice
	rules := []specs.LinuxDeviceCgroup{{Allow: deny, Access: "rwm"}}
	for _, n := range scenario.StandInNodes() {
		if n.Path == "nvidia-uvm" && !withUVMNode {
			continue
		}
		devs = append(devs, specs.LinuxDevice{Path: "/dev/" + n.Path, Type: "c", Major: int64(n.Major), Minor: int64(n.Minor), FileMode: &fm, UID: &uid, GID: &uid})
		if n.Path == "nvidia-uvm" && !allowUVM {
			continue
		}
		maj, min := int64(n.Major), int64(n.Minor)
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: allow, Type: "c", Major: &maj, Minor: &min, Access: "rwm"})
	}
	for _, m := range []int64{1} { // /dev/null for the runtime's own stdio setup
		maj, min := m, int64(3)
		rules = append(rules, specs.LinuxDeviceCgroup{Allow: allow, Type: "c", Major: &maj, Minor: &min, Access: "rwm"})
	}
	spec := specs.Spec{
		Version: "1.0.2", // the oldest the Debian runtimes accept (crun 1.8 refuses 1.2)
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{
			Args: append([]string{"/fakecuda", "--proc-devices", "/pd"}, lingerArgs...),
			Cwd:  "/",
			Env:  []string{"PATH=/"},
		},
		Hostname: "cudatrace-oci",
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "mode=755"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.MountNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}},
			Devices:    devs,
			Resources:  &specs.LinuxResources{Devices: rules},
		},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// runc and crun run a bundle whose linux.resources.devices lacks uvm's
// major, or whose linux.devices lacks the node; traced from the host.
func TestOCIRuntimes(t *testing.T) {
	for _, rt := range []string{"runc", "crun"} {
		t.Run(rt, func(t *testing.T) {
			bin := needRuntime(t, rt)
			for _, tc := range []struct {
				name        string
				node, allow bool
				errno       unix.Errno
				want        []string
			}{
				{"no-allow", true, false, unix.EPERM, []string{`{"allow": true, "type": "c", "major": 7, "access": "rwm"}`, "linux.resources.devices", rt + " run"}},
				{"no-node", false, true, unix.ENOENT, []string{`{"path": "/dev/nvidia-uvm", "type": "c"`, "linux.devices", rt + " run"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					for _, backend := range backends {
						t.Run(backend, func(t *testing.T) {
							dir := ociBundle(t, tc.node, tc.allow)
							id := fmt.Sprintf("cudatrace-oci-%d-%d", os.Getpid(), containerSeq.Add(1))
							t.Cleanup(func() {
								exec.Command(bin, "delete", "-f", id).Run()
								if left := containerLeftovers(id, dir); len(left) > 0 {
									t.Errorf("left behind by %s %s: %v", rt, id, left)
								}
							})
							tr := traceHost(t, backend, "procdevices-standin", bin, "run", "--bundle", dir, id)
							if hybridRefused(tr.stderr) {
								// Not a missing install: this runtime cannot
								// run on this host layout, so the skip stands
								// in CI too.
								t.Skipf("%s refuses this host: %q (Debian 12's crun 1.8 cannot run on a hybrid cgroup layout whose cgroup2 has controllers)", rt, strings.TrimSpace(strings.SplitN(tr.stderr, "\n", 2)[0]))
							}
							if !strings.Contains(tr.stdout, "cuInit 999") {
								t.Fatalf("target printed %q\nstderr:\n%s", tr.stdout, tr.stderr)
							}
							tr.failing(t, "openat", "/dev/nvidia-uvm", tc.errno)
							if c := tr.rep.Snapshot.Container; c.Runtime != rt {
								t.Errorf("container %+v, want runtime %s", c, rt)
							}
							var all strings.Builder
							for _, f := range tr.rep.Analysis.Findings {
								all.WriteString(f.Fix + "\n")
							}
							for _, w := range tc.want {
								if !strings.Contains(all.String(), w) {
									t.Errorf("no fix has %q; findings %v:\n%s", w, findingIDs(tr.rep), all.String())
								}
							}
						})
					}
				})
			}
		})
	}
}

// hybridRefused is crun's refusal of a hybrid cgroup layout (v1
// controllers plus a cgroup2 mount with controllers), which CI's machine
// has.
func hybridRefused(stderr string) bool {
	return strings.Contains(stderr, "cgroups in hybrid mode not supported")
}
