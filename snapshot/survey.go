package snapshot

import "errors"

// ErrNoSuchUser is the user lookup's answer for a name or UID that the
// subject's /etc/passwd does not have.
var ErrNoSuchUser = errors.New("no such user in /etc/passwd")

// Survey is what `cudatrace doctor` reads: the host as a CUDA process about
// to start would meet it, with no target running. It is plain data, so the
// checks (package doctor) are pure functions over it and can be tested on
// synthetic hosts; SurveyHost (survey_collect.go) fills it from the system.
type Survey struct {
	// Base is the ordinary snapshot of the subject process (this process,
	// or --pid): nodes, /proc/devices, mounts, credentials, cgroups and
	// their device programs, driver state, the kernel log since boot and
	// the CUDA-steering environment.
	Base *Snapshot `json:"snapshot"`
	// Subject says whose device policy Base's cgroups are: "this process",
	// "process 42", "cgroup /lxc/101".
	Subject string `json:"subject"`
	// User is who will run CUDA (-u); nil means Base.Process.
	User *Creds `json:"user,omitempty"`
	// UserError says why User could not be resolved: ErrNoSuchUser, or
	// what kept the subject's /etc/passwd from being read.
	UserError error `json:"-"`

	// CgroupDevicesV1 is true when the devices controller is mounted as a
	// cgroup v1 hierarchy (v1 or hybrid host), so LXC applies
	// lxc.cgroup.devices.* and ignores lxc.cgroup2.devices.*; false on a
	// unified (v2-only) host, where it is the other way round.
	CgroupDevicesV1 bool `json:"cgroup_devices_v1"`

	// CharDir is whether /dev/char exists; CharLinks has one entry per
	// NVIDIA character node in Base.Nodes.
	CharDir   bool       `json:"char_dir"`
	CharLinks []CharLink `json:"char_links,omitempty"`
	// SystemdRuntimes are runc-based container runtimes found under
	// systemd ("docker", "containerd", "cri-o"): where a missing /dev/char
	// link costs running containers their GPUs at the next daemon-reload.
	SystemdRuntimes []string `json:"systemd_runtimes,omitempty"`

	// DriverState is the driver's own state (also in every trace's
	// snapshot); its fields are inlined in the JSON.
	DriverState
	// Libraries are the driver's user-space libraries as the dynamic
	// loader would find them for the subject.
	Libraries []Library `json:"libraries,omitempty"`
	// MemfdProbed is set when memfd_create(2) was tried in this process
	// (only when the subject is this process), and MemfdError is its error
	// ("" when it worked): CUDA needs it, and a seccomp filter may refuse it.
	MemfdProbed bool   `json:"memfd_probed"`
	MemfdError  string `json:"memfd_error,omitempty"`

	Containers []ContainerConfig `json:"containers,omitempty"`
	CDISpecs   []CDISpec         `json:"cdi_specs,omitempty"`

	// Unavailable lists what the survey (beyond Base) could not read.
	Unavailable []string `json:"unavailable,omitempty"`
}

// Creds is a user's identity for permission checks.
type Creds struct {
	Name   string   `json:"name,omitempty"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// CharLink is /dev/char/MAJ:MIN for one NVIDIA node.
type CharLink struct {
	Node   string `json:"node"` // /dev/nvidia0
	Link   string `json:"link"` // /dev/char/195:0
	Exists bool   `json:"exists"`
	Dest   string `json:"dest,omitempty"` // readlink, as written
	// Resolves is true when the link leads to a character device with the
	// node's major:minor.
	Resolves bool `json:"resolves"`
}

// GPUInfo is one /proc/driver/nvidia/gpus/BUS/information.
type GPUInfo struct {
	Bus      string `json:"bus"`
	Model    string `json:"model,omitempty"`
	Minor    int    `json:"minor"` // "Device Minor"; -1 when absent
	Excluded bool   `json:"excluded,omitempty"`
}

// Library is one driver library as the loader resolves it.
type Library struct {
	Name string `json:"name"` // libcuda.so.1
	// Path is where the loader finds it first ("" when nowhere); Via says
	// how: "LD_LIBRARY_PATH", "ld.so.cache" or "default path".
	Path string `json:"path,omitempty"`
	Via  string `json:"via,omitempty"`
	// Resolved is the file Path's symlinks lead to, and Version the driver
	// version it is: from its banner, else its name (libcuda.so.580.159.04);
	// VersionFrom says which ("contents", "name").
	Resolved    string `json:"resolved,omitempty"`
	Version     string `json:"version,omitempty"`
	VersionFrom string `json:"version_from,omitempty"`
	// Stub: the CUDA toolkit's link-time stub, by its contents.
	Stub bool `json:"stub,omitempty"`
	// Shadowed are further copies the loader would have taken had Path
	// not been first.
	Shadowed []string `json:"shadowed,omitempty"`
}

// Firmware is the GSP firmware search for the running driver version.
type Firmware struct {
	Version  string   `json:"version,omitempty"`
	Searched []string `json:"searched,omitempty"` // directories tried
	Files    []string `json:"files,omitempty"`    // gsp_*.bin found
}

// SMIGPU is one nvidia-smi --query-gpu row.
type SMIGPU struct {
	Bus         string `json:"bus"`
	Persistence string `json:"persistence"`  // Enabled / Disabled
	ComputeMode string `json:"compute_mode"` // Default, Exclusive_Process, Prohibited
}

// ContainerConfig is one container manager's config file on this host.
type ContainerConfig struct {
	// Manager is "proxmox" (/etc/pve/lxc/ID.conf, "key: value"), "lxc"
	// (/var/lib/lxc/NAME/config, "key = value"), or "incus"/"lxd" (the
	// LXC config they generated for a running container).
	Manager string       `json:"manager"`
	Name    string       `json:"name"`
	Path    string       `json:"path"`
	Lines   []ConfigLine `json:"lines,omitempty"` // the device and mount lines only
	// Truncated is set when the file was longer than the survey reads.
	Truncated bool   `json:"truncated,omitempty"`
	ReadError string `json:"read_error,omitempty"`
}

// ConfigLine is one "key: value" or "key = value" line of a container config.
type ConfigLine struct {
	N     int    `json:"n"` // 1-based line number
	Key   string `json:"key"`
	Value string `json:"value"`
	Raw   string `json:"raw"`
}

// CDISpec is one Container Device Interface spec file.
type CDISpec struct {
	Path       string    `json:"path"`
	Kind       string    `json:"kind,omitempty"`
	Version    string    `json:"cdi_version,omitempty"`
	Nodes      []CDINode `json:"nodes,omitempty"`
	ParseError string    `json:"parse_error,omitempty"`
}

// CDINode is one deviceNodes entry, from a device's containerEdits or the
// spec's own.
type CDINode struct {
	Device   string `json:"device,omitempty"` // "" for spec-wide edits
	Path     string `json:"path"`
	HostPath string `json:"host_path,omitempty"`
	Type     string `json:"type,omitempty"`
	Major    int64  `json:"major"`
	Minor    int64  `json:"minor"`
	// Host is the host node the entry stands for (HostPath, else Path)
	// as it is now.
	Host Node `json:"host"`
}
