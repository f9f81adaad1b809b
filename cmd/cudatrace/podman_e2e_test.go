package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/report"
)

// podman, as users run it with --device: the container gets nvidiactl and
// nvidia0 but not nvidia-uvm. Traced from the host, the failing open is in
// the container's short-lived process, and the fix is podman's own
// `--device` flag (the container is named from the failing process's
// cgroup and ancestors, read at the failure).
//
// On this VM's hybrid cgroup layout crun refuses podman's default
// RLIMIT_NOFILE, so the test asks for runc and low rlimits; no network,
// and the root filesystem is a directory (--rootfs), so no image is pulled.
func TestPodmanDevice(t *testing.T) {
	needBinaries(t)
	podman, err := exec.LookPath("podman")
	if err != nil {
		privtest.Skip(t, "podman is not installed")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		privtest.Skip(t, "runc is not installed")
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			privtest.RequireRoot(t)
			dir := t.TempDir()
			rootfs := filepath.Join(dir, "rootfs")
			nodes := filepath.Join(dir, "nodes")
			for _, d := range []string{rootfs, nodes} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			bin, err := os.ReadFile(fakecudaBin)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(rootfs, "fakecuda"), bin, 0o755); err != nil {
				t.Fatal(err)
			}
			procDevices := filepath.Join(dir, "devices")
			for _, p := range []string{procDevices, filepath.Join(rootfs, "procdevices")} {
				if err := os.WriteFile(p, []byte(scenario.StandInProcDevices), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for name, d := range map[string][2]uint32{"ctl": {scenario.CtlMajor, scenario.CtlMinor}, "gpu": {scenario.GPUMajor, scenario.GPUMinor}} {
				p := filepath.Join(nodes, name)
				if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(d[0], d[1]))); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, 0o666); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(dir, "r.json")
			cmd := exec.Command(cudatraceBin, "--backend", backend, "--proc-devices", procDevices, "-o", out, "--",
				podman, "run", "--rm", "--runtime", "runc", "--network", "none",
				"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
				"--device", filepath.Join(nodes, "ctl")+":/dev/nvidiactl",
				"--device", filepath.Join(nodes, "gpu")+":/dev/nvidia0",
				"--rootfs", rootfs, "/fakecuda", "--proc-devices", "/procdevices")
			// Outlives its failing open by the snapshot's reads, as the
			// other runtimes' tests do: under load a container that exits
			// at once can be gone before its identity is read.
			cmd.Args = append(cmd.Args, lingerArgs...)
			r := runBinary(t, cmd)
			if !strings.Contains(r.stdout, "cuInit 999") {
				t.Fatalf("container printed %q (exit %d); stderr:\n%s", r.stdout, r.code, r.stderr)
			}
			rep, err := report.LoadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			f := rep.Analysis.Failing
			if f == nil || f.Path != "/dev/nvidia-uvm" || f.Errno() != unix.ENOENT || f.Comm != "fakecuda" {
				t.Fatalf("failing %+v; verdict %q", f, rep.Analysis.Verdict)
			}
			if c := rep.Snapshot.Container; c.Runtime != "podman" {
				t.Errorf("container %+v, want podman", c)
			}
			fd := finding(rep, "node-missing")
			if fd == nil || !strings.Contains(fd.Fix, "--device /dev/nvidia-uvm") {
				t.Errorf("node-missing fix %v, want podman's --device /dev/nvidia-uvm; findings %v", fd, findingIDs(rep))
			}
		})
	}
}
