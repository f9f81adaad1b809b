package snapshot

import (
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
)

// nvidiaDirs are the /dev subdirectories whose entries are all NVIDIA nodes.
var nvidiaDirs = []string{"/dev/nvidia-caps", "/dev/nvidia-caps-imex-channels"}

// collectNodes stats every NVIDIA node the target can see (through root,
// its /proc/PID/root), the paths the trace touched, and the nodes the
// registered drivers imply, then records the mounts that hold them.
func (c *collector) collectNodes(root string, mounts []Mount) {
	want := map[string]bool{}
	add := func(p string) {
		if !strings.HasPrefix(p, "/") {
			p = "/" + p
		}
		want[path.Clean(p)] = true
	}

	for _, p := range c.listedNodes(root) {
		add(p)
	}
	for _, p := range c.opts.ExtraPaths {
		if p != "" {
			add(p)
		}
	}
	for _, p := range expectedNodes(c.snap.ProcDevices) {
		add(p)
	}

	paths := make([]string, 0, len(want))
	for p := range want {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	held := map[int]bool{}
	if i := mountOf(mounts, "/dev"); i >= 0 {
		held[i] = true
	}
	stat := c.statNode
	if h := c.opts.Host; h != nil && root == path.Join(c.proc, "self", "root") {
		stat = func(root, p string) Node { return h.statNode(c, root, p) }
	}
	for _, p := range paths {
		n := stat(root, p)
		if i := mountOf(mounts, p); i >= 0 {
			n.MountPoint = mounts[i].MountPoint
			held[i] = true
		}
		c.snap.Nodes = append(c.snap.Nodes, n)
	}
	for i, m := range mounts {
		if held[i] {
			c.snap.Mounts = append(c.snap.Mounts, m)
		}
	}
}

// listedNodes lists the NVIDIA nodes in root's /dev, its NVIDIA
// directories and the /dev/char links that lead to NVIDIA nodes; in
// cudatrace's own root (a target gone), through the HostCache where there
// is one.
func (c *collector) listedNodes(root string) []string {
	if h := c.opts.Host; h != nil && root == path.Join(c.proc, "self", "root") {
		return h.listedNodes(c, root)
	}
	return c.listNodes(root)
}

func (c *collector) listNodes(root string) []string {
	var out []string
	add := func(p string) { out = append(out, p) }
	if names, err := c.readDirNames(root, "/dev"); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, "nvidia") && !contains(nvidiaDirs, "/dev/"+n) {
				add("/dev/" + n)
			}
		}
	}
	for _, d := range nvidiaDirs {
		if names, err := c.readDirNames(root, d); err == nil {
			for _, n := range names {
				add(d + "/" + n)
			}
		}
	}
	// /dev/char/M:m links let systemd and runc resolve device rules; keep
	// the ones that lead to NVIDIA nodes (their absence is failure mode 3).
	if names, err := c.readDirNames(root, "/dev/char"); err == nil {
		for _, n := range names {
			st, dest, err := c.rootFS.lstatInRoot(root, "/dev/char/"+n)
			if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK && strings.Contains(dest, "nvidia") {
				add("/dev/char/" + n)
			}
		}
	}
	return out
}

// expectedNodes are nodes that must exist for the registered drivers to be
// usable; listing them makes a missing one visible even if nothing stat'ed it.
func expectedNodes(devs []DriverMajor) []string {
	var out []string
	for _, d := range devs {
		switch {
		case d.Major == nvfile.Major && (d.Name == "nvidiactl" || d.Name == "nvidia-frontend"):
			out = append(out, "/dev/nvidiactl")
		case d.Name == "nvidia-uvm":
			out = append(out, "/dev/nvidia-uvm")
		}
	}
	return out
}

// readDirNames lists dir as seen from root. A missing directory is normal
// (no driver); other errors are recorded.
func (c *collector) readDirNames(root, dir string) ([]string, error) {
	g := c.rootFS
	if root == "/" { // the host's own files (driver state)
		g = c.fs
	}
	names, err := g.readDirNames(root, dir)
	switch {
	case errors.Is(err, errTooLarge):
		c.unavailable("listing "+dir+" (only part read)", err)
		return names, nil
	case err != nil:
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			c.unavailable("listing "+dir, err)
		}
		return nil, err
	}
	return names, nil
}

// statNode lstats p under root. A symlink is described as itself (with its
// destination), because the target's resolution of it is what the trace shows.
func (c *collector) statNode(root, p string) Node {
	n := Node{Path: p}
	st, dest, err := c.rootFS.lstatInRoot(root, p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR) {
			c.unavailable("node "+p, err)
		}
		return n
	}
	n.Exists = true
	n.Mode = st.Mode & 0o7777
	n.UID, n.GID = st.Uid, st.Gid
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		n.Type = "c"
	case unix.S_IFBLK:
		n.Type = "b"
	case unix.S_IFLNK:
		n.Type = "l"
		n.LinkDest = dest
	case unix.S_IFREG:
		n.Type = "f"
	case unix.S_IFDIR:
		n.Type = "d"
	}
	if n.Type == "c" || n.Type == "b" {
		n.Major, n.Minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
	}
	return n
}

// mountOf returns the index of the mount that holds p: the longest mount
// point that is p or a parent of it, and of several mounts stacked on one
// point the last (topmost). -1 when none matches.
func mountOf(mounts []Mount, p string) int {
	best, bestLen := -1, -1
	for i, m := range mounts {
		mp := m.MountPoint
		if mp == p || mp == "/" || strings.HasPrefix(p, strings.TrimSuffix(mp, "/")+"/") {
			if len(mp) >= bestLen {
				best, bestLen = i, len(mp)
			}
		}
	}
	return best
}
