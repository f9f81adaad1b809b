package snapshot

import (
	"regexp"
	"strings"
)

var (
	hex64RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
	podUIDRE = regexp.MustCompile(`pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})`)
	// "<prefix>-<id>.scope" leaves made by the systemd cgroup driver.
	scopeIDRE = regexp.MustCompile(`^(docker|libpod|cri-containerd|crio)-([0-9a-f]{12,64})(?:\.scope)?$`)
)

// DetectContainer says where a process runs from its /proc/PID/cgroup text
// and, when known, the environment of its PID namespace's init (whose
// "container=" variable LXC, podman and systemd-nspawn set). Cgroup paths
// win over the variable because they name the container; the variable helps
// when a cgroup namespace hides the path ("0::/"). For nested runtimes the
// innermost one is reported, keeping a Proxmox CTID from an outer LXC.
func DetectContainer(cgroupText string, initEnv map[string]string) Container {
	lines := parseCgroupFile(cgroupText)
	// The unified line names the process's cgroup most reliably; v1
	// hierarchies (name=systemd first) are a fallback for v1-only hosts.
	var paths []string
	for _, l := range lines {
		if l.Hierarchy == "0" && len(l.Controllers) == 0 {
			paths = append([]string{l.Path}, paths...)
		} else {
			paths = append(paths, l.Path)
		}
	}
	var c Container
	for _, p := range paths {
		if c = containerFromPath(p); c.Runtime != "" {
			break
		}
	}
	if env := initEnv["container"]; env != "" && (c.Runtime == "" || c.Runtime == "systemd") {
		c.Runtime = env
	}
	return c
}

// containerFromPath reads one cgroup path from the outermost component in.
func containerFromPath(path string) Container {
	var c Container
	parts := strings.Split(strings.Trim(path, "/"), "/")
	kube := false
	for i, p := range parts {
		switch {
		case strings.HasPrefix(p, "kubepods"):
			kube = true
			c.Runtime = "kubernetes"
			if m := podUIDRE.FindStringSubmatch(p); m != nil {
				c.PodUID = strings.ReplaceAll(m[1], "_", "-")
			}
		case kube && podUIDRE.MatchString(p):
			c.PodUID = strings.ReplaceAll(podUIDRE.FindStringSubmatch(p)[1], "_", "-")
		case p == "lxc" && i+1 < len(parts):
			c = lxcContainer(parts[i+1], c)
		case strings.HasPrefix(p, "lxc.payload."):
			c = lxcContainer(strings.TrimPrefix(p, "lxc.payload."), c)
		case p == "docker" && i+1 < len(parts) && hex64RE.MatchString(parts[i+1]):
			c.Runtime, c.ID = "docker", parts[i+1]
		case scopeIDRE.MatchString(p):
			m := scopeIDRE.FindStringSubmatch(p)
			c.ID = m[2]
			if !kube {
				c.Runtime = map[string]string{"docker": "docker", "libpod": "podman", "cri-containerd": "containerd", "crio": "cri-o"}[m[1]]
			}
		case kube && hex64RE.MatchString(p):
			c.ID = p // cgroupfs driver: kubepods/<qos>/pod<uid>/<container id>
		}
		if strings.HasSuffix(p, ".service") || strings.HasSuffix(p, ".scope") {
			c.Unit = p
		}
	}
	if c.Runtime == "" && c.Unit != "" {
		c.Runtime = "systemd"
	}
	return c
}

// lxcContainer records an LXC container name; Proxmox names containers by
// their numeric CTID.
func lxcContainer(name string, c Container) Container {
	c.Runtime, c.ID = "lxc", name
	if name != "" && strings.Trim(name, "0123456789") == "" {
		c.ProxmoxCTID = name
	}
	return c
}

// runtimeComms are the process names of container runtimes that stay the
// parent of the container's first process (a foreground `runc run`, crun,
// podman's conmon, LXC's monitor), so a process whose cgroup names no
// container is placed by its ancestors.
var runtimeComms = map[string]string{
	"runc":            "runc",
	"crun":            "crun",
	"conmon":          "podman",
	"containerd-shim": "containerd",
	"lxc-start":       "lxc",
	"lxc-execute":     "lxc",
}

// RuntimeFromAncestors names the runtime among a process's ancestors'
// comms, nearest first, or "".
func RuntimeFromAncestors(comms []string) string {
	for _, c := range comms {
		if r, ok := runtimeComms[c]; ok {
			return r
		}
		if strings.HasPrefix(c, "containerd-shim") {
			return "containerd"
		}
	}
	return ""
}

// lxcManager says whose config holds LXC container id, from what the host
// shows: "proxmox" when /etc/pve/lxc/ID.conf exists (or /etc/pve, the
// Proxmox cluster filesystem), "lxc" when LXC's own config dir holds it,
// the name is not a Proxmox CTID, or LXC is installed and Proxmox is not;
// "" when nothing says. exists reports whether a host path exists and is
// a directory (for paths ending in "/") or a file.
func lxcManager(id string, exists func(string) bool) (manager, config string) {
	if id == "" {
		return "", ""
	}
	if p := "/etc/pve/lxc/" + id + ".conf"; exists(p) {
		return "proxmox", p
	}
	if p := "/var/lib/lxc/" + id + "/config"; exists(p) {
		return "lxc", p
	}
	switch {
	case exists("/etc/pve/"):
		return "proxmox", ""
	case strings.Trim(id, "0123456789") != "", exists("/var/lib/lxc/"):
		return "lxc", ""
	}
	return "", ""
}

// placeLXC fills in an LXC container's manager and drops the Proxmox CTID
// guessed from a numeric name when the host is plain LXC.
func placeLXC(c *Container, exists func(string) bool) {
	if c.Runtime != "lxc" {
		return
	}
	c.Manager, c.Config = lxcManager(c.ID, exists)
	if c.Manager == "lxc" {
		c.ProxmoxCTID = ""
	}
}
