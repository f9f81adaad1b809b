package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A cgroup v2 id (bpf_get_current_cgroup_id, recorded in the kernel at the
// call) names the cgroup a process was in when /proc/PID/cgroup is gone
// with the process: it is the cgroup2 directory's kernfs node id, which is
// both its inode number and its file handle (FILEID_KERNFS).

// fileIDKernfs is FILEID_KERNFS (include/linux/exportfs.h): a kernfs node
// handle, whose 8 bytes are the node id.
const fileIDKernfs = 0xfe

// maxCgroupWalk bounds the directories the fallback walk stats.
const maxCgroupWalk = 1 << 16

// CgroupV2PathByID returns the path, as /proc/PID/cgroup writes it in
// cudatrace's cgroup namespace, of the cgroup whose id is id. It reads a
// cgroup2 mount of cudatrace's, or mounts one for the lookup.
func CgroupV2PathByID(id uint64) (string, error) {
	return cgroupV2PathByID(id, func() (string, error) {
		mi, err := os.ReadFile("/proc/self/mountinfo")
		return string(mi), err
	})
}

// cgroupV2PathByID is CgroupV2PathByID with cudatrace's mount table read
// by mountinfo.
func cgroupV2PathByID(id uint64, mountinfo func() (string, error)) (string, error) {
	if id == 0 {
		return "", errors.New("no cgroup id")
	}
	mi, err := mountinfo()
	if err != nil {
		return "", err
	}
	var mnt *selfMount
	for _, m := range parseSelfMounts(mi) {
		if m.FSType == "cgroup2" && cleanCgroupPath(m.Root) && (mnt == nil || len(m.Root) < len(mnt.Root)) {
			mnt = &m
		}
	}
	if mnt != nil {
		if p, err := cgroupPathIn(mnt.MountPoint, id); err == nil {
			return path.Join(mnt.Root, p), nil
		} else if mnt.Root == "/" {
			return "", err
		}
		// A container's own mount, rooted at its cgroup: the id may be
		// outside it; a mount of our own covers the namespace.
	}
	dir, unmount, err := mountCgroup2()
	if err != nil {
		return "", fmt.Errorf("cgroup2 is not mounted here and mounting it failed: %w", err)
	}
	defer func() { _ = unmount() }() // the lookup is done; a failed unmount leaves an empty temporary mount
	return cgroupPathIn(dir, id)
}

// cgroupPathIn finds the directory of cgroup id under the cgroup2 mount at
// mountPoint and returns its path relative to it ("/" for the root).
func cgroupPathIn(mountPoint string, id uint64) (string, error) {
	dir, err := byHandle(mountPoint, id)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
		// open_by_handle_at needs CAP_DAC_READ_SEARCH: find it by inode.
		dir, err = byInode(mountPoint, id)
	}
	if err != nil {
		return "", fmt.Errorf("cgroup id %d: %w", id, err)
	}
	rel, ok := strings.CutPrefix(dir, mountPoint)
	if !ok || rel != "" && rel[0] != '/' {
		return "", fmt.Errorf("cgroup id %d: %s is not under %s", id, dir, mountPoint)
	}
	if rel == "" {
		rel = "/"
	}
	return rel, nil
}

// byHandle opens the cgroup's directory by its file handle and returns its
// path; a removed cgroup is an error.
func byHandle(mountPoint string, id uint64) (string, error) {
	// Not O_PATH: open_by_handle_at refuses one as its mount fd.
	mfd, err := unix.Open(mountPoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer func() { _ = unix.Close(mfd) }() // read-only: a failed close loses nothing
	var h [8]byte
	binary.NativeEndian.PutUint64(h[:], id)
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(fileIDKernfs, h[:]), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		if errors.Is(err, unix.ESTALE) {
			return "", errors.New("no such cgroup (removed)")
		}
		return "", err
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Ino != id {
		return "", fmt.Errorf("the handle opened inode %d", st.Ino)
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(p, " (deleted)") {
		return "", errors.New("no such cgroup (removed)")
	}
	return p, nil
}

// byInode walks the mount for the directory whose inode is id.
func byInode(mountPoint string, id uint64) (string, error) {
	found, seen := "", 0
	errFound := errors.New("found")
	err := filepath.WalkDir(mountPoint, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // a cgroup removed meanwhile, or a control file
		}
		if seen++; seen > maxCgroupWalk {
			return fmt.Errorf("more than %d cgroups", maxCgroupWalk)
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && st.Ino == id {
			found = p
			return errFound
		}
		return nil
	})
	if found != "" {
		return found, nil
	}
	if err != nil && err != errFound {
		return "", err
	}
	return "", errors.New("no such cgroup (removed)")
}

// InCgroupV2 returns id with its unified cgroup set to p (from the id the
// kernel recorded at a call): its other hierarchies' lines are kept.
func (id Identity) InCgroupV2(p string) Identity {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(id.cgroups, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "0::") {
			lines = append(lines, l)
		}
	}
	lines = append(lines, "0::"+p)
	id.cgroups = strings.Join(lines, "\n") + "\n"
	id.Cgroup, id.CgroupAtCall = p, true
	return id
}
