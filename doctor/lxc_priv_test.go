package doctor_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/doctor"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
	"github.com/cudatrace/cudatrace/snapshot"
)

// lxcConfig is an application container's config as a user writes it for
// a GPU: 195 allowed, the uvm major forgotten. Both keys, so that the
// host's cgroup layout picks its own (LXC ignores the other).
const lxcConfig = `lxc.uts.name = cudatrace-doctor
lxc.console.path = none
lxc.tty.max = 0
lxc.pty.max = 0
lxc.cgroup.devices.deny = a
lxc.cgroup.devices.allow = c 1:* rwm
lxc.cgroup.devices.allow = c 195:* rwm
lxc.cgroup2.devices.deny = a
lxc.cgroup2.devices.allow = c 1:* rwm
lxc.cgroup2.devices.allow = c 195:* rwm
`

// A real LXC container (Debian's lxc, lxc-execute): doctor --pid reads the
// device policy LXC itself installed (devices.list on a v1 host, its BPF
// program on a v2 host) and the config file, and names the missing major
// and the line to add.
func TestRealLXCContainer(t *testing.T) {
	privtest.RequireRoot(t)
	for _, tool := range []string{"lxc-execute", "lxc-info", "lxc-stop"} {
		if _, err := exec.LookPath(tool); err != nil {
			privtest.Skip(t, "needs Debian's lxc package: "+err.Error())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lxcPath := t.TempDir()
	name := "cudatrace-doctor-" + strconv.Itoa(os.Getpid())
	hostRoot := t.TempDir()
	cfg := filepath.Join(hostRoot, "var/lib/lxc", name, "config")
	os.MkdirAll(filepath.Dir(cfg), 0o755)
	if err := os.WriteFile(cfg, []byte(lxcConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	procDevices := filepath.Join(t.TempDir(), "devices")
	os.WriteFile(procDevices, []byte(scenario.H200ProcDevices), 0o644)

	cmd := exec.CommandContext(ctx, "lxc-execute", "-P", lxcPath, "-n", name, "-f", cfg, "--", "sleep", "60")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("lxc-stop", "-P", lxcPath, "-n", name, "-k").Run()
		cmd.Process.Kill()
		cmd.Wait()
		// A killed container leaves its (now empty) monitor and payload
		// cgroups, and LXC's pivot cgroup, in every hierarchy.
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/lxc.*." + name)
		more, _ := filepath.Glob("/sys/fs/cgroup/lxc.*." + name)
		pivots, _ := filepath.Glob("/sys/fs/cgroup/*/lxc.pivot")
		for _, d := range append(append(dirs, more...), pivots...) {
			os.Remove(d) // rmdir: fails, harmlessly, on a cgroup still in use
		}
	})
	pid := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && pid == 0; time.Sleep(100 * time.Millisecond) {
		b, _ := exec.Command("lxc-info", "-P", lxcPath, "-n", name, "-pH").Output()
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatalf("the container did not start:\n%s", out.String())
	}

	sv := snapshot.SurveyHost(snapshot.SurveyOptions{PID: pid, ProcDevicesPath: procDevices, HostRoot: hostRoot,
		NvidiaSMI: "-"})
	res := doctor.Run(sv)
	if sv.Base.Container.Runtime != "lxc" || sv.Base.Container.ID != name {
		t.Errorf("container detected as %+v", sv.Base.Container)
	}
	find := func(id, subject string) *doctor.Check {
		for i := range res.Checks {
			if res.Checks[i].ID == id && res.Checks[i].Subject == subject {
				return &res.Checks[i]
			}
		}
		t.Fatalf("no %s %s in %+v", id, subject, res.Checks)
		return nil
	}
	key := "lxc.cgroup2.devices.allow"
	if sv.CgroupDevicesV1 {
		key = "lxc.cgroup.devices.allow"
	}
	uvm := find("device-policy", "/dev/nvidia-uvm")
	if uvm.Status != doctor.Fail || !strings.Contains(uvm.Fix, "`"+key+" = c 238:* rwm`") {
		t.Errorf("uvm: %s %q fix %q", uvm.Status, uvm.Summary, uvm.Fix)
	}
	if ctl := find("device-policy", "/dev/nvidiactl"); ctl.Status != doctor.Pass {
		t.Errorf("nvidiactl: %s %q", ctl.Status, ctl.Summary)
	}
	c := find("container", "lxc container "+name)
	if c.Status != doctor.Fail || !strings.Contains(c.Fix, "Add `"+key+" = c 238:* rwm` to /var/lib/lxc/"+name+"/config") {
		t.Errorf("config: %s %q fix %q", c.Status, c.Summary, c.Fix)
	}
	t.Logf("policy read from the real container %d: %s", pid, uvm.Summary)
}
