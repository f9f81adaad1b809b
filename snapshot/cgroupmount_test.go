package snapshot

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// Mount tables as cudatrace sees them in a Kubernetes pod (after joining
// init's cgroup namespace): the container's own /sys/fs/cgroup is rooted at
// its cgroup; the DaemonSet's hostPath bind of the host's /sys/fs/cgroup at
// /host/sys/fs/cgroup is rooted at "/".
const (
	podCgroup   = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-aaa.scope"
	podOwnMount = "1200 1190 0:30 " + podCgroup + " /sys/fs/cgroup ro,nosuid,nodev,noexec - cgroup2 cgroup rw\n"
	hostBind    = "1201 1190 0:30 / /host/sys/fs/cgroup ro,nosuid,nodev,noexec - cgroup2 cgroup2 rw\n"
	v1OwnMount  = "1300 1190 0:40 " + podCgroup + " /sys/fs/cgroup/devices ro - cgroup cgroup rw,devices\n"
	v1HostBind  = "1301 1190 0:40 / /host/sys/fs/cgroup/devices ro - cgroup cgroup rw,devices\n"
	otherPod    = "/kubepods.slice/kubepods-pod2.slice/cri-containerd-bbb.scope"
)

func TestCoveringMount(t *testing.T) {
	isV2 := func(m selfMount) bool { return m.FSType == "cgroup2" }
	for _, tc := range []struct {
		name, mountinfo, path string
		want                  string // mount point, "" for none
		found                 bool
	}{
		{"host: the one mount", "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", otherPod, "/sys/fs/cgroup", true},
		{"pod: its own cgroup", podOwnMount, podCgroup + "/sub", "/sys/fs/cgroup", true},
		{"pod: another pod, own mount only", podOwnMount, otherPod, "", true},
		{"pod: another pod, host bind second", podOwnMount + hostBind, otherPod, "/host/sys/fs/cgroup", true},
		{"pod: its own cgroup prefers the shortest root", podOwnMount + hostBind, podCgroup, "/host/sys/fs/cgroup", true},
		{"a root that is a name prefix only", "1 0 0:1 /kube /x rw - cgroup2 c rw\n", "/kubepods.slice", "", true},
		{"a parent root covers", "1 0 0:1 /kubepods.slice /x rw - cgroup2 c rw\n", otherPod, "/x", true},
		{"a path outside the namespace", podOwnMount + hostBind, "/../../kubepods.slice/x", "", true},
		{"a root outside the namespace", "1 0 0:1 /../.. /x rw - cgroup2 c rw\n", otherPod, "", true},
		{"v1 mounts only", v1OwnMount, otherPod, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt, found := coveringMount(parseSelfMounts(tc.mountinfo), isV2, tc.path)
			got := ""
			if mnt != nil {
				got = mnt.MountPoint
			}
			if got != tc.want || found != tc.found {
				t.Errorf("coveringMount = %q, %v; want %q, %v", got, found, tc.want, tc.found)
			}
		})
	}
	if got := cgroupFile("/sys/fs/cgroup", podCgroup, podCgroup+"/sub"); got != "/sys/fs/cgroup/sub" {
		t.Errorf("cgroupFile under a sub-cgroup root = %q", got)
	}
	if got := cgroupFile("/sys/fs/cgroup", podCgroup, podCgroup); got != "/sys/fs/cgroup" {
		t.Errorf("cgroupFile of the root itself = %q", got)
	}
}

// cgroupPodCollector is a collector over a fake /proc whose process 7 is in
// cgroup, and whose own mount table is mountinfo.
func cgroupPodCollector(t *testing.T, cgroup, mountinfo string) (*collector, *[]string, *int) {
	t.Helper()
	dir := t.TempDir()
	fakeTree(t, dir, map[string]string{
		"proc/devices":     "Character devices:\n  1 mem\n",
		"proc/7/status":    "Name:\tpython3\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n",
		"proc/7/cgroup":    cgroup,
		"proc/7/mountinfo": "1 0 0:1 / / rw - ext4 /dev/vda rw\n",
		"proc/7/root/":     "",
		"devices.list":     "c 195:* rwm\n",
	})
	var queried []string
	mounts := 0
	c := newCollector(Options{PID: 7, QueryCgroupPrograms: func(dir, root string) ([]DeviceProgram, error) {
		queried = append(queried, dir, root)
		return []DeviceProgram{{ID: 9, AttachedTo: "/kubepods-pod2.slice"}}, nil
	}})
	c.proc, c.sys = filepath.Join(dir, "proc"), filepath.Join(dir, "sys")
	c.selfMountinfo = func() (string, error) { return mountinfo, nil }
	c.mountCgroup2 = func() (string, func() error, error) {
		mounts++
		return "/tmp/cudatrace-cgroup2-1", func() error { mounts--; return nil }, nil
	}
	return c, &queried, &mounts
}

// In a pod, another pod's cgroup is read under the mount that covers it,
// or under a mount of cudatrace's own (unmounted before Collect returns)
// when none does; a path outside cudatrace's cgroup namespace is refused.
func TestCollectCgroupV2InPod(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, mountinfo string
		wantQuery               []string
		wantAttached            string
		wantErr                 string
	}{
		{"host bind covers", "0::" + otherPod + "\n", podOwnMount + hostBind,
			[]string{"/host/sys/fs/cgroup" + otherPod, "/host/sys/fs/cgroup"}, "/kubepods-pod2.slice", ""},
		{"own mount only: a private one", "0::" + otherPod + "\n", podOwnMount,
			[]string{"/tmp/cudatrace-cgroup2-1" + otherPod, "/tmp/cudatrace-cgroup2-1"}, "/kubepods-pod2.slice", ""},
		{"own cgroup: own mount, attach points named from the root", "0::" + podCgroup + "/x\n", podOwnMount,
			[]string{"/sys/fs/cgroup/x", "/sys/fs/cgroup"}, podCgroup + "/kubepods-pod2.slice", ""},
		{"outside the namespace", "0::/../../kubepods.slice/x\n", podOwnMount, nil, "",
			"cgroup /../../kubepods.slice/x is outside cudatrace's cgroup namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, queried, mounts := cgroupPodCollector(t, tc.cgroup, tc.mountinfo)
			s := c.run()
			if !reflect.DeepEqual(*queried, tc.wantQuery) {
				t.Errorf("queried %q, want %q", *queried, tc.wantQuery)
			}
			if *mounts != 0 {
				t.Errorf("%d private cgroup2 mounts left", *mounts)
			}
			v2 := s.CgroupV2
			if v2 == nil {
				t.Fatal("no cgroup v2 facts")
			}
			if v2.QueryError != tc.wantErr {
				t.Errorf("query error %q, want %q", v2.QueryError, tc.wantErr)
			}
			if tc.wantAttached != "" && (len(v2.Programs) != 1 || v2.Programs[0].AttachedTo != tc.wantAttached) {
				t.Errorf("programs %+v, want one attached to %s", v2.Programs, tc.wantAttached)
			}
		})
	}
}

// A pod's own mount covers no other pod and doctor mounts nothing: the
// error names the path and the mounts it looked at.
func TestCollectCgroupV2Uncovered(t *testing.T) {
	c, queried, _ := cgroupPodCollector(t, "0::"+otherPod+"\n", podOwnMount)
	c.mountCgroup2 = func() (string, func() error, error) { return "", nil, errors.New("doctor mounts nothing") }
	s := c.run()
	want := "no cgroup2 mount covers cgroup " + otherPod + ": /sys/fs/cgroup (root " + podCgroup + ") and mounting it failed: doctor mounts nothing"
	if s.CgroupV2 == nil || s.CgroupV2.QueryError != want || len(*queried) != 0 {
		t.Errorf("cgroup v2 = %+v (queried %q)\nwant error %q", s.CgroupV2, *queried, want)
	}
}

// cgroup v1: the devices hierarchy mount that covers the path is read; the
// pod's own one does not cover another pod.
func TestCollectCgroupV1InPod(t *testing.T) {
	c, _, _ := cgroupPodCollector(t, "4:devices:"+otherPod+"\n", v1OwnMount)
	if s := c.run(); s.CgroupV1 == nil || !strings.HasPrefix(s.CgroupV1.ReadError, "no devices hierarchy mount covers cgroup "+otherPod) {
		t.Errorf("cgroup v1 = %+v", s.CgroupV1)
	}
	dir := t.TempDir()
	fakeTree(t, dir, map[string]string{"host/devices" + otherPod + "/devices.list": "c 195:* rwm\nc 238:* rwm\n"})
	c, _, _ = cgroupPodCollector(t, "4:devices:"+otherPod+"\n",
		v1OwnMount+strings.Replace(v1HostBind, "/host/sys/fs/cgroup/devices", dir+"/host/devices", 1))
	s := c.run()
	if s.CgroupV1 == nil || s.CgroupV1.ReadError != "" || !reflect.DeepEqual(s.CgroupV1.DevicesList, []string{"c 195:* rwm", "c 238:* rwm"}) {
		t.Errorf("cgroup v1 = %+v", s.CgroupV1)
	}
}
