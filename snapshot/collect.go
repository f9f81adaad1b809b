package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/accounts"
	"github.com/cudatrace/cudatrace/internal/procfs"
)

// Options says whose view of the system Collect takes.
type Options struct {
	// PID is the target process: its root, mounts, cgroups and credentials
	// are read through /proc/PID. Zero, or a process that has exited, makes
	// Collect fall back to cudatrace's own view and say so.
	PID int
	// ExtraPaths are device paths the trace touched; each gets a Node, with
	// Exists=false when it is missing now.
	ExtraPaths []string
	// ProcDevicesPath replaces /proc/devices (tests, fake setups).
	ProcDevicesPath string
	// KmsgSince starts the kernel log window, and is the origin of the
	// kernel lines' times (the trace's start); zero skips the kernel log.
	KmsgSince time.Time
	// NvidiaSMI is the nvidia-smi to ask for persistence and compute mode
	// (only NVML knows them): "" asks nothing, "auto" looks on PATH and in
	// /usr/local/nvidia/bin.
	NvidiaSMI string
	// Identity is what was read of the target while it ran (cudatrace
	// watch: at its first event; any trace: at its failure). When the
	// target is gone, its cgroups' device policy is read from the cgroups
	// it was in (a crash-looping container's cgroup outlives its process),
	// its UID is taken from it, and its user name too when its root was
	// cudatrace's (SameRoot). Ignored for another PID or a live target.
	Identity *Identity
	// Host, when set, shares the host's facts with the other snapshots
	// that use it (HostCache): the kernel log is read incrementally, the
	// driver's files and state, /proc/devices and cudatrace's own mount
	// table at most once per its MaxAge.
	Host *HostCache
	// QueryCgroupPrograms replaces QueryDevicePrograms, which lists the
	// effective BPF_CGROUP_DEVICE programs of cgroupDir (a directory under
	// the cgroup2 mount cgroupRoot): tests use it to fake the kernel's answer.
	QueryCgroupPrograms func(cgroupDir, cgroupRoot string) ([]DeviceProgram, error)
}

// collector holds the paths and hooks Collect reads through, so that tests
// can point it at a fake /proc or pretend cgroup2 is not mounted.
type collector struct {
	opts     Options
	snap     *Snapshot
	proc     string // "/proc"
	sys      string // "/sys"
	kmsgPath string // "/dev/kmsg"
	// readSyslog reads the kernel log buffer through syslog(2), where
	// kmsgPath cannot be opened.
	readSyslog func() ([]byte, error)
	// hostRoot (hostRootDir: "/", or PID 1's root from a pod) holds the
	// host files read: /lib/firmware, /boot, the container configs
	// (/etc/pve, /var/lib/lxc), CDI specs; tests point it away.
	hostRoot string
	// selfMountinfo is cudatrace's own mount table, which locates the
	// cgroup hierarchies it can read.
	selfMountinfo func() (string, error)
	mountCgroup2  func() (string, func() error, error)
	now           func() time.Time
	bootTime      func() time.Time // origin of /dev/kmsg timestamps
	// fs reads every file (safefile.go): the target shapes many of them;
	// rootFS those under the target's root.
	fs, rootFS *fsGuard
	// afterExit: the target is gone and its cgroups are the Identity's.
	afterExit bool
}

func newCollector(opts Options) *collector {
	c := &collector{
		opts:         opts,
		proc:         "/proc",
		sys:          "/sys",
		kmsgPath:     "/dev/kmsg",
		readSyslog:   readSyslogBuffer,
		mountCgroup2: mountCgroup2,
		now:          time.Now,
		bootTime:     kernelBootTime,
		fs:           &fsGuard{timeout: fsTimeout, what: "system files"},
		rootFS:       &fsGuard{timeout: fsTimeout, what: "the target's files"},
	}
	c.selfMountinfo = func() (string, error) { return c.readHostString("/proc/self/mountinfo") }
	if opts.Host != nil {
		c.hostRoot = opts.Host.root()
	} else {
		c.hostRoot = hostRootDir()
	}
	return c
}

// Collect reads the live system as the target process sees it. It never
// fails: whatever cannot be read is listed in Snapshot.Unavailable, and a
// host without an NVIDIA driver simply yields empty driver fields.
func Collect(opts Options) *Snapshot {
	return newCollector(opts).run()
}

// CollectView reads only the target's own view (Collect's first part:
// its nodes, mounts, cgroups and device policy, credentials, environment),
// quickly, for a caller that holds the target stopped meanwhile. AddHost
// completes the snapshot.
func CollectView(opts Options) *Snapshot {
	c := newCollector(opts)
	c.view()
	return c.snap
}

// AddHost adds to s, taken by CollectView with the same opts, the facts
// that do not depend on the target: the driver, its state, the kernel log.
func AddHost(s *Snapshot, opts Options) {
	c := newCollector(opts)
	c.snap = s
	c.host()
}

func (c *collector) run() *Snapshot {
	c.view()
	c.host()
	return c.snap
}

func (c *collector) view() {
	c.snap = &Snapshot{TakenAt: c.now()}
	s := c.snap
	c.collectHost()

	pidDir, alive := c.targetDir()
	viewDir := c.targetView(pidDir)
	root := filepath.Join(viewDir, "root")
	s.Process.PID = c.opts.PID
	if alive {
		c.collectProcess(pidDir, root)
	} else if c.afterExit {
		c.processFromIdentity(root)
	}

	devPath := c.opts.ProcDevicesPath
	if devPath == "" {
		devPath = filepath.Join(c.proc, "devices")
	}
	if text, err := c.readHostString(devPath); err != nil {
		c.unavailable("/proc/devices", err)
	} else {
		s.ProcDevices = ParseProcDevices(text)
	}

	var targetMounts []Mount
	read := c.fs.readString
	if viewDir == filepath.Join(c.proc, "self") {
		read = func(p string, _ int64) (string, error) { return c.readHostString(p) } // cudatrace's own view
	}
	if text, err := read(filepath.Join(viewDir, "mountinfo"), maxFileSize); err != nil {
		c.unavailable("mountinfo", err)
	} else {
		targetMounts = c.parseMounts(text)
	}
	c.collectNodes(root, targetMounts)

	if c.opts.PID > 0 && !alive && !c.afterExit {
		// cudatrace's own cgroups say nothing of the target's policy: read
		// as its, a default-allow cgroup here would clear a denial there.
		c.snap.CgroupV2 = &CgroupV2{QueryError: "the target had exited before its cgroup could be read"}
	} else if text, err := c.targetCgroups(pidDir); err != nil {
		c.unavailable("target cgroups", err)
	} else {
		lines := parseCgroupFile(text)
		var self []selfMount
		if mi, err := c.selfMountinfo(); err != nil {
			c.unavailable("cudatrace's mountinfo", err)
		} else {
			self = c.parseSelfMounts(mi)
		}
		c.collectCgroupV1(lines, self)
		c.collectCgroupV2(lines, self)
		if c.afterExit {
			// Its pid namespace and parents are gone with it: the path
			// alone says which container it was in.
			s.Container = DetectContainer(text, nil)
		} else {
			s.Container = DetectContainer(text, c.initEnv(pidDir, targetMounts))
			if s.Container.Runtime == "" || s.Container.Runtime == "systemd" {
				if r := RuntimeFromAncestors(c.ancestorComms(pidDir)); r != "" {
					s.Container.Runtime = r
				}
			}
		}
		placeLXC(&s.Container, c.hostExists)
	}
	if alive {
		c.collectEnv(pidDir)
	}
	// Everything above is the target's view; a target gone by now (or
	// already at the start) left part of it as cudatrace's own. What
	// follows is the host's and does not depend on the target.
	s.TargetLost = c.opts.PID != 0 && (!alive || !c.alive(pidDir))
}

// host reads the kernel log beside the driver's files: neither depends on
// the other, and on the H200 host they took ~11 ms one after another, at
// the end of every trace.
func (c *collector) host() {
	klog := c.fork()
	done := make(chan struct{})
	go func() {
		defer close(done)
		klog.collectKernelLog()
	}()
	if c.opts.Host != nil {
		c.opts.Host.driverFor(c)
	} else {
		c.collectDriver()
		c.collectDriverState()
	}
	<-done
	// As when it was read last: its lines after the driver's.
	c.snap.KernelLog = klog.snap.KernelLog
	c.snap.Unavailable = append(c.snap.Unavailable, klog.snap.Unavailable...)
}

// fork is a collector reading the same system into a snapshot of its own,
// for a part read concurrently; the caller merges what it set.
func (c *collector) fork() *collector {
	f := *c
	f.snap = &Snapshot{}
	return &f
}

// readHostString reads a file of the host's, not the target's: through
// the HostCache where there is one.
func (c *collector) readHostString(path string) (string, error) {
	if c.opts.Host != nil {
		return c.opts.Host.readString(c, path)
	}
	return c.fs.readString(path, maxFileSize)
}

// parseMounts is ParseMountinfo, through the HostCache where there is
// one: the same table (cudatrace's own) is parsed once.
func (c *collector) parseMounts(text string) []Mount {
	if h := c.opts.Host; h != nil {
		return h.parseMounts(text)
	}
	return ParseMountinfo(text)
}

// parseSelfMounts is parseSelfMounts, through the HostCache where there
// is one.
func (c *collector) parseSelfMounts(text string) []selfMount {
	if h := c.opts.Host; h != nil {
		return h.parseSelfMounts(text)
	}
	return parseSelfMounts(text)
}

// alive: the process behind pidDir is neither gone nor a zombie.
func (c *collector) alive(pidDir string) bool {
	text, err := c.fs.readString(filepath.Join(pidDir, "stat"), maxFileSize)
	if err != nil {
		return false
	}
	st, err := procfs.ParseStat(text)
	return err == nil && !st.Gone()
}

// targetDir returns /proc/PID, or /proc/self when there is no live target.
func (c *collector) targetDir() (string, bool) {
	self := filepath.Join(c.proc, "self")
	if c.opts.PID <= 0 {
		c.snap.Unavailable = append(c.snap.Unavailable,
			"no target process: nodes, mounts and cgroups are cudatrace's own view")
		return self, false
	}
	dir := filepath.Join(c.proc, strconv.Itoa(c.opts.PID))
	// A zombie still has its status and cgroup; targetView deals with
	// its missing root.
	if _, err := os.Stat(dir); err != nil {
		if id := c.opts.Identity; id != nil && id.PID == c.opts.PID && id.cgroups != "" {
			c.afterExit = true
			how := "its cgroups and UID are as read while it ran"
			if id.CgroupAtCall {
				how = "its cgroup is the one the kernel recorded at its failing call"
			}
			c.snap.Unavailable = append(c.snap.Unavailable,
				"target had exited: nodes and mounts are cudatrace's own view; "+how+", and the cgroups' device policy was read after its exit")
			return self, false
		}
		c.snap.Unavailable = append(c.snap.Unavailable,
			"target had exited: nodes, mounts and cgroups are cudatrace's own view; its credentials are unknown")
		return self, false
	}
	return dir, true
}

// targetCgroups is the target's /proc/PID/cgroup text: read now, or, when
// it is gone, as read while it ran.
func (c *collector) targetCgroups(pidDir string) (string, error) {
	if c.afterExit {
		return c.opts.Identity.cgroups, nil
	}
	return c.fs.readString(filepath.Join(pidDir, "cgroup"), maxFileSize)
}

// processFromIdentity fills what is known of a target that is gone: its
// UID, and its user name from cudatrace's /etc/passwd (under root) only
// when its root was cudatrace's: a container's users are its own.
func (c *collector) processFromIdentity(root string) {
	id, p := c.opts.Identity, &c.snap.Process
	if id.Limits != nil {
		id.Limits.fill(p)
		p.LimitsAtExec = true
	}
	if id.UID < 0 || id.UID > int64(^uint32(0)) {
		return
	}
	p.UID = uint32(id.UID)
	if !id.SameRoot {
		c.snap.Unavailable = append(c.snap.Unavailable, "target user name: it had exited, and its root was not cudatrace's")
		return
	}
	p.User = c.userName(root, p.UID, "/etc/passwd (user name)")
}

// userName is uid's name in the /etc/passwd under root, or "".
func (c *collector) userName(root string, uid uint32, what string) string {
	pw, err := c.rootFS.readFileInRoot(root, "/etc/passwd", maxFileSize)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.unavailable(what, err)
		}
		return ""
	}
	users, _ := accounts.ParsePasswd(bytes.NewReader(pw)) // bounded by maxFileSize already
	u, _ := users.ByID(uid)
	return u.Name
}

// targetView returns the /proc directory whose root and mount table show
// the filesystem as the target sees it: pidDir, or cudatrace's own when the
// target's root cannot be entered (another user's process, or a zombie,
// whose root is already gone while its status still holds its credentials).
func (c *collector) targetView(pidDir string) string {
	self := filepath.Join(c.proc, "self")
	if pidDir == self {
		return self
	}
	// Stat follows the link into the target's root: its file system may hang.
	if _, err := guarded(c.rootFS, func() (os.FileInfo, error) { return os.Stat(filepath.Join(pidDir, "root")) }); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			c.snap.Unavailable = append(c.snap.Unavailable,
				"target has exited (its root is gone): nodes and mounts are cudatrace's own view")
		} else {
			c.unavailable("target root (nodes, mounts and user names are cudatrace's own view)", err)
		}
		return self
	}
	return pidDir
}

func (c *collector) collectHost() {
	if c.opts.Host != nil {
		c.opts.Host.hostInfo(c)
		return
	}
	c.readHostInfo()
}

// readHostInfo reads the kernel, the architecture and the node name.
func (c *collector) readHostInfo() {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		c.unavailable("uname", err)
	} else {
		c.snap.Host.Kernel = unix.ByteSliceToString(u.Release[:])
		c.snap.Host.Arch = unix.ByteSliceToString(u.Machine[:])
	}
	c.snap.Host.Hostname = NodeName()
}

func (c *collector) collectProcess(pidDir, root string) {
	p := &c.snap.Process
	text, err := c.fs.readString(filepath.Join(pidDir, "status"), maxFileSize)
	if err != nil {
		c.unavailable("target status", err)
		return
	}
	st := parseStatus(text)
	p.UID, p.GID, p.Groups = st.UID, st.GID, st.Groups
	p.CapEff, p.CapBnd = st.CapEff, st.CapBnd
	p.NoNewPrivs, p.Seccomp, p.SeccompFilters = st.NoNewPrivs, st.Seccomp, st.SeccompFilters
	c.collectLimits(pidDir)
	p.Comm = st.Name
	if comm, err := c.fs.readString(filepath.Join(pidDir, "comm"), maxFileSize); err == nil {
		p.Comm = strings.TrimSpace(comm)
	}
	// The target's own /etc/passwd: the file it controls most directly.
	p.User = c.userName(root, p.UID, "target /etc/passwd (user name)")
	p.UserNS = c.inUserNS(pidDir)
}

// inUserNS reports whether the target's user namespace is not the initial
// one: it differs from cudatrace's, or its uid map is not the identity map
// of the initial namespace (which catches cudatrace itself in a container).
func (c *collector) inUserNS(pidDir string) bool {
	mine, err1 := os.Readlink(filepath.Join(c.proc, "self", "ns", "user"))
	theirs, err2 := os.Readlink(filepath.Join(pidDir, "ns", "user"))
	if err1 == nil && err2 == nil && mine != theirs {
		return true
	}
	m, err := c.fs.readString(filepath.Join(pidDir, "uid_map"), maxFileSize)
	if err != nil {
		c.unavailable("target uid_map", err)
		return err1 == nil && err2 == nil && mine != theirs
	}
	return strings.Join(strings.Fields(m), " ") != "0 0 4294967295"
}

func (c *collector) collectEnv(pidDir string) {
	data, err := c.fs.readFile(filepath.Join(pidDir, "environ"), maxFileSize)
	if errors.Is(err, errTooLarge) {
		// The variables that matter are usually set early; keep what fits.
		c.unavailable("target environment (only its first part read)", err)
	} else if err != nil {
		c.unavailable("target environment", err)
		return
	}
	c.snap.Env = DiagnosticEnv(parseEnviron(data))
}

// TargetContainer says which container process pid runs in, from its
// cgroup path, its pid namespace's init and its ancestors: a few quick
// reads, for a process that may exit any moment (a container's CUDA job
// that fails exits at once, before its full snapshot is read).
func TargetContainer(pid int) (Container, bool) {
	c := newCollector(Options{PID: pid})
	pidDir := filepath.Join(c.proc, strconv.Itoa(pid))
	text, err := c.fs.readString(filepath.Join(pidDir, "cgroup"), maxFileSize)
	if err != nil {
		return Container{}, false
	}
	ct := DetectContainer(text, c.initEnv(pidDir, nil))
	if ct.Runtime == "" || ct.Runtime == "systemd" {
		if r := RuntimeFromAncestors(c.ancestorComms(pidDir)); r != "" {
			ct.Runtime = r
		}
	}
	placeLXC(&ct, c.hostExists)
	return ct, ct.Runtime != ""
}

// Container says which container the process of id ran in, from the
// cgroups read at its first event or exec, for a process gone before its
// failure could be read (its init's environment and its ancestors are
// gone with it; the cgroup path alone names LXC, Docker, Kubernetes).
func (id *Identity) Container() (Container, bool) {
	if id == nil || id.cgroups == "" {
		return Container{}, false
	}
	c := newCollector(Options{PID: id.PID})
	ct := DetectContainer(id.cgroups, nil)
	placeLXC(&ct, c.hostExists)
	return ct, ct.Runtime != ""
}

// TargetEnv reads the variables of process pid's environment a report
// keeps (DiagnosticEnv): one quick read, for a process that may exit any
// moment (CUDA failed and it is on its way out).
func TargetEnv(pid int) (map[string]string, error) {
	return readDiagnosticEnv(&fsGuard{timeout: fsTimeout, what: "system files"}, pid)
}

// EnvFromBlock is what a report keeps (DiagnosticEnv) of an environment
// block a backend copied ("K=V\x00K=V..."), as /proc/PID/environ shows it.
func EnvFromBlock(block []byte) map[string]string {
	return DiagnosticEnv(parseEnviron(block))
}

func readDiagnosticEnv(g *fsGuard, pid int) (map[string]string, error) {
	data, err := g.readFile(fmt.Sprintf("/proc/%d/environ", pid), maxFileSize)
	if err != nil && !errors.Is(err, errTooLarge) {
		return nil, err
	}
	return DiagnosticEnv(parseEnviron(data)), nil
}

// initEnv is the environment of the init of the target's PID namespace
// (where container managers set container=), plus that variable inferred
// from the marker files docker and podman leave in a container's root. The
// markers also survive in VM images built from container images, so they
// count only when the target is in another PID namespace than cudatrace or
// its root is an overlay, as container roots are.
func (c *collector) initEnv(pidDir string, mounts []Mount) map[string]string {
	env := map[string]string{}
	initDir, otherNS := c.pidNSInit(pidDir)
	if initDir != "" {
		if data, err := c.fs.readFile(filepath.Join(initDir, "environ"), maxFileSize); err == nil || errors.Is(err, errTooLarge) {
			if v, ok := parseEnviron(data)["container"]; ok {
				env["container"] = v
			}
		}
	}
	overlayRoot := false
	if i := mountOf(mounts, "/"); i >= 0 && strings.Contains(mounts[i].FSType, "overlay") {
		overlayRoot = true
	}
	if env["container"] == "" && (otherNS || overlayRoot) {
		root := filepath.Join(pidDir, "root")
		if c.rootFS.existsInRoot(root, "/.dockerenv") {
			env["container"] = "docker"
		} else if c.rootFS.existsInRoot(root, "/run/.containerenv") {
			env["container"] = "podman"
		}
	}
	return env
}

// pidNSInit finds /proc/N of the process that is PID 1 in the target's PID
// namespace ("" when not found), and whether that namespace is not
// cudatrace's own.
func (c *collector) pidNSInit(pidDir string) (string, bool) {
	ns, err := os.Readlink(filepath.Join(pidDir, "ns", "pid"))
	if err != nil {
		return "", false
	}
	if mine, err := os.Readlink(filepath.Join(c.proc, "self", "ns", "pid")); err == nil && mine == ns {
		return filepath.Join(c.proc, "1"), false
	}
	entries, err := os.ReadDir(c.proc)
	if err != nil {
		return "", true
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join(c.proc, e.Name())
		if other, err := os.Readlink(filepath.Join(dir, "ns", "pid")); err != nil || other != ns {
			continue
		}
		st, err := c.fs.readString(filepath.Join(dir, "status"), maxFileSize)
		if err != nil {
			continue
		}
		// NSpid lists the PID in each namespace, innermost last.
		if ns := procfs.ParseStatus(st).Uints("NSpid"); len(ns) > 0 && ns[len(ns)-1] == 1 {
			return dir, true
		}
	}
	return "", true
}

// unavailable records that what could not be read, in one short line.
func (c *collector) unavailable(what string, err error) {
	msg := shortErr(err)
	if (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) && !strings.Contains(msg, "(needs") {
		msg += " (needs root)"
	}
	c.snap.Unavailable = append(c.snap.Unavailable, what+": "+msg)
}

// shortErr drops the path and syscall from an error whose context the
// caller already gives.
func shortErr(err error) string {
	var pe *fs.PathError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		return pe.Err.Error()
	case errors.As(err, &se):
		return se.Err.Error()
	}
	return err.Error()
}

// readOptional reads a file that is normally absent without a driver; only
// errors other than "missing" are worth reporting.
func (c *collector) readOptional(what, path string) (string, bool) {
	text, err := c.fs.readString(path, maxFileSize)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.unavailable(what, err)
		}
		return "", false
	}
	return text, true
}

// maxAncestors bounds the walk up the parent chain.
const maxAncestors = 16

// ancestorComms are the comms of the target's ancestors, nearest first,
// up to cudatrace itself or PID 1.
func (c *collector) ancestorComms(pidDir string) []string {
	var out []string
	self := os.Getpid()
	dir := pidDir
	for i := 0; i <= maxAncestors; i++ {
		text, err := c.fs.readString(filepath.Join(dir, "stat"), maxFileSize)
		if err != nil {
			break
		}
		st, err := procfs.ParseStat(text)
		if err != nil {
			break
		}
		comm, ppid := st.Comm, st.PPID
		if i > 0 {
			out = append(out, comm)
		}
		if ppid <= 1 || ppid == self {
			break
		}
		dir = filepath.Join(c.proc, strconv.Itoa(ppid))
	}
	return out
}

// hostExists is whether a host path exists: a directory when p ends in
// "/", else a regular file.
func (c *collector) hostExists(p string) bool {
	st, err := c.fs.statInRoot(c.hostRoot, p)
	if err != nil {
		return false
	}
	if strings.HasSuffix(p, "/") {
		return st.Mode&unix.S_IFMT == unix.S_IFDIR
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG
}
