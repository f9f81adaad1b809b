// Package snapshot holds what cudatrace knows about the system around the
// target: device nodes, drivers, cgroups, mounts, credentials. The types are
// plain data so a snapshot can be stored in a report and analysed offline;
// Collect (collect.go) is the only code that reads the live system.
package snapshot

import (
	"sync"
	"time"
)

// Snapshot is the system as the target saw it, taken once at the first
// failure and once at exit (the later one is stored).
type Snapshot struct {
	TakenAt time.Time `json:"taken_at"`
	Host    Host      `json:"host"`
	// ProcDevices is /proc/devices' character section: major → driver.
	ProcDevices []DriverMajor `json:"proc_devices"`
	// Nodes are the /dev/nvidia* nodes (and /dev/char links) as the target
	// sees them through /proc/PID/root, plus nodes the trace touched.
	Nodes    []Node    `json:"nodes"`
	Process  Process   `json:"process"`
	Mounts   []Mount   `json:"mounts,omitempty"` // mounts that hold traced nodes (/dev and below)
	CgroupV1 *CgroupV1 `json:"cgroup_v1,omitempty"`
	CgroupV2 *CgroupV2 `json:"cgroup_v2,omitempty"`
	Driver   Driver    `json:"driver"`
	// DriverState is nil when the driver is not loaded (and in reports
	// from before it was collected).
	DriverState *DriverState      `json:"driver_state,omitempty"`
	KernelLog   []KernelLine      `json:"kernel_log,omitempty"`
	Container   Container         `json:"container"`
	Env         map[string]string `json:"env,omitempty"` // only the variables DiagnosticEnv keeps (never secrets)
	// Libraries are the libcuda and NVML files the traced processes opened,
	// read at the open.
	Libraries []LibraryFile `json:"libraries,omitempty"`
	// TargetLost: the target exited while its own view (nodes, mounts,
	// cgroups, credentials) was being read, so that part may be cudatrace's.
	TargetLost bool `json:"-"`
	// Unavailable lists what could not be collected and why, one line each
	// ("cgroup v2 programs: BPF_PROG_QUERY: operation not permitted").
	Unavailable []string `json:"unavailable,omitempty"`
}

type Host struct {
	Kernel        string `json:"kernel"` // uname -r
	Arch          string `json:"arch"`
	Hostname      string `json:"hostname,omitempty"`       // NodeName: in a pod, the node's
	DriverVersion string `json:"driver_version,omitempty"` // from /proc/driver/nvidia/version
	DriverLine    string `json:"driver_line,omitempty"`    // that file's first line
}

// DriverMajor is one line of /proc/devices.
type DriverMajor struct {
	Major uint32 `json:"major"`
	Name  string `json:"name"`
}

// Node is a device node as stat(2) sees it from the target's root.
type Node struct {
	Path   string `json:"path"`
	Exists bool   `json:"exists"`
	// Type is "c" or "b" for device nodes, "l" for a symlink, "f" for a
	// regular file, "d" for a directory, "" when missing.
	Type     string `json:"type,omitempty"`
	Major    uint32 `json:"major"`
	Minor    uint32 `json:"minor"`
	Mode     uint32 `json:"mode"` // permission bits only (0666)
	UID      uint32 `json:"uid"`
	GID      uint32 `json:"gid"`
	LinkDest string `json:"link_dest,omitempty"`
	// MountPoint is the mount the node lives on (key into Snapshot.Mounts).
	MountPoint string `json:"mount_point,omitempty"`
}

// Process is the target's identity and privileges.
type Process struct {
	PID        int      `json:"pid"`
	Comm       string   `json:"comm,omitempty"`
	UID        uint32   `json:"uid"`
	GID        uint32   `json:"gid"`
	Groups     []uint32 `json:"groups,omitempty"`
	User       string   `json:"user,omitempty"`
	CapEff     uint64   `json:"cap_eff"`
	CapBnd     uint64   `json:"cap_bnd"`
	NoNewPrivs bool     `json:"no_new_privs"`
	Seccomp    int      `json:"seccomp"` // 0 off, 1 strict, 2 filter
	// SeccompFilters is how many filters are installed, the tracer's own
	// included (the ptrace backend adds one).
	SeccompFilters int `json:"seccomp_filters,omitempty"`
	// NoFile is RLIMIT_NOFILE (soft, hard) and OpenFDs the fds in use, when read.
	NoFile  *[2]uint64 `json:"nofile,omitempty"`
	OpenFDs int        `json:"open_fds,omitempty"`
	// AS is RLIMIT_AS (ulimit -v) and MemLock RLIMIT_MEMLOCK, in bytes
	// (soft, hard; ^0 is unlimited), when read: CUDA reserves large
	// virtual ranges, and pins memory.
	AS      *[2]uint64 `json:"rlimit_as,omitempty"`
	MemLock *[2]uint64 `json:"rlimit_memlock,omitempty"`
	// LimitsAtExec: the limits above were read at the process's last exec
	// (or first event), not at the failure: it had exited by then.
	LimitsAtExec bool `json:"limits_at_exec,omitempty"`
	// UserNS is true when the target runs in a user namespace other than the
	// initial one (mknod and many device operations are then refused).
	UserNS bool `json:"user_ns"`
}

// CanMknod is whether the process holds CAP_MKNOD.
func (p Process) CanMknod() bool { return p.CapEff&(1<<27) != 0 && !p.UserNS }

// Mount is one line of /proc/PID/mountinfo that matters.
type Mount struct {
	MountPoint string   `json:"mount_point"`
	Root       string   `json:"root"` // the mount's root within its filesystem; != "/" for a bind mount of a subtree
	FSType     string   `json:"fstype"`
	Source     string   `json:"source"`
	Options    []string `json:"options"`
	NoDev      bool     `json:"nodev"`
	Bind       bool     `json:"bind"` // root is not the filesystem root
}

// CgroupV1 is the target's devices-controller cgroup.
type CgroupV1 struct {
	Path        string   `json:"path"`         // cgroup path, e.g. /docker/abc
	DevicesList []string `json:"devices_list"` // raw lines of devices.list
	ReadError   string   `json:"read_error,omitempty"`
	// ReadAfterExit: the target had exited; Path is the cgroup it was in
	// (read while it ran) and the list was read from that cgroup after.
	ReadAfterExit bool `json:"read_after_exit,omitempty"`
}

// CgroupV2 is the target's unified cgroup and the device programs that
// govern it (its own and inherited, i.e. the effective set).
type CgroupV2 struct {
	Path       string          `json:"path"`        // e.g. /lxc/200/ns
	MountPoint string          `json:"mount_point"` // where cgroup2 was (or got) mounted
	Programs   []DeviceProgram `json:"programs"`
	QueryError string          `json:"query_error,omitempty"`
	// ReadAfterExit: the target had exited; Path is the cgroup it was in
	// (read while it ran) and the programs were queried on it after.
	ReadAfterExit bool `json:"read_after_exit,omitempty"`
}

// DeviceProgram is one BPF_CGROUP_DEVICE program, with its instructions so
// that its verdict can be re-computed offline.
type DeviceProgram struct {
	ID           uint32 `json:"id"`
	Name         string `json:"name,omitempty"`
	Tag          string `json:"tag,omitempty"`
	AttachedTo   string `json:"attached_to"` // cgroup path the program is attached to
	AttachFlags  uint32 `json:"attach_flags,omitempty"`
	Instructions []byte `json:"instructions"` // raw struct bpf_insn array, host byte order
	// LinkID is set when the program is attached through a bpf_link.
	LinkID uint32 `json:"link_id,omitempty"`
}

// Driver is the NVIDIA kernel driver's state.
type Driver struct {
	Loaded    bool              `json:"loaded"`
	Params    map[string]string `json:"params,omitempty"`     // /proc/driver/nvidia/params
	UVMParams map[string]string `json:"uvm_params,omitempty"` // /sys/module/nvidia_uvm/parameters
	Modules   []string          `json:"modules,omitempty"`    // nvidia* lines of /proc/modules, names only
	GPUs      []string          `json:"gpus,omitempty"`       // /proc/driver/nvidia/gpus/* bus ids
}

// KernelLine is one kernel log line from the trace window, or an older
// error since boot.
type KernelLine struct {
	Seq  uint64 `json:"seq"`
	Text string `json:"text"`
	// T is when the kernel logged it on the trace's timeline (like
	// tracer.Event.Time: since the trace started; negative before it);
	// nil when unknown (reports from before it was recorded).
	T *time.Duration `json:"t_ns,omitempty"`
	// Older marks an error logged before the trace window: history, not
	// necessarily this run's cause.
	Older bool `json:"older,omitempty"`
}

// Container describes where the target runs.
type Container struct {
	Runtime     string `json:"runtime,omitempty"` // lxc, docker, podman, containerd, kubernetes, systemd, "" for none
	ID          string `json:"id,omitempty"`
	ProxmoxCTID string `json:"proxmox_ctid,omitempty"`
	// Manager is, for LXC, whose config holds the container: "proxmox"
	// (/etc/pve/lxc/ID.conf) or "lxc" (LXC's own, e.g. /var/lib/lxc/NAME/config);
	// "" when unknown (traced from inside, where the host is not visible).
	Manager string `json:"manager,omitempty"`
	// Config is the container's config file on the host, when found.
	Config string `json:"config,omitempty"`
	Unit   string `json:"unit,omitempty"` // systemd unit or scope
	PodUID string `json:"pod_uid,omitempty"`
}

// MajorName returns the /proc/devices name for a character major, or "".
func (s *Snapshot) MajorName(major uint32) string {
	for _, d := range s.ProcDevices {
		if d.Major == major {
			return d.Name
		}
	}
	return ""
}

// MajorOf returns the major registered under name, if any.
func (s *Snapshot) MajorOf(name string) (uint32, bool) {
	for _, d := range s.ProcDevices {
		if d.Name == name {
			return d.Major, true
		}
	}
	return 0, false
}

// Node returns the snapshot's (first) entry for path, or nil.
func (s *Snapshot) Node(path string) *Node {
	if len(s.Nodes) < nodeIndexFrom {
		for i := range s.Nodes {
			if s.Nodes[i].Path == path {
				return &s.Nodes[i]
			}
		}
		return nil
	}
	// A report's snapshot may hold 200k nodes, and the analysis asks for
	// each: an index, kept for the last Nodes slice asked about (its first
	// element and length identify it; entries' paths are not changed in
	// place), makes that linear, not quadratic.
	nodeIndex.Lock()
	defer nodeIndex.Unlock()
	if nodeIndex.first != &s.Nodes[0] || nodeIndex.n != len(s.Nodes) {
		idx := make(map[string]int, len(s.Nodes))
		for i := len(s.Nodes) - 1; i >= 0; i-- {
			idx[s.Nodes[i].Path] = i
		}
		nodeIndex.first, nodeIndex.n, nodeIndex.idx = &s.Nodes[0], len(s.Nodes), idx
	}
	if i, ok := nodeIndex.idx[path]; ok && s.Nodes[i].Path == path {
		return &s.Nodes[i]
	}
	return nil
}

// nodeIndexFrom is the node count from which Node uses an index.
const nodeIndexFrom = 256

var nodeIndex struct {
	sync.Mutex
	first *Node
	n     int
	idx   map[string]int
}
