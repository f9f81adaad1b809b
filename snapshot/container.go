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
