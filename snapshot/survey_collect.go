package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/yaml"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	"github.com/cudatrace/cudatrace/internal/accounts"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
)

// SurveyOptions says whose view SurveyHost takes. The zero value surveys
// the host as this process sees it.
type SurveyOptions struct {
	// PID is the process whose cgroups, nodes, credentials and environment
	// are checked; 0 is this process.
	PID int
	// Cgroup, when set, is the cgroup whose device policy is checked
	// instead of PID's: a path relative to the cgroup root ("/lxc/101") or
	// under a cgroup mount ("/sys/fs/cgroup/lxc/101").
	Cgroup string
	// User is who will run CUDA: a name, "UID" or "UID:GID"; "" is PID's
	// own credentials.
	User string
	// HostRoot prefixes the container-manager and CDI directories (tests);
	// "" is the host's root: "/", or PID 1's from a pod (hostRootDir).
	HostRoot string
	// ProcDevicesPath replaces /proc/devices (tests, fake setups).
	ProcDevicesPath string
	// NvidiaSMI is the nvidia-smi to ask for persistence and compute mode:
	// "" looks on PATH and in /usr/local/nvidia/bin, "-" asks nothing.
	NvidiaSMI string
	// QueryCgroupPrograms lists a cgroup's effective device programs (see
	// Options.QueryCgroupPrograms).
	QueryCgroupPrograms func(cgroupDir, cgroupRoot string) ([]DeviceProgram, error)
}

// Bounds on what a survey reads: container configs and CDI specs are
// written by whoever administers the host, but a directory of thousands
// of files or one huge file must not exhaust memory.
const (
	maxConfigFiles = 4096
	maxConfigBytes = 1 << 20
	maxConfigLines = 2000 // device lines kept per container config
	maxCDIFiles    = 256
	maxCDIBytes    = 8 << 20
	maxCDINodes    = 4096
	smiTimeout     = 10 * time.Second
)

// SurveyHost reads everything `cudatrace doctor` checks. Like Collect it
// never fails and never changes the system: it mounts nothing (where no
// cgroup2 mount covers the cgroup, the device programs are reported
// unavailable),
// and its one probe, memfd_create, makes an anonymous file that is closed
// at once.
func SurveyHost(opts SurveyOptions) *Survey {
	pid, subject := opts.PID, fmt.Sprintf("process %d", opts.PID)
	if pid <= 0 {
		pid, subject = os.Getpid(), "this process"
	}
	smi := opts.NvidiaSMI
	switch smi {
	case "":
		smi = "auto"
	case "-":
		smi = ""
	}
	c := newCollector(Options{PID: pid, ProcDevicesPath: opts.ProcDevicesPath,
		KmsgSince:           time.Unix(1, 0), // since boot
		NvidiaSMI:           smi,
		QueryCgroupPrograms: opts.QueryCgroupPrograms})
	c.mountCgroup2 = func() (string, func() error, error) {
		return "", nil, errors.New("doctor mounts nothing")
	}
	sv := &Survey{Subject: subject}
	sv.Base = c.run()
	base := sv.Base
	hostRoot := opts.HostRoot
	if hostRoot == "" {
		hostRoot = c.hostRoot
	}

	selfMounts := []selfMount{}
	if mi, err := c.selfMountinfo(); err == nil {
		selfMounts = parseSelfMounts(mi)
	}
	for _, m := range selfMounts {
		if m.FSType == "cgroup" && contains(m.Super, "devices") {
			sv.CgroupDevicesV1 = true
		}
	}
	if opts.Cgroup != "" {
		sv.Subject = "cgroup " + opts.Cgroup
		surveyCgroup(c, opts.Cgroup, selfMounts)
	}

	root := filepath.Join(c.proc, strconv.Itoa(pid), "root")
	rfs, err := openRootFS(root)
	if err != nil {
		sv.unavailable("the subject's root (libraries, /dev/char)", err)
	} else {
		defer rfs.close()
		sv.collectCharLinks(rfs)
		sv.collectLibraries(rfs)
	}
	if opts.User != "" {
		if rfs == nil {
			sv.UserError = fmt.Errorf("cannot look the user up: %s could not be read: %s", root, shortErr(err))
		} else if cr, uerr := lookupCreds(rfs, opts.User); uerr != nil {
			sv.UserError = uerr
		} else {
			sv.User = cr
		}
		if sv.UserError != nil {
			sv.Unavailable = append(sv.Unavailable, "user "+opts.User+": "+sv.UserError.Error())
		}
	}

	if base.DriverState != nil {
		sv.DriverState = *base.DriverState
		base.DriverState = nil // the survey holds it (one copy in doctor's JSON)
	}
	if pid == os.Getpid() {
		sv.MemfdProbed = true
		if fd, err := unix.MemfdCreate("cudatrace-doctor", unix.MFD_CLOEXEC); err != nil {
			sv.MemfdError = err.Error()
		} else {
			_ = unix.Close(fd) // read-only: a failed close loses nothing
		}
	}

	hfs, err := openRootFS(hostRoot)
	if err != nil {
		sv.unavailable("host root "+hostRoot, err)
		return sv
	}
	defer hfs.close()
	sv.collectSystemdRuntimes(hfs)
	sv.collectContainers(hfs)
	sv.collectCDI(hfs, c)
	return sv
}

func (sv *Survey) unavailable(what string, err error) {
	msg := shortErr(err)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		msg += " (needs root)"
	}
	sv.Unavailable = append(sv.Unavailable, what+": "+msg)
}

// surveyCgroup replaces the base snapshot's cgroups with those of an
// explicit cgroup path, read as Collect reads a process's.
// CheckCgroup reports whether cgroup cg (as /proc/PID/cgroup names it, or
// under a cgroup mount point) exists in some hierarchy mounted here: an
// error wrapping fs.ErrNotExist when every mount that covers it lacks it;
// nil when one has it, or none covers it (nothing to tell by).
func CheckCgroup(cg string) error {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	rel := path.Clean("/" + cg)
	var tried []string
	for _, m := range parseSelfMounts(string(mi)) {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		p := rel
		if r, ok := strings.CutPrefix(rel, strings.TrimSuffix(m.MountPoint, "/")+"/"); ok {
			p = strings.TrimSuffix(m.Root, "/") + "/" + r
		}
		if _, ok := underRoot(m.Root, p); !ok {
			continue
		}
		dir := cgroupFile(m.MountPoint, m.Root, p)
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		tried = append(tried, dir)
	}
	if len(tried) == 0 {
		return nil
	}
	return fmt.Errorf("no such cgroup (not %s): %w", strings.Join(tried, ", "), fs.ErrNotExist)
}

func surveyCgroup(c *collector, cg string, mounts []selfMount) {
	rel := path.Clean("/" + cg)
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		if r, ok := strings.CutPrefix(rel, strings.TrimSuffix(m.MountPoint, "/")+"/"); ok {
			// Under a mount rooted at a sub-cgroup, the path names
			// that cgroup's descendants (a root with ".." in it stays
			// unclean, and is refused as outside the namespace).
			rel = strings.TrimSuffix(m.Root, "/") + "/" + r
			break
		}
	}
	c.snap.CgroupV1, c.snap.CgroupV2 = nil, nil
	lines := []cgroupLine{{Hierarchy: "0", Path: rel}}
	if c.snap.Process.PID != 0 {
		lines = append(lines, cgroupLine{Hierarchy: "1", Controllers: []string{"devices"}, Path: rel})
	}
	c.collectCgroupV2(lines, mounts)
	for _, m := range mounts {
		if m.FSType == "cgroup" && contains(m.Super, "devices") {
			c.collectCgroupV1(lines, mounts)
			break
		}
	}
}

// collectCharLinks checks /dev/char/MAJ:MIN for every NVIDIA character
// node. The link is followed one step only, inside the root.
func (sv *Survey) collectCharLinks(r *rootFS) {
	if fd, err := r.open("/dev/char", unix.O_DIRECTORY); err == nil {
		_ = unix.Close(fd) // read-only: a failed close loses nothing
		sv.CharDir = true
	}
	for _, n := range sv.Base.Nodes {
		if n.Type != "c" || !nvfile.IsNode(n.Path) {
			continue
		}
		cl := CharLink{Node: n.Path, Link: fmt.Sprintf("/dev/char/%d:%d", n.Major, n.Minor)}
		dfd, err := r.open("/dev/char", unix.O_DIRECTORY)
		if err == nil {
			buf := make([]byte, 4096)
			if k, err := unix.Readlinkat(dfd, path.Base(cl.Link), buf); err == nil {
				cl.Exists, cl.Dest = true, string(buf[:k])
				dest := cl.Dest
				if !path.IsAbs(dest) {
					dest = path.Join("/dev/char", dest)
				}
				if tfd, err := r.open(dest, 0); err == nil {
					var st unix.Stat_t
					if unix.Fstat(tfd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR &&
						unix.Major(st.Rdev) == n.Major && unix.Minor(st.Rdev) == n.Minor {
						cl.Resolves = true
					}
					_ = unix.Close(tfd) // read-only: a failed close loses nothing
				}
			} else {
				var st unix.Stat_t
				if unix.Fstatat(dfd, path.Base(cl.Link), &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					cl.Exists = true // a node, not a link: it still resolves
					cl.Resolves = st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == n.Major && unix.Minor(st.Rdev) == n.Minor
				}
			}
			_ = unix.Close(dfd) // read-only: a failed close loses nothing
		}
		sv.CharLinks = append(sv.CharLinks, cl)
	}
}

// collectLibraries finds libcuda and NVML as the loader would for the
// subject, with the subject's LD_LIBRARY_PATH.
func (sv *Survey) collectLibraries(r *rootFS) {
	ldPath := sv.Base.Env["LD_LIBRARY_PATH"]
	var cache []byte
	if data, _, err := r.readFile("/etc/ld.so.cache", maxLdCache); err == nil {
		cache = data
	} else if !errors.Is(err, fs.ErrNotExist) {
		sv.unavailable("/etc/ld.so.cache", err)
	}
	for _, name := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		var hits []string
		if cache != nil {
			var err error
			if hits, err = parseLdCache(cache, name); err != nil {
				sv.Unavailable = append(sv.Unavailable, err.Error())
				cache = nil
			}
		}
		sv.Libraries = append(sv.Libraries, findLibrary(r, name, ldPath, hits))
	}
}

// collectSystemdRuntimes notes runc-based runtimes on a systemd host.
func (sv *Survey) collectSystemdRuntimes(r *rootFS) {
	if fd, err := r.open("/run/systemd/system", unix.O_DIRECTORY); err != nil {
		return
	} else {
		_ = unix.Close(fd) // read-only: a failed close loses nothing
	}
	for _, rt := range []struct{ name, sock string }{
		{"docker", "/run/docker.sock"}, {"containerd", "/run/containerd/containerd.sock"}, {"cri-o", "/run/crio/crio.sock"},
	} {
		if fd, err := r.open(rt.sock, 0); err == nil {
			_ = unix.Close(fd) // read-only: a failed close loses nothing
			sv.SystemdRuntimes = append(sv.SystemdRuntimes, rt.name)
		}
	}
}

// containerDirs are where container managers keep configs: dir, the file
// inside each entry ("" when the entries are the files), the manager, and
// its separator.
var containerDirs = []struct{ dir, file, manager string }{
	{"/etc/pve/lxc", "", "proxmox"},
	{"/var/lib/lxc", "config", "lxc"},
	{"/var/log/incus", "lxc.conf", "incus"},
	{"/var/log/lxd", "lxc.conf", "lxd"},
	{"/var/snap/lxd/common/lxd/logs", "lxc.conf", "lxd"},
}

// capNames keeps the first limit of a directory's names (read limit+1 to
// know) and says so when there were more: a check that silently skips
// what it did not read would pass a host it never saw.
func (sv *Survey) capNames(dir string, names []string, limit int) []string {
	if len(names) <= limit {
		return names
	}
	sv.Unavailable = append(sv.Unavailable, fmt.Sprintf("%s: more than %d entries; only the first %d (in directory order) were checked", dir, limit, limit))
	return names[:limit]
}

func (sv *Survey) collectContainers(r *rootFS) {
	for _, cd := range containerDirs {
		names, err := r.readDir(cd.dir, maxConfigFiles+1)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				sv.unavailable("listing "+cd.dir, err)
			}
			continue
		}
		names = sv.capNames(cd.dir, names, maxConfigFiles)
		sort.Strings(names)
		for _, n := range names {
			if n == "." || n == ".." || len(sv.Containers) >= maxConfigFiles {
				continue
			}
			p, name := path.Join(cd.dir, n, cd.file), n
			if cd.file == "" {
				var ok bool
				if name, ok = strings.CutSuffix(n, ".conf"); !ok {
					continue
				}
				p = path.Join(cd.dir, n)
			} else if !r.isFile(p) {
				continue
			}
			cc := ContainerConfig{Manager: cd.manager, Name: name, Path: p}
			data, trunc, err := r.readFile(p, maxConfigBytes)
			if err != nil {
				cc.ReadError = shortErr(err)
			} else {
				cc.Truncated = trunc
				cc.Lines = ParseContainerConfig(string(data), ConfigSeparator(cd.manager) == ": ")
			}
			sv.Containers = append(sv.Containers, cc)
		}
	}
}

// ConfigSeparator is how a manager's config writes "key SEP value":
// Proxmox's /etc/pve/lxc/ID.conf uses ": ", LXC's own config " = ".
func ConfigSeparator(manager string) string {
	if manager == "proxmox" {
		return ": "
	}
	return " = "
}

// ParseContainerConfig keeps the lines of an LXC config ("key = value") or
// a Proxmox container config ("key: value", which stops at the first
// "[snapshot]" section: those lines describe snapshots, not the container)
// that decide its devices: lxc.cgroup*.devices.*, lxc.mount.entry, and
// Proxmox's devN passthrough entries.
func ParseContainerConfig(text string, proxmox bool) []ConfigLine {
	var out []ConfigLine
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if proxmox && strings.HasPrefix(line, "[") {
			break
		}
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := "", "", false
		if ie, ic := strings.IndexByte(line, '='), strings.IndexByte(line, ':'); proxmox && ic > 0 && (ie < 0 || ic < ie) {
			k, v, ok = line[:ic], line[ic+1:], true
		} else if ie > 0 {
			k, v, ok = line[:ie], line[ie+1:], true
		}
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !isDeviceKey(k) || len(out) >= maxConfigLines {
			continue
		}
		out = append(out, ConfigLine{N: i + 1, Key: k, Value: v, Raw: strings.TrimRight(raw, "\r")})
	}
	return out
}

func isDeviceKey(k string) bool {
	switch {
	case strings.HasPrefix(k, "lxc.cgroup.devices."), strings.HasPrefix(k, "lxc.cgroup2.devices."), k == "lxc.mount.entry":
		return true
	case strings.HasPrefix(k, "dev"):
		_, err := strconv.Atoi(k[3:])
		return err == nil
	}
	return false
}

// cdiDirs are the CDI spec directories, in the order the CDI library
// gives them priority (later wins).
var cdiDirs = []string{"/etc/cdi", "/var/run/cdi"}

func (sv *Survey) collectCDI(r *rootFS, c *collector) {
	seen := map[string]bool{}
	for _, d := range cdiDirs {
		names, err := r.readDir(d, maxCDIFiles+1)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				sv.unavailable("listing "+d, err)
			}
			continue
		}
		names = sv.capNames(d, names, maxCDIFiles)
		sort.Strings(names)
		for _, n := range names {
			ext := path.Ext(n)
			if ext != ".yaml" && ext != ".yml" && ext != ".json" || len(sv.CDISpecs) >= maxCDIFiles {
				continue
			}
			p := path.Join(d, n)
			// /var/run is usually a link to /run; one file is one spec.
			if real := r.resolve(p); seen[real] {
				continue
			} else {
				seen[real] = true
			}
			spec := CDISpec{Path: p}
			data, trunc, err := r.readFile(p, maxCDIBytes)
			switch {
			case err != nil:
				spec.ParseError = shortErr(err)
			case trunc:
				spec.ParseError = fmt.Sprintf("larger than %d MiB, not read", maxCDIBytes>>20)
			default:
				parseCDISpec(&spec, data)
				for i := range spec.Nodes {
					host := spec.Nodes[i].HostPath
					if host == "" {
						host = spec.Nodes[i].Path
					}
					spec.Nodes[i].Host = c.statNode(c.hostRoot, host) // the host's /dev, also from a pod
				}
			}
			sv.CDISpecs = append(sv.CDISpecs, spec)
		}
	}
}

// parseCDISpec decodes a spec with the CDI project's own types; YAML is
// read as the CDI library reads it (sigs.k8s.io/yaml: YAML to JSON, then
// the JSON tags), so a spec parses here exactly when it parses there.
func parseCDISpec(spec *CDISpec, data []byte) {
	var s cdi.Spec
	if err := yaml.Unmarshal(data, &s); err != nil {
		spec.ParseError = err.Error()
		return
	}
	spec.Kind, spec.Version = s.Kind, s.Version
	add := func(dev string, nodes []*cdi.DeviceNode) {
		for _, n := range nodes {
			if n == nil || len(spec.Nodes) >= maxCDINodes {
				continue
			}
			spec.Nodes = append(spec.Nodes, CDINode{Device: dev, Path: n.Path, HostPath: n.HostPath, Type: n.Type, Major: n.Major, Minor: n.Minor})
		}
	}
	add("", s.ContainerEdits.DeviceNodes)
	for _, d := range s.Devices {
		add(d.Name, d.ContainerEdits.DeviceNodes)
	}
}

// lookupCreds resolves a user as "NAME", "UID" or "UID:GID" from the
// subject's /etc/passwd and /etc/group; a bare number needs no entry.
func lookupCreds(r *rootFS, user string) (*Creds, error) {
	passwd, _, perr := r.readFile("/etc/passwd", maxConfigBytes)
	group, _, _ := r.readFile("/etc/group", maxConfigBytes)
	users, _ := accounts.ParsePasswd(bytes.NewReader(passwd)) // bounded by maxConfigBytes already
	cr := &Creds{}
	idPart, gidPart, hasGID := strings.Cut(user, ":")
	var u accounts.User
	var found bool
	if uid, ok := accounts.ParseID(idPart); ok {
		if u, found = users.ByID(uid); !found {
			u, found = accounts.User{UID: uid, GID: uid}, true // no entry needed
		}
	} else {
		u, found = users.ByName(idPart)
	}
	if !found {
		if perr != nil {
			return nil, fmt.Errorf("cannot look the user up: /etc/passwd: %s", shortErr(perr))
		}
		return nil, ErrNoSuchUser
	}
	cr.Name, cr.UID, cr.GID = u.Name, u.UID, u.GID
	if hasGID {
		g, ok := accounts.ParseID(gidPart)
		if !ok {
			return nil, errors.New("group must be numeric in UID:GID")
		}
		cr.GID = g
		return cr, nil // as with setpriv --clear-groups
	}
	groups, _ := accounts.ParseGroup(bytes.NewReader(group))
	cr.Groups = groups.Supplementary(cr.Name, cr.GID)
	return cr, nil
}
