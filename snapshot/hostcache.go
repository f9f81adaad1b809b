package snapshot

import (
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultHostMaxAge is how old HostCache's driver facts may be.
const DefaultHostMaxAge = time.Second

// hostCacheKmsgCap bounds the driver-related kernel records a HostCache
// keeps (the oldest go first): twenty windows' worth (kmsgCap) and their
// history.
const hostCacheKmsgCap = 20*kmsgCap + kmsgOlderCap

// HostCache shares what a snapshot reads of the host, not of its target,
// between the snapshots of many processes (cudatrace watch takes one per
// process in which something failed; a fork storm of failures took each
// from scratch, and the kernel log alone, read whole each time, was a
// third of watch's CPU). With it:
//
//   - the kernel log is read from one /dev/kmsg descriptor kept open, each
//     record once: a snapshot reads only the records logged since the last
//     one and judges its own window over the driver-related records kept
//     (at most hostCacheKmsgCap, the oldest dropped first);
//   - the driver's files and state (/proc/driver/nvidia, /sys/module, the
//     kernel config), /proc/devices and cudatrace's own mount table are
//     read at most once per MaxAge: a snapshot's may be up to MaxAge older
//     than its target's view.
//
// What is shared is read-only: snapshots hold the same DriverState.
type HostCache struct {
	maxAge time.Duration
	now    func() time.Time

	kmu      sync.Mutex
	kmsgPath string
	kfd      int   // -1: not open (yet, or it failed: kerr)
	kerr     error // the open's error; the snapshot then reads syslog(2) itself
	kopened  bool
	records  []kmsgRecord // the driver-related ones, oldest first

	mu     sync.Mutex
	driver *hostDriver
	files  map[string]*hostFile
	nodes  *hostNodes
	stats  map[string]*hostNode // statNode in cudatrace's own root, by path
	host   *hostInfo
	// cgroups are cgroup v2 ids resolved to paths (CgroupV2PathByID),
	// each for maxAge: a fork storm in one pod asks for one id.
	cgroups map[uint64]*hostFile

	// The last mount tables parsed, by their text: cudatrace's own,
	// read for every snapshot of a process gone.
	mounts     parsed[Mount]
	selfMounts parsed[selfMount]

	rootOnce sync.Once
	hostRoot string // hostRootDir, which does not change
}

type hostNode struct {
	at          time.Time
	node        Node
	unavailable []string
}

type hostInfo struct {
	at          time.Time
	host        Host
	unavailable []string
}

// hostNodes is what listNodes found in cudatrace's own root.
type hostNodes struct {
	at          time.Time
	paths       []string
	unavailable []string
}

// hostDriver is what collectDriver and collectDriverState set.
type hostDriver struct {
	at            time.Time
	kernel        string // the release it was read for
	driver        Driver
	state         *DriverState
	driverLine    string
	driverVersion string
	unavailable   []string
}

type hostFile struct {
	at   time.Time
	text string
}

// NewHostCache makes a cache whose driver facts are at most maxAge old
// (0: DefaultHostMaxAge). Close releases its /dev/kmsg descriptor.
func NewHostCache(maxAge time.Duration) *HostCache {
	if maxAge <= 0 {
		maxAge = DefaultHostMaxAge
	}
	return &HostCache{maxAge: maxAge, now: time.Now, kmsgPath: "/dev/kmsg", kfd: -1,
		files: map[string]*hostFile{}, cgroups: map[uint64]*hostFile{}, stats: map[string]*hostNode{}}
}

// Close closes the kernel log's descriptor.
func (h *HostCache) Close() error {
	h.kmu.Lock()
	defer h.kmu.Unlock()
	if h.kfd < 0 {
		return nil
	}
	err := unix.Close(h.kfd)
	h.kfd = -1
	return err
}

// kernelRecords feeds each driver-related record kept to each, after
// reading those logged since the last call. It returns the open's error
// (the caller then reads syslog(2), as without a cache) and keeps a read's
// error for the caller to list.
func (h *HostCache) kernelRecords(each func(kmsgRecord)) (openErr, readErr error) {
	h.kmu.Lock()
	defer h.kmu.Unlock()
	if !h.kopened {
		h.kopened = true
		h.kfd, h.kerr = unix.Open(h.kmsgPath, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if h.kerr != nil {
			h.kfd = -1
		}
	}
	if h.kerr != nil {
		return h.kerr, nil
	}
	if h.kfd >= 0 {
		readErr = readKmsgFD(h.kfd, func(rec kmsgRecord) {
			if kmsgInteresting(rec.Text) {
				h.records = append(h.records, rec)
			}
		})
		if len(h.records) > hostCacheKmsgCap {
			h.records = slices.Delete(h.records, 0, len(h.records)-hostCacheKmsgCap)
		}
		if readErr != nil {
			// A read error other than the buffer's end: reopen at the
			// next snapshot, from the start of the kernel's buffer.
			_ = unix.Close(h.kfd)
			h.kfd, h.kopened, h.records = -1, false, nil
		}
	}
	for _, rec := range h.records {
		each(rec)
	}
	return nil, readErr
}

// driverFor copies the cached driver facts into c's snapshot, reading
// them first when they are older than maxAge (or were read for another
// kernel release, which only tests change).
func (h *HostCache) driverFor(c *collector) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	d := h.driver
	if d == nil || !h.fresh(d.at, now) || d.kernel != c.snap.Host.Kernel {
		f := c.fork()
		f.snap.Host = c.snap.Host
		f.collectDriver()
		f.collectDriverState()
		d = &hostDriver{at: now, kernel: c.snap.Host.Kernel, driver: f.snap.Driver, state: f.snap.DriverState,
			driverLine: f.snap.Host.DriverLine, driverVersion: f.snap.Host.DriverVersion, unavailable: f.snap.Unavailable}
		h.driver = d
	}
	s := c.snap
	s.Driver, s.DriverState = d.driver, d.state
	s.Host.DriverLine, s.Host.DriverVersion = d.driverLine, d.driverVersion
	s.Unavailable = append(s.Unavailable, d.unavailable...)
}

// readString is path's text as read at most maxAge ago (read through c's
// guard when older).
func (h *HostCache) readString(c *collector, path string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if f := h.files[path]; f != nil && h.fresh(f.at, now) {
		return f.text, nil
	}
	text, err := c.fs.readString(path, maxFileSize)
	if err == nil { // an error is not kept: the next snapshot tries again
		h.files[path] = &hostFile{at: now, text: text}
	}
	return text, err
}

// fresh: something read at at may still be used.
func (h *HostCache) fresh(at, now time.Time) bool { return now.Sub(at) < h.maxAge && !now.Before(at) }

// listedNodes is c.listNodes(root) as found at most maxAge ago; root is
// cudatrace's own.
func (h *HostCache) listedNodes(c *collector, root string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if n := h.nodes; n == nil || !h.fresh(n.at, now) {
		f := c.fork()
		h.nodes = &hostNodes{at: now, paths: f.listNodes(root), unavailable: f.snap.Unavailable}
	}
	c.snap.Unavailable = append(c.snap.Unavailable, h.nodes.unavailable...)
	return h.nodes.paths
}

// root is hostRootDir, found once.
func (h *HostCache) root() string {
	h.rootOnce.Do(func() { h.hostRoot = hostRootDir() })
	return h.hostRoot
}

// CgroupV2PathByID is the package's CgroupV2PathByID, with cudatrace's
// mount table as read at most maxAge ago and each id's answer kept for
// maxAge.
func (h *HostCache) CgroupV2PathByID(id uint64) (string, error) {
	h.mu.Lock()
	now := h.now()
	if p := h.cgroups[id]; p != nil && h.fresh(p.at, now) {
		h.mu.Unlock()
		return p.text, nil
	}
	h.mu.Unlock()
	c := newCollector(Options{Host: h})
	p, err := cgroupV2PathByID(id, c.selfMountinfo)
	if err == nil {
		h.mu.Lock()
		if len(h.cgroups) >= maxCachedCgroups {
			for k, v := range h.cgroups {
				if !h.fresh(v.at, now) {
					delete(h.cgroups, k)
				}
			}
		}
		if len(h.cgroups) < maxCachedCgroups {
			h.cgroups[id] = &hostFile{at: now, text: p}
		}
		h.mu.Unlock()
	}
	return p, err
}

// maxCachedCgroups bounds HostCache's cgroup ids.
const maxCachedCgroups = 4096

// maxCachedNodes bounds the node paths HostCache keeps stats of.
const maxCachedNodes = 1024

// statNode is c.statNode(root, p) as found at most maxAge ago; root is
// cudatrace's own.
func (h *HostCache) statNode(c *collector, root, p string) Node {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	n := h.stats[p]
	if n == nil || !h.fresh(n.at, now) {
		f := c.fork()
		n = &hostNode{at: now, node: f.statNode(root, p), unavailable: f.snap.Unavailable}
		if len(h.stats) >= maxCachedNodes {
			clear(h.stats)
		}
		h.stats[p] = n
	}
	c.snap.Unavailable = append(c.snap.Unavailable, n.unavailable...)
	return n.node
}

// hostInfo fills c's snapshot's kernel, architecture and node name as
// read at most maxAge ago.
func (h *HostCache) hostInfo(c *collector) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if i := h.host; i == nil || !h.fresh(i.at, now) {
		f := c.fork()
		f.readHostInfo()
		h.host = &hostInfo{at: now, host: f.snap.Host, unavailable: f.snap.Unavailable}
	}
	c.snap.Host = h.host.host
	c.snap.Unavailable = append(c.snap.Unavailable, h.host.unavailable...)
}

// parsed is the last text parsed and what it gave, shared read-only.
type parsed[T any] struct {
	mu   sync.Mutex
	text string
	v    []T
	set  bool
}

func (p *parsed[T]) of(text string, parse func(string) []T) []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.set || text != p.text {
		p.text, p.v, p.set = text, parse(text), true
	}
	return p.v
}

// parseMounts is ParseMountinfo(text), the same slice for the same text.
func (h *HostCache) parseMounts(text string) []Mount { return h.mounts.of(text, ParseMountinfo) }

// parseSelfMounts is parseSelfMounts(text), the same slice for the same
// text.
func (h *HostCache) parseSelfMounts(text string) []selfMount {
	return h.selfMounts.of(text, parseSelfMounts)
}
