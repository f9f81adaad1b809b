package snapshot

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/scenario"
)

// podHelperEnv holds, in TestCollectCgroupV2PodMount's helper, the target PID.
const podHelperEnv = "CUDATRACE_SNAPSHOT_POD_TARGET"

// podHelperResult is what the helper prints: the snapshot's cgroup v2 facts,
// the cgroup2 mounts it saw, and its cudatrace-* mounts left afterwards.
type podHelperResult struct {
	CgroupV2 *CgroupV2
	Seen     []string
	Left     []string
}

func podHelper(pidText string) int {
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad pid:", err)
		return 2
	}
	var r podHelperResult
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, m := range ParseMountinfo(string(mi)) {
		if m.FSType == "cgroup2" {
			r.Seen = append(r.Seen, m.MountPoint+" "+m.Root)
		}
	}
	r.CgroupV2 = Collect(Options{PID: pid}).CgroupV2
	mi, _ = os.ReadFile("/proc/self/mountinfo")
	for _, m := range ParseMountinfo(string(mi)) {
		if strings.HasPrefix(filepath.Base(m.MountPoint), "cudatrace-") {
			r.Left = append(r.Left, m.MountPoint)
		}
	}
	b, _ := json.Marshal(r)
	fmt.Printf("RESULT %s\n", b)
	return 0
}

// TestCollectCgroupV2PodMount: in a mount namespace whose only cgroup2
// mount is a bind of a sub-cgroup (as a pod's /sys/fs/cgroup is), the device
// program of a target in another cgroup is still read, through a private
// cgroup2 mount that is gone when Collect returns.
func TestCollectCgroupV2PodMount(t *testing.T) {
	privtest.RequireRoot(t)
	v2Root := scenario.CgroupV2Root()
	if v2Root == "" {
		privtest.Skip(t, "no cgroup2 mount")
	}
	targetDir, progIDs := scenario.TargetCgroupV2(t, []scenario.DeviceRule{{Type: 'c', Major: 238, Minor: scenario.Wildcard, Access: "rwm"}})
	podDir := filepath.Join(v2Root, fmt.Sprintf("cudatrace-snapshot-podown-%d", os.Getpid()))
	makeCgroup(t, podDir)

	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Process.Kill(); target.Wait() })
	if err := os.WriteFile(filepath.Join(targetDir, "cgroup.procs"), []byte(strconv.Itoa(target.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	stage := t.TempDir()
	script := strings.Join([]string{
		"set -e",
		`mount --bind "$POD" "$STAGE"`,
		`umount -l "$V2"`,
		`mount --move "$STAGE" "$V2"`,
		`exec "$BIN"`,
	}, "\n")
	cmd := exec.CommandContext(privtest.Deadline(t), "unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "POD="+podDir, "STAGE="+stage, "V2="+v2Root, "BIN="+os.Args[0],
		podHelperEnv+"="+strconv.Itoa(target.Process.Pid))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	_, js, ok := strings.Cut(string(out), "RESULT ")
	if !ok {
		t.Fatalf("no result in helper output:\n%s", out)
	}
	js, _, _ = strings.Cut(js, "\n")
	var r podHelperResult
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	podRoot := "/" + filepath.Base(podDir)
	if want := v2Root + " " + podRoot; len(r.Seen) != 1 || r.Seen[0] != want {
		t.Fatalf("helper's cgroup2 mounts %q, want only %q (the setup is not a pod's)", r.Seen, want)
	}
	v2 := r.CgroupV2
	if v2 == nil || v2.QueryError != "" {
		t.Fatalf("cgroup v2 = %+v", v2)
	}
	if !strings.Contains(v2.MountPoint, "cudatrace-cgroup2-") {
		t.Errorf("read under %s, not a private mount", v2.MountPoint)
	}
	var got []uint32
	for _, p := range v2.Programs {
		if p.AttachedTo == "/"+filepath.Base(targetDir) && len(p.Instructions) > 0 {
			got = append(got, p.ID)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(progIDs) {
		t.Errorf("programs read %+v, want %v attached to %s with instructions", v2.Programs, progIDs, targetDir)
	}
	if len(r.Left) != 0 {
		t.Errorf("mounts left behind in the helper's namespace: %q", r.Left)
	}
}
