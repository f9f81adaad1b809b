package snapshot

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

func TestContainerFromCgroupPath(t *testing.T) {
	const ctr = "8a7e2c1d0f9b8a7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
	const pod = "5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c"
	tests := []struct {
		path             string
		runtime, id, uid string
	}{
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(pod, "-", "_") + ".slice/cri-containerd-" + ctr + ".scope", "kubernetes", ctr, pod},
		{"/kubepods.slice/kubepods-pod" + strings.ReplaceAll(pod, "-", "_") + ".slice/crio-" + ctr + ".scope", "kubernetes", ctr, pod},
		{"/kubepods/besteffort/pod" + pod + "/" + ctr, "kubernetes", ctr, pod},
		{"/kubepods/pod" + pod + "/" + ctr, "kubernetes", ctr, pod},
		{"/docker/" + ctr, "docker", ctr, ""},
		{"/system.slice/docker-" + ctr + ".scope", "docker", ctr, ""},
		{"/machine.slice/libpod-" + ctr + ".scope/container", "podman", ctr, ""},
		{"/lxc.payload.gpu-box", "lxc", "gpu-box", ""},
		{"/user.slice/user-0.slice/session-1.scope", "systemd", "", ""},
		{"/", "", "", ""},
		{"", "", "", ""},
		{"/kubepods/besteffort/podnot-a-uid/abc", "kubernetes", "", ""},
	}
	for _, tt := range tests {
		c := ContainerFromCgroupPath(tt.path)
		if c.Runtime != tt.runtime || c.ID != tt.id || c.PodUID != tt.uid {
			t.Errorf("%q: got runtime %q id %q pod %q, want %q %q %q", tt.path, c.Runtime, c.ID, c.PodUID, tt.runtime, tt.id, tt.uid)
		}
	}
}

func TestCgroupPathOf(t *testing.T) {
	tests := []struct{ text, want string }{
		{"0::/kubepods/x\n", "/kubepods/x"},
		{"12:devices:/docker/a\n1:name=systemd:/docker/a\n0::/docker/b\n", "/docker/b"},
		{"12:devices:/docker/a\n1:name=systemd:/docker/c\n", "/docker/a"},
		{"", ""},
		{"garbage\n", ""},
	}
	for _, tt := range tests {
		if got := CgroupPathOf(tt.text); got != tt.want {
			t.Errorf("CgroupPathOf(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}
}

func TestTargetIdentitySelf(t *testing.T) {
	id, err := TargetIdentity(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(id.Argv, os.Args) {
		t.Errorf("argv %q, want %q", id.Argv, os.Args)
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if want := CgroupPathOf(string(data)); id.Cgroup != want || want == "" || id.cgroups != string(data) || id.PID != os.Getpid() {
		t.Errorf("cgroup %q (text %q, pid %d), want %q", id.Cgroup, id.cgroups, id.PID, want)
	}
	if !id.SameRoot || !id.RootKnown {
		t.Errorf("same root %v known %v for this process itself", id.SameRoot, id.RootKnown)
	}
	if id.UID != int64(os.Geteuid()) {
		t.Errorf("uid %d, want %d", id.UID, os.Geteuid())
	}
	if got := effectiveUID("Name:\tx\nUid:\t1000\t65534\t1000\t1000\n"); got != 65534 {
		t.Errorf("effective uid %d, want the second field 65534", got)
	}
	if got := effectiveUID("Uid: garbage\n"); got != -1 {
		t.Errorf("effective uid of garbage %d, want -1", got)
	}
	if _, err := TargetIdentity(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
	long := make([]byte, 3*maxArgvBytes)
	for i := range long {
		long[i] = 'a'
		if i%100 == 99 {
			long[i] = 0
		}
	}
	if got := splitCmdline(long); len(strings.Join(got, "\x00")) > maxArgvBytes {
		t.Errorf("argv kept %d bytes, want at most %d", len(strings.Join(got, "\x00")), maxArgvBytes)
	}
}

// The identity carries what a report keeps of the process's environment,
// as its exec set it: the variables that explain a CUDA failure, and
// nothing else (no secrets).
func TestTargetIdentityEnv(t *testing.T) {
	privtest.Deadline(t)
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"CUDA_VISIBLE_DEVICES=3", "HOME=/nowhere", "SOME_TOKEN=hunter2"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var id Identity
	var err error
	// Until the exec is done the environ is the test's.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if id, err = TargetIdentity(cmd.Process.Pid); err == nil && id.Env["CUDA_VISIBLE_DEVICES"] != "" {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if id.Env["CUDA_VISIBLE_DEVICES"] != "3" {
		t.Errorf("env %v, want CUDA_VISIBLE_DEVICES=3", id.Env)
	}
	for _, k := range []string{"HOME", "SOME_TOKEN"} {
		if _, ok := id.Env[k]; ok {
			t.Errorf("env %v keeps %s, not a diagnostic variable", id.Env, k)
		}
	}
}
