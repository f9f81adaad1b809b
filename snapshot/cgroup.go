package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupFile joins a cgroup path from /proc/PID/cgroup onto a hierarchy
// mounted at mountPoint whose mountinfo root is root. Inside a container
// without its own cgroup namespace the mount's root is the container's
// cgroup, and the process path starts with it.
func cgroupFile(mountPoint, root, path string) string {
	if root != "/" && root != "" {
		if rel, ok := strings.CutPrefix(path, root); ok && (rel == "" || rel[0] == '/') {
			path = rel
		}
	}
	return filepath.Join(mountPoint, path)
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
	var mnt *selfMount
	for i := range mounts {
		if mounts[i].FSType == "cgroup" && contains(mounts[i].Super, "devices") {
			mnt = &mounts[i]
		}
	}
	if mnt == nil {
		v1.ReadError = "devices hierarchy is not mounted in cudatrace's mount namespace"
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
	var mnt *selfMount
	for i := range mounts {
		if mounts[i].FSType == "cgroup2" {
			mnt = &mounts[i]
			break // the first is the one systemd (or the host) set up
		}
	}
	mountPoint, root := "", "/"
	if mnt != nil {
		mountPoint, root = mnt.MountPoint, mnt.Root
	} else {
		dir, unmount, err := c.mountCgroup2()
		if err != nil {
			v2.QueryError = "cgroup2 is not mounted and mounting it failed: " + shortErr(err)
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
