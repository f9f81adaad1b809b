package snapshot

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

const (
	goneCtr = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	goneCg  = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod5e3c1a2b_7d4f_4e1a_9b2c_0d1e2f3a4b5c.slice/cri-containerd-" + goneCtr + ".scope"
)

// goneHost is a fake host on which the target (PID 4242) is gone while
// cudatrace runs in "/": its cgroup is still there (a crash-looping
// container's), with a device program attached and a v1 devices list.
func goneHost(t *testing.T, id *Identity, query func(dir, root string) ([]DeviceProgram, error)) (*collector, string) {
	dir := t.TempDir()
	cg := filepath.Join(dir, "cgroup")
	fakeTree(t, dir, map[string]string{
		"proc/devices":                              "Character devices:\n195 nvidia-frontend\n",
		"proc/self/status":                          "Name:\tcudatrace\nUid:\t0\t0\t0\t0\n",
		"proc/self/cgroup":                          "12:devices:/\n0::/\n",
		"proc/self/mountinfo":                       "1 0 0:1 / / rw - ext4 /dev/vda rw\n",
		"proc/self/root/etc/passwd":                 "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n",
		"cgroup/devices" + goneCg + "/devices.list": "c 195:* rwm\n",
	})
	c := newCollector(Options{PID: 4242, Identity: id, QueryCgroupPrograms: query})
	c.proc, c.sys, c.hostRoot = filepath.Join(dir, "proc"), filepath.Join(dir, "sys"), dir
	c.selfMountinfo = func() (string, error) {
		return "36 31 0:33 / " + cg + "/devices rw - cgroup cgroup rw,devices\n" +
			"41 31 0:38 / " + cg + "/unified rw - cgroup2 cgroup2 rw\n", nil
	}
	c.mountCgroup2 = func() (string, func() error, error) {
		t.Error("cgroup2 is mounted; the collector must not mount another")
		return "", nil, fs.ErrInvalid
	}
	return c, cg
}

func goneIdentity(sameRoot bool) *Identity {
	return &Identity{PID: 4242, Cgroup: goneCg, UID: 1000, SameRoot: sameRoot, RootKnown: true,
		cgroups: "12:devices:" + goneCg + "\n0::" + goneCg + "\n"}
}

// A target gone at snapshot time whose cgroups were read while it ran: its
// device policy is read from those cgroups (not cudatrace's own), marked
// as read after its exit; its UID and user name come from the identity.
func TestCollectGoneWithIdentity(t *testing.T) {
	privtest.Deadline(t)
	var queried []string
	id := goneIdentity(true)
	id.Limits = parseLimits("Limit                     Soft Limit           Hard Limit           Units     \n" +
		"Max open files            1024                 4096                 files     \n" +
		"Max address space         1073741824           unlimited            bytes     \n")
	c, cg := goneHost(t, id, func(dir, root string) ([]DeviceProgram, error) {
		queried = append(queried, dir)
		return []DeviceProgram{{ID: 52, AttachedTo: goneCg}}, nil
	})
	s := c.run()
	if want := []string{cg + "/unified" + goneCg}; !slices.Equal(queried, want) {
		t.Errorf("queried %q, want the target's cgroup %q", queried, want)
	}
	v2 := s.CgroupV2
	if v2 == nil || v2.Path != goneCg || !v2.ReadAfterExit || len(v2.Programs) != 1 || v2.Programs[0].ID != 52 || v2.QueryError != "" {
		t.Errorf("cgroup v2 %+v, want program 52 of %s read after exit", v2, goneCg)
	}
	v1 := s.CgroupV1
	if v1 == nil || v1.Path != goneCg || !v1.ReadAfterExit || !slices.Equal(v1.DevicesList, []string{"c 195:* rwm"}) {
		t.Errorf("cgroup v1 %+v, want its devices.list read after exit", v1)
	}
	if p := s.Process; p.PID != 4242 || p.UID != 1000 || p.User != "alice" || p.Comm != "" {
		t.Errorf("process %+v, want PID 4242, uid 1000 alice, no comm (its status was never read)", p)
	}
	if p := s.Process; p.AS == nil || *p.AS != [2]uint64{1 << 30, ^uint64(0)} || p.NoFile == nil || *p.NoFile != [2]uint64{1024, 4096} || p.MemLock != nil || !p.LimitsAtExec {
		t.Errorf("process limits AS %v NOFILE %v MEMLOCK %v at exec %v, want the identity's", p.AS, p.NoFile, p.MemLock, p.LimitsAtExec)
	}
	if s.Container.Runtime != "kubernetes" || s.Container.ID != goneCtr || s.Container.PodUID != "5e3c1a2b-7d4f-4e1a-9b2c-0d1e2f3a4b5c" {
		t.Errorf("container %+v, want the pod from the cgroup path", s.Container)
	}
	if !s.TargetLost || len(s.Unavailable) == 0 || !strings.Contains(s.Unavailable[0], "device policy was read after its exit") {
		t.Errorf("target lost %v, unavailable %q", s.TargetLost, s.Unavailable)
	}
}

// Its cgroup removed since, its root not cudatrace's, or the identity of
// another process: each is said, nothing is invented.
func TestCollectGoneWithIdentityLimits(t *testing.T) {
	privtest.Deadline(t)
	removed := func(dir, root string) ([]DeviceProgram, error) {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: fs.ErrNotExist}
	}
	id := goneIdentity(false)
	id.cgroups = "12:devices:/gone\n0::/gone\n"
	c, _ := goneHost(t, id, removed)
	s := c.run()
	if v2 := s.CgroupV2; v2 == nil || v2.QueryError != "the cgroup was removed after the process exited" || !v2.ReadAfterExit {
		t.Errorf("removed cgroup v2: %+v", v2)
	}
	if v1 := s.CgroupV1; v1 == nil || v1.ReadError != "the cgroup was removed after the process exited" {
		t.Errorf("removed cgroup v1: %+v", v1)
	}
	if p := s.Process; p.UID != 1000 || p.User != "" {
		t.Errorf("process %+v: a container's user names are its own, not cudatrace's", p)
	}
	if !slices.ContainsFunc(s.Unavailable, func(u string) bool { return strings.HasPrefix(u, "target user name:") }) {
		t.Errorf("unavailable %q: no word on the user name", s.Unavailable)
	}

	other := goneIdentity(true)
	other.PID = 4243
	c, _ = goneHost(t, other, func(dir, root string) ([]DeviceProgram, error) {
		t.Errorf("queried %s for a target gone without its identity", dir)
		return nil, nil
	})
	s = c.run()
	if s.CgroupV2 == nil || s.CgroupV2.Path != "" || s.CgroupV2.QueryError == "" || s.CgroupV2.ReadAfterExit || s.Process.UID != 0 || s.Process.User != "" {
		t.Errorf("another PID's identity was used: v2 %+v process %+v", s.CgroupV2, s.Process)
	}
}

func TestRootMount(t *testing.T) {
	host := "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n30 22 0:5 / /dev rw - devtmpfs udev rw\n"
	copyNS := "500 499 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n501 500 0:50 / /dev rw - tmpfs cudatrace-scenario rw\n"
	ctr := "700 650 0:90 / / rw - overlay overlay rw,lowerdir=/l\n"
	chrootish := "800 799 8:1 /srv/jail / rw - ext4 /dev/sda1 rw\n"
	a, _ := rootMount(host)
	for _, c := range []struct {
		text string
		same bool
	}{{copyNS, true}, {ctr, false}, {chrootish, false}} {
		b, ok := rootMount(c.text)
		if !ok || (a == b) != c.same {
			t.Errorf("%q: %q vs the host's %q: same %v, want %v", c.text, b, a, a == b, c.same)
		}
	}
	if _, ok := rootMount("30 22 0:5 / /dev rw - devtmpfs udev rw\n"); ok {
		t.Error("a table without / has a root mount")
	}
}

// sameRoot on real processes: a copy of this mount namespace (unshare
// --mount) has cudatrace's root; a zombie's cannot be told any more.
func TestTargetIdentityRoot(t *testing.T) {
	privtest.RequireRoot(t)
	ctx := privtest.Deadline(t)
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", "echo ready; exec sleep 30")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		privtest.Skip(t, "unshare: "+err.Error())
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("unshare did not start: %v", err)
	}
	id, err := TargetIdentity(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !id.SameRoot || !id.RootKnown {
		t.Errorf("a copy of this mount namespace: same root %v known %v, want both", id.SameRoot, id.RootKnown)
	}

	z := exec.CommandContext(ctx, "true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = z.Wait() }()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, z.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	id, err = TargetIdentity(z.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if id.RootKnown || id.SameRoot || id.cgroups == "" || id.UID != int64(os.Geteuid()) {
		t.Errorf("zombie: %+v, want its cgroups and UID, its root unknown", id)
	}
}
