package snapshot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// The unified line is replaced, the other hierarchies' kept, and a
// snapshot of the gone process reads the cgroup at the call.
func TestIdentityInCgroupV2(t *testing.T) {
	id := Identity{PID: 7, UID: 1000, Cgroup: "/old", cgroups: "12:devices:/v1/job\n0::/old\n"}
	got := id.InCgroupV2("/new/job")
	if got.Cgroup != "/new/job" || !got.CgroupAtCall || got.cgroups != "12:devices:/v1/job\n0::/new/job\n" || got.UID != 1000 {
		t.Errorf("identity %+v (cgroups %q)", got, got.cgroups)
	}
	if fresh := (Identity{PID: 7, UID: -1}).InCgroupV2("/job"); fresh.cgroups != "0::/job\n" || CgroupPathOf(fresh.cgroups) != "/job" {
		t.Errorf("from nothing: cgroups %q", fresh.cgroups)
	}
}

// A cgroup id (bpf_get_current_cgroup_id at a call) resolves to the
// cgroup's path, by handle or, without CAP_DAC_READ_SEARCH, by inode; a
// removed cgroup resolves to nothing.
func TestCgroupV2PathByID(t *testing.T) {
	privtest.RequireRoot(t)
	mnt := ""
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, m := range parseSelfMounts(string(mi)) {
			if m.FSType == "cgroup2" && m.Root == "/" {
				mnt = m.MountPoint
			}
		}
	}
	if mnt == "" {
		privtest.Skip(t, "no cgroup2 mount rooted at / here")
	}
	name := fmt.Sprintf("cudatrace-cgid-test-%d", os.Getpid())
	dir := filepath.Join(mnt, name, "child")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			os.Remove(dir)
			os.Remove(filepath.Dir(dir))
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := "/" + name + "/child"
	if p, err := CgroupV2PathByID(st.Ino); err != nil || p != want {
		t.Errorf("by id: %q, %v; want %q", p, err, want)
	}
	if p, err := byInode(mnt, st.Ino); err != nil || p != dir {
		t.Errorf("by inode: %q, %v; want %q", p, err, dir)
	}
	if p, err := CgroupV2PathByID(rootIno(t, mnt)); err != nil || p != "/" {
		t.Errorf("the root: %q, %v", p, err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	removed = os.Remove(filepath.Dir(dir)) == nil
	if p, err := CgroupV2PathByID(st.Ino); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("removed cgroup: %q, %v", p, err)
	}
}

func rootIno(t *testing.T, mnt string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
