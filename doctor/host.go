package doctor

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
)

// host is a survey with the lookups every check needs.
type host struct {
	sv   *snapshot.Survey
	b    *snapshot.Snapshot
	user snapshot.Creds
	// root is true when the permission checks are for a user that
	// bypasses file modes (uid 0 with CAP_DAC_OVERRIDE, not in a user
	// namespace).
	root bool
}

func newHost(sv *snapshot.Survey) *host {
	h := &host{sv: sv, b: sv.Base}
	p := h.b.Process
	if sv.User != nil {
		h.user = *sv.User
		h.root = sv.User.UID == 0 && !p.UserNS
	} else {
		h.user = snapshot.Creds{Name: p.User, UID: p.UID, GID: p.GID, Groups: p.Groups}
		h.root = p.UID == 0 && p.CapEff&(1<<1) != 0 && !p.UserNS
	}
	return h
}

func (h *host) userText() string {
	u := h.user
	name := u.Name
	if name == "" {
		name = "uid " + strconv.FormatUint(uint64(u.UID), 10)
	}
	return fmt.Sprintf("%s (%d:%d)", name, u.UID, u.GID)
}

// need is a node CUDA opens, with the device number the kernel will check.
type need struct {
	path     string
	major    uint32
	minor    uint32
	known    bool // major:minor known (from the node, else its driver)
	required bool // CUDA cannot start without it
	node     *snapshot.Node
	driver   string // registered /proc/devices name of its driver
	regMajor uint32
	regOK    bool
}

// needs lists the nodes CUDA opens: nvidiactl, nvidia-uvm, one nvidiaN per
// GPU (or per node present), and the MIG capability nodes present. The
// device number is the node's own when it exists (that is what an open is
// checked against), else the one its driver implies.
func (h *host) needs() []need {
	var paths []string
	required := map[string]bool{}
	add := func(p string, req bool) {
		if _, dup := required[p]; !dup {
			paths = append(paths, p)
		}
		required[p] = required[p] || req
	}
	_, ctlOK := h.b.MajorOf("nvidiactl")
	driverThere := ctlOK || h.b.MajorName(nvfile.Major) != "" || h.b.Driver.Loaded
	if driverThere {
		add("/dev/nvidiactl", true)
		add("/dev/nvidia-uvm", true)
	}
	gpuNodes := 0
	for _, n := range h.b.Nodes {
		if nvdev.IsGPUNode(n.Path) && n.Exists {
			gpuNodes++
		}
	}
	inContainer := h.b.Container.Runtime != ""
	for _, g := range h.sv.GPUs {
		// In a container the driver lists every host GPU but only the
		// ones given to it have nodes.
		if g.Minor >= 0 && !g.Excluded && (!inContainer || gpuNodes == 0) {
			add(fmt.Sprintf("/dev/nvidia%d", g.Minor), gpuNodes == 0)
		}
	}
	for _, n := range h.b.Nodes {
		if nvdev.IsGPUNode(n.Path) || (n.Exists && nvdev.IsCapsNode(n.Path) && n.Type != "d") {
			add(n.Path, false)
		} else if n.Path == "/dev/nvidia-uvm-tools" && n.Exists {
			add(n.Path, false)
		}
	}
	if driverThere && gpuNodes == 0 && len(h.sv.GPUs) == 0 {
		add("/dev/nvidia0", true)
	}
	sort.SliceStable(paths, func(i, j int) bool { return nodeOrder(paths[i]) < nodeOrder(paths[j]) })
	var out []need
	for _, p := range paths {
		nd := need{path: p, required: required[p], node: h.b.Node(p)}
		nd.regMajor, nd.driver, nd.regOK = nvdev.RegisteredMajor(h.b, p)
		if n := nd.node; n != nil && n.Exists && (n.Type == "c" || n.Type == "b") {
			nd.major, nd.minor, nd.known = n.Major, n.Minor, true
		} else if x, ok := nvdev.ExpectedNode(p); ok && nd.regOK && x.MinorKnown {
			nd.major, nd.minor, nd.known = nd.regMajor, x.Minor, true
		}
		out = append(out, nd)
	}
	return out
}

// nodeOrder sorts nodes as a reader expects: control, uvm, GPUs by
// number, then the rest by name.
func nodeOrder(p string) string {
	switch {
	case p == "/dev/nvidiactl":
		return "0"
	case p == "/dev/nvidia-uvm":
		return "1"
	case p == "/dev/nvidia-uvm-tools":
		return "2"
	case nvdev.IsGPUNode(p):
		n, _ := strconv.Atoi(strings.TrimPrefix(p, "/dev/nvidia"))
		return fmt.Sprintf("3%06d", n)
	}
	return "4" + p
}

// uvmMajor is nvidia-uvm's registered major.
func (h *host) uvmMajor() (uint32, bool) { return h.b.MajorOf("nvidia-uvm") }

// registered reports whether any driver holds major now.
func (h *host) registered(major uint32) bool { return h.b.MajorName(major) != "" }

// nvidiaMajors are the majors NVIDIA drivers hold now, by name.
func (h *host) nvidiaMajors() map[uint32]string {
	out := map[uint32]string{}
	for _, d := range h.b.ProcDevices {
		if strings.HasPrefix(d.Name, "nvidia") {
			if _, ok := out[d.Major]; !ok {
				out[d.Major] = d.Name
			}
		}
	}
	return out
}

// hostNode is the node at p as this survey sees it (nil when not
// collected).
func (h *host) hostNode(p string) *snapshot.Node { return h.b.Node(p) }

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

func devText(major, minor uint32) string { return fmt.Sprintf("c %d:%d", major, minor) }

type cgroupProgram = snapshot.DeviceProgram
