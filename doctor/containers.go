package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cudatrace/cudatrace/cgroupdev"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
)

// lxcRule is one device allow/deny line of a container config.
type lxcRule struct {
	line  snapshot.ConfigLine
	allow bool
	v2    bool // lxc.cgroup2.* (else the v1 key)
	all   bool // the bare "a": every device
	rule  cgroupdev.V1Rule
}

// containerView is what one config gives its container.
type containerView struct {
	cc     snapshot.ContainerConfig
	rules  []lxcRule
	mounts []mountEntry
	devs   []snapshot.ConfigLine // Proxmox devN passthrough lines
	bad    []string              // lines that do not parse
}

type mountEntry struct {
	line     snapshot.ConfigLine
	source   string
	optional bool
}

func parseContainer(cc snapshot.ContainerConfig) containerView {
	v := containerView{cc: cc}
	for _, l := range cc.Lines {
		switch {
		case strings.HasSuffix(l.Key, ".devices.allow") || strings.HasSuffix(l.Key, ".devices.deny"):
			r := lxcRule{line: l, allow: strings.HasSuffix(l.Key, ".allow"), v2: strings.HasPrefix(l.Key, "lxc.cgroup2.")}
			if strings.TrimSpace(l.Value) == "a" {
				r.all = true
			} else if rs, err := cgroupdev.ParseV1List(l.Value); err == nil && len(rs) == 1 {
				r.rule = rs[0]
			} else {
				v.bad = append(v.bad, fmt.Sprintf("line %d: `%s` is not a device rule", l.N, l.Raw))
				continue
			}
			v.rules = append(v.rules, r)
		case l.Key == "lxc.mount.entry":
			f := strings.Fields(l.Value)
			if len(f) >= 4 && (strings.HasPrefix(f[0], "/dev/nvidia") || f[0] == "/dev") {
				v.mounts = append(v.mounts, mountEntry{line: l, source: f[0], optional: strings.Contains(","+f[3]+",", ",optional,")})
			}
		case strings.HasPrefix(l.Key, "dev"):
			if p, _, _ := strings.Cut(l.Value, ","); nvfile.IsNode(p) {
				v.devs = append(v.devs, l)
			}
		}
	}
	return v
}

// allows applies the config's rules with the key the host honours, in
// order, the last matching line deciding (LXC writes them to the cgroup in
// order; "deny a" resets to deny-all). Nothing matching means denied:
// Proxmox and LXC's common config start from "deny a".
func (v containerView) allows(req cgroupdev.Request, v2 bool) (bool, *lxcRule) {
	allowed := false
	var by *lxcRule
	for i := range v.rules {
		r := &v.rules[i]
		if r.v2 != v2 {
			continue
		}
		if r.all || r.rule.Matches(req) {
			allowed, by = r.allow, r
		}
	}
	return allowed, by
}

// usesGPU: the config passes NVIDIA nodes or allows an NVIDIA major (or
// one no driver holds, which is how a stale uvm major looks).
func (v containerView) usesGPU(h *host) bool {
	if len(v.mounts) > 0 || len(v.devs) > 0 {
		return true
	}
	nv := h.nvidiaMajors()
	for _, r := range v.rules {
		if r.allow && !r.all && r.rule.Major >= 0 {
			if _, ok := nv[uint32(r.rule.Major)]; ok || !h.registered(uint32(r.rule.Major)) {
				return true
			}
		}
	}
	return false
}

func (v containerView) sep() string { return snapshot.ConfigSeparator(v.cc.Manager) }

func (v containerView) subject() string {
	return fmt.Sprintf("%s container %s", v.cc.Manager, v.cc.Name)
}

// checkContainers: every container config on this host against the
// current majors and nodes.
func checkContainers(h *host) []Check {
	var out []Check
	for _, cc := range h.sv.Containers {
		out = append(out, checkContainer(h, cc))
	}
	return out
}

type majorNeed struct {
	major uint32
	minor int64 // -1: any
	name  string
	node  string
}

func checkContainer(h *host, cc snapshot.ContainerConfig) Check {
	v := parseContainer(cc)
	c := Check{ID: "container", Category: CatContainers, Status: Pass, Subject: v.subject()}
	if cc.ReadError != "" {
		c.Status = Skip
		c.Summary = cc.Path + ": " + cc.ReadError
		return c
	}
	if !v.usesGPU(h) {
		c.Summary = "no NVIDIA devices configured (" + cc.Path + ")"
		return c
	}
	generated := cc.Manager == "incus" || cc.Manager == "lxd"
	useV2 := !h.sv.CgroupDevicesV1
	key, other := "lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"
	if !useV2 {
		key, other = other, key
	}
	var problems, fixes []string
	problem := func(st Status, p, fix string) {
		c.Status = worst(c.Status, st)
		problems = append(problems, p)
		if fix != "" {
			fixes = append(fixes, fix)
		}
	}
	for _, b := range v.bad {
		problem(Warn, cc.Path+" "+b, "")
	}
	if cc.Truncated {
		problem(Warn, cc.Path+" is longer than the doctor reads; later lines were not checked", "")
	}

	// Proxmox devN entries create the node and its rule from the host's
	// node when the container starts: nothing to keep in step.
	passed := map[string]bool{}
	for _, d := range v.devs {
		p, _, _ := strings.Cut(d.Value, ",")
		passed[p] = true
		if hn := h.hostNode(p); hn != nil && !hn.Exists {
			problem(Fail, fmt.Sprintf("line %d `%s`: %s does not exist on the host, so the container cannot start", d.N, d.Raw, p), nvdev.NodeCreateFix(p))
		}
	}

	var needs []majorNeed
	needs = append(needs, majorNeed{nvfile.Major, -1, "nvidia", "/dev/nvidiactl"})
	if m, ok := h.uvmMajor(); ok {
		needs = append(needs, majorNeed{m, -1, "nvidia-uvm", "/dev/nvidia-uvm"})
	}
	if m, ok := h.b.MajorOf("nvidia-caps"); ok && mountsCaps(v) {
		needs = append(needs, majorNeed{m, -1, "nvidia-caps", "/dev/nvidia-caps"})
	}
	// Each stale line is one need's: with both dynamic majors moved, two
	// lines to change, each with its own replacement.
	usedStale := map[int]bool{}
	for _, n := range needs {
		if passed[n.node] || (n.name == "nvidia" && passedGPU(passed)) {
			continue
		}
		req := cgroupdev.Request{Type: cgroupdev.TypeChar, Major: n.major, Minor: 0, Access: cgroupdev.AccessRead | cgroupdev.AccessWrite}
		if n.name == "nvidia" {
			req.Minor = 255
		}
		ok, _ := v.allows(req, useV2)
		if ok {
			continue
		}
		want := fmt.Sprintf("%s%sc %d:* rwm", key, v.sep(), n.major)
		if generated {
			problem(Fail, fmt.Sprintf("its generated config (%s) does not allow %s (major %d)", cc.Path, n.name, n.major),
				fmt.Sprintf("The rules were generated when the container started, before the driver took its current majors: restart it (`%s restart %s`), and pass GPUs with `%s config device add %s gpu gpu` rather than raw lxc.* keys.", cc.Manager, cc.Name, cc.Manager, cc.Name))
			continue
		}
		if okOther, r := v.allows(req, !useV2); okOther && r != nil {
			problem(Fail, fmt.Sprintf("line %d `%s` allows %s with %s, which this cgroup %s host ignores", r.line.N, r.line.Raw, n.name, other, hostCgroupWord(useV2)),
				fmt.Sprintf("In %s change line %d `%s` to `%s`, then restart the container.", cc.Path, r.line.N, r.line.Raw, want))
			continue
		}
		if s := staleLine(h, v, useV2, usedStale); s != nil {
			problem(Fail, fmt.Sprintf("line %d `%s` allows major %d, which no driver holds now; %s is major %d", s.line.N, s.line.Raw, s.rule.Major, n.name, n.major),
				fmt.Sprintf("In %s change line %d `%s` to `%s`, then restart the container (%s).", cc.Path, s.line.N, s.line.Raw, want, restartCmd(cc))+dynamicNote(n))
			continue
		}
		problem(Fail, fmt.Sprintf("no line allows %s (c %d:*): opens of %s fail with EPERM", n.name, n.major, n.node),
			fmt.Sprintf("Add `%s` to %s, then restart the container (%s).", want, cc.Path, restartCmd(cc))+dynamicNote(n))
	}

	// Bind mounts of host nodes: a source missing on the host is skipped
	// silently with "optional" and stops the container without it.
	mounted := map[string]bool{}
	for _, m := range v.mounts {
		mounted[m.source] = true
		if m.source == "/dev" {
			continue
		}
		hn := h.hostNode(m.source)
		if hn == nil || hn.Exists {
			continue
		}
		if m.optional {
			problem(Fail, fmt.Sprintf("line %d `%s`: %s does not exist on the host, and with `optional` LXC skips it without a word", m.line.N, m.line.Raw, m.source), nvdev.NodeCreateFix(m.source))
		} else {
			problem(Fail, fmt.Sprintf("line %d `%s`: %s does not exist on the host, so the container fails to start", m.line.N, m.line.Raw, m.source), nvdev.NodeCreateFix(m.source))
		}
	}
	if len(v.mounts) > 0 && !mounted["/dev"] && !generated {
		for _, p := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm"} {
			if !mounted[p] && !passed[p] {
				problem(Fail, fmt.Sprintf("no lxc.mount.entry for %s: CUDA cannot start in the container without it", p),
					fmt.Sprintf("Add `lxc.mount.entry%s%s %s none bind,optional,create=file` to %s, then restart the container.", v.sep(), p, strings.TrimPrefix(p, "/"), cc.Path))
			}
		}
		if !hasGPUMount(mounted) && !passedGPU(passed) {
			problem(Fail, "no lxc.mount.entry for any /dev/nvidiaN: the container sees no GPU",
				fmt.Sprintf("Add `lxc.mount.entry%s/dev/nvidia0 dev/nvidia0 none bind,optional,create=file` (one per GPU) to %s.", v.sep(), cc.Path))
		}
	}
	if len(problems) == 0 {
		c.Summary = fmt.Sprintf("allows the current NVIDIA majors (%s) and passes existing nodes (%s)", majorList(needs), cc.Path)
		return c
	}
	c.Summary = problems[0]
	c.Detail = append(c.Detail, problems[1:]...)
	c.Detail = append(c.Detail, fmt.Sprintf("Current majors (/proc/devices): %s. This host applies %s lines.", majorList(needs), key))
	c.Fix = strings.Join(dedupe(fixes), "\n")
	return c
}

// staleLine is the config's first allow line for a major no driver holds
// now, with the key the host honours, not yet in used (by line number): the
// line to change. It marks the line used.
func staleLine(h *host, v containerView, v2 bool, used map[int]bool) *lxcRule {
	for i := range v.rules {
		r := &v.rules[i]
		if r.allow && !r.all && r.v2 == v2 && r.rule.Major >= 0 && !h.registered(uint32(r.rule.Major)) && !used[r.line.N] {
			used[r.line.N] = true
			return r
		}
	}
	return nil
}

func hostCgroupWord(v2 bool) string {
	if v2 {
		return "v2"
	}
	return "v1"
}

func restartCmd(cc snapshot.ContainerConfig) string {
	if cc.Manager == "proxmox" {
		return "`pct reboot " + cc.Name + "`"
	}
	return "`lxc-stop -n " + cc.Name + " && lxc-start -n " + cc.Name + "`"
}

func dynamicNote(n majorNeed) string {
	if note := nvdev.DynamicMajorNote(n.major, n.name); note != "" {
		return "\n" + note
	}
	return ""
}

func mountsCaps(v containerView) bool {
	for _, m := range v.mounts {
		if strings.HasPrefix(m.source, "/dev/nvidia-caps") {
			return true
		}
	}
	return false
}

func hasGPUMount(mounted map[string]bool) bool {
	for p := range mounted {
		if nvdev.IsGPUNode(p) {
			return true
		}
	}
	return false
}

func passedGPU(passed map[string]bool) bool { return hasGPUMount(passed) }

func majorList(needs []majorNeed) string {
	var s []string
	for _, n := range needs {
		s = append(s, fmt.Sprintf("%s %d", n.name, n.major))
	}
	return strings.Join(s, ", ")
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// checkCDI: every CDI spec's recorded device numbers against the nodes as
// they are now (a stale spec is nvidia-container-toolkit #1934).
func checkCDI(h *host) []Check {
	var out []Check
	for _, s := range h.sv.CDISpecs {
		c := Check{ID: "cdi-spec", Category: CatContainers, Status: Pass, Subject: "CDI " + s.Path}
		regen := fmt.Sprintf("Regenerate it: `nvidia-ctk cdi generate --output=%s`", s.Path)
		if strings.HasPrefix(s.Path, "/var/run/cdi/") || strings.HasPrefix(s.Path, "/run/cdi/") {
			regen += " (or `systemctl restart nvidia-cdi-refresh.service`, which writes /var/run/cdi/nvidia.yaml)"
		}
		regen += "; containers made from the old spec keep its numbers until they are recreated."
		if s.ParseError != "" {
			c.Status = Warn
			c.Summary = "does not parse, so runtimes refuse its devices: " + s.ParseError
			c.Fix = regen
			out = append(out, c)
			continue
		}
		var stale, missing []string
		checked := 0
		for _, n := range s.Nodes {
			host := n.HostPath
			if host == "" {
				host = n.Path
			}
			if n.Type != "" && n.Type != "c" {
				continue
			}
			if !n.Host.Exists {
				missing = append(missing, fmt.Sprintf("%s: %s does not exist on the host", deviceLabel(n), host))
				continue
			}
			if n.Major == 0 && n.Minor == 0 {
				continue // the runtime stats the host node when it creates the container
			}
			checked++
			if n.Host.Type == "c" && (uint32(n.Major) != n.Host.Major || uint32(n.Minor) != n.Host.Minor) {
				stale = append(stale, fmt.Sprintf("%s: records %s for %s, which is %s now", deviceLabel(n), devText(uint32(n.Major), uint32(n.Minor)), host, devText(n.Host.Major, n.Host.Minor)))
			}
		}
		switch {
		case len(stale) > 0:
			c.Status = Fail
			c.Summary = fmt.Sprintf("stale: %s; containers get nodes the driver does not answer on (cuInit 999)", stale[0])
			c.Detail = append(stale[1:], missing...)
			c.Fix = regen
		case len(missing) > 0:
			c.Status = Warn
			c.Summary = missing[0]
			c.Detail = missing[1:]
			c.Fix = regen
		default:
			c.Summary = fmt.Sprintf("%s %s (%s), %s checked against the host: current", orDash(s.Kind), s.Version, plural(len(deviceNames(s)), "device", "devices"), plural(checked, "recorded device number", "recorded device numbers"))
		}
		out = append(out, c)
	}
	return out
}

func deviceLabel(n snapshot.CDINode) string {
	if n.Device == "" {
		return n.Path
	}
	return n.Device + " " + n.Path
}

func deviceNames(s snapshot.CDISpec) []string {
	seen := map[string]bool{}
	for _, n := range s.Nodes {
		if n.Device != "" {
			seen[n.Device] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
