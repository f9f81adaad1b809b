package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupFile joins a cgroup path from /proc/PID/cgroup onto a hierarchy
// mounted at mountPoint whose mountinfo root is root; the mount must cover
// the path (coveringMount).
func cgroupFile(mountPoint, root, p string) string {
	if rel, ok := underRoot(root, p); ok {
		p = rel
	}
	return filepath.Join(mountPoint, p)
}

// underRoot returns p relative to a cgroup mount's root, and whether the
// mount covers p: its root is "/" or a parent of p. A path or root with ".."
// in it names a cgroup outside the namespace it is read in (a pod's own
// cgroup namespace writes other pods' paths as "/../../kubepods/..."), so
// it is under no mount and must not be joined: the join would climb out of
// the mount point.
func underRoot(root, p string) (string, bool) {
	if !cleanCgroupPath(p) || !cleanCgroupPath(root) {
		return "", false
	}
	if root == "/" {
		return p, true
	}
	rel, ok := strings.CutPrefix(p, root)
	if !ok || (rel != "" && rel[0] != '/') {
		return "", false
	}
	if rel == "" {
		rel = "/"
	}
	return rel, true
}

func cleanCgroupPath(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && !slices.Contains(strings.Split(p, "/"), "..")
}

// coveringMount picks, of the mounts that match, one whose root covers the
// cgroup path p: the one with the shortest root, so that the ancestors where
// a device program may be attached are under it too. Inside a container
// the first cgroup mount is usually rooted at the container's own cgroup
// and covers only it; a read-only bind of the host's /sys/fs/cgroup
// elsewhere (deploy/kubernetes) covers everything. found says whether any
// mount matched at all.
func coveringMount(mounts []selfMount, match func(selfMount) bool, p string) (mnt *selfMount, found bool) {
	for i := range mounts {
		if !match(mounts[i]) {
			continue
		}
		found = true
		if _, ok := underRoot(mounts[i].Root, p); !ok {
			continue
		}
		if mnt == nil || len(mounts[i].Root) < len(mnt.Root) {
			mnt = &mounts[i]
		}
	}
	return mnt, found
}

// uncoveredError says why a cgroup path could not be read under any mount.
func uncoveredError(kind, p string, mounts []selfMount, match func(selfMount) bool) string {
	var roots []string
	for _, m := range mounts {
		if match(m) {
			roots = append(roots, m.MountPoint+" (root "+m.Root+")")
		}
	}
	if !cleanCgroupPath(p) {
		return fmt.Sprintf("cgroup %s is outside cudatrace's cgroup namespace", p)
	}
	return fmt.Sprintf("no %s mount covers cgroup %s: %s", kind, p, strings.Join(roots, ", "))
}

// selfMount is a mount from cudatrace's own mountinfo with its superblock
// options, which name the controllers of a cgroup v1 hierarchy.
type selfMount struct {
	Mount
	Super []string
}

func parseSelfMounts(text string) []selfMount {
	var out []selfMount
	for _, in := range parseMountinfo(text) {
		out = append(out, selfMount{Mount: mountFromInfo(in), Super: strings.Split(in.VFSOptions, ",")})
	}
	return out
}

// collectCgroupV1 reads the devices controller's allow list for the target.
func (c *collector) collectCgroupV1(lines []cgroupLine, mounts []selfMount) {
	var path string
	found := false
	for _, l := range lines {
		for _, ctl := range l.Controllers {
			if ctl == "devices" {
				path, found = l.Path, true
			}
		}
	}
	if !found {
		return
	}
	v1 := &CgroupV1{Path: path, ReadAfterExit: c.afterExit}
	c.snap.CgroupV1 = v1
	isDevices := func(m selfMount) bool { return m.FSType == "cgroup" && contains(m.Super, "devices") }
	mnt, anyMounted := coveringMount(mounts, isDevices, path)
	if !anyMounted {
		v1.ReadError = "devices hierarchy is not mounted in cudatrace's mount namespace"
		return
	}
	if mnt == nil {
		v1.ReadError = uncoveredError("devices hierarchy", path, mounts, isDevices)
		return
	}
	data, err := c.fs.readFile(filepath.Join(cgroupFile(mnt.MountPoint, mnt.Root, path), "devices.list"), maxFileSize)
	if err != nil {
		v1.ReadError = c.cgroupErr(err)
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" {
			v1.DevicesList = append(v1.DevicesList, l)
		}
	}
}

// collectCgroupV2 finds (or mounts) the unified hierarchy and queries the
// kernel for the effective device programs of the target's cgroup.
func (c *collector) collectCgroupV2(lines []cgroupLine, mounts []selfMount) {
	var path string
	found := false
	for _, l := range lines {
		if l.Hierarchy == "0" && len(l.Controllers) == 0 {
			path, found = l.Path, true
		}
	}
	if !found {
		return
	}
	v2 := &CgroupV2{Path: path, ReadAfterExit: c.afterExit}
	c.snap.CgroupV2 = v2
	isUnified := func(m selfMount) bool { return m.FSType == "cgroup2" }
	mnt, anyMounted := coveringMount(mounts, isUnified, path)
	mountPoint, root := "", "/"
	if mnt != nil {
		mountPoint, root = mnt.MountPoint, mnt.Root
	} else {
		// None mounted, or none covers the path (a container's own
		// /sys/fs/cgroup is rooted at its cgroup): a mount of our own is
		// rooted at our cgroup namespace's root, the host's once
		// internal/hostns has joined init's.
		why := "cgroup2 is not mounted"
		if anyMounted || !cleanCgroupPath(path) {
			why = uncoveredError("cgroup2", path, mounts, isUnified)
		}
		if !cleanCgroupPath(path) {
			v2.QueryError = why
			c.unavailable("cgroup v2 device programs", errors.New(why))
			return
		}
		dir, unmount, err := c.mountCgroup2()
		if err != nil {
			v2.QueryError = why + " and mounting it failed: " + shortErr(err)
			c.unavailable("cgroup v2 device programs", errors.New(v2.QueryError))
			return
		}
		defer func() {
			if err := unmount(); err != nil {
				c.unavailable("cgroup2 temporary mount cleanup", err)
			}
		}()
		mountPoint = dir
	}
	v2.MountPoint = mountPoint
	query := QueryDevicePrograms
	if c.opts.QueryCgroupPrograms != nil {
		query = c.opts.QueryCgroupPrograms
	}
	progs, err := query(cgroupFile(mountPoint, root, path), mountPoint)
	if root != "/" {
		// The query names attach points relative to the mount point;
		// the report names cgroups as /proc/PID/cgroup does.
		for i := range progs {
			if progs[i].AttachedTo != "" {
				progs[i].AttachedTo = filepath.Join(root, progs[i].AttachedTo)
			}
		}
	}
	v2.Programs = progs
	if err != nil {
		v2.QueryError = c.cgroupErr(err)
		c.unavailable("cgroup v2 device programs", errors.New(v2.QueryError))
	}
}

// cgroupErr says why a cgroup's policy could not be read; the cgroup of a
// target that has exited may have been removed since.
func (c *collector) cgroupErr(err error) string {
	if c.afterExit && errors.Is(err, fs.ErrNotExist) {
		return "the cgroup was removed after the process exited"
	}
	return shortErr(err)
}

// mountCgroup2 mounts the unified hierarchy on a fresh directory, for hosts
// where nothing mounted it. The returned func unmounts it and removes the
// directory; it must run before Collect returns.
func mountCgroup2() (dir string, unmount func() error, err error) {
	dir, err = os.MkdirTemp("", "cudatrace-cgroup2-")
	if err != nil {
		return "", nil, err
	}
	if err := unix.Mount("none", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		_ = os.Remove(dir) // best effort: an rmdir of a non-empty cgroup fails, and it is reported elsewhere
		if errors.Is(err, unix.EPERM) {
			return "", nil, fmt.Errorf("%w (needs root or CAP_SYS_ADMIN)", err)
		}
		return "", nil, err
	}
	return dir, func() error {
		err := unix.Unmount(dir, 0)
		if errors.Is(err, unix.EBUSY) {
			// Something still holds it (an open fd); detach so no mount
			// stays visible, and it goes when the last user does.
			err = unix.Unmount(dir, unix.MNT_DETACH)
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		return os.Remove(dir)
	}, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
