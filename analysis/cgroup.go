package analysis

import (
	"fmt"
	"sort"
	"strings"

	"github.com/cudatrace/cudatrace/cgroupdev"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// cgState is what one cgroup mechanism says about a request.
type cgState int

const (
	cgUnknown cgState = iota // could not be read
	cgAbsent                 // not in use for this target
	cgAllow
	cgDeny
)

type v2Eval struct {
	state    cgState
	deniedBy []snapshot.DeviceProgram
	allowers []snapshot.DeviceProgram
	errs     []error
	why      string // when unknown
}

func evalV2(s *snapshot.Snapshot, req cgroupdev.Request) v2Eval {
	cg := s.CgroupV2
	if cg == nil {
		return v2Eval{state: cgUnknown, why: "no cgroup v2 information was collected"}
	}
	if cg.QueryError != "" {
		return v2Eval{state: cgUnknown, why: "the cgroup v2 device programs could not be read: " + cg.QueryError}
	}
	if len(cg.Programs) == 0 {
		if cg.ReadAfterExit {
			return v2Eval{state: cgUnknown, why: afterExitAllows}
		}
		return v2Eval{state: cgAbsent}
	}
	_, denied, errs := cgroupdev.EvaluateV2(nvdev.EmulatedPrograms(cg.Programs), req)
	r := v2Eval{errs: errs}
	deny := map[uint32]bool{}
	for _, id := range denied {
		deny[id] = true
	}
	for _, p := range cg.Programs {
		if deny[p.ID] {
			r.deniedBy = append(r.deniedBy, p)
		} else {
			r.allowers = append(r.allowers, p)
		}
	}
	switch {
	case len(denied) > 0:
		r.state = cgDeny
	case len(errs) > 0:
		r.state, r.why = cgUnknown, "a device program could not be emulated"
	case cg.ReadAfterExit:
		r.state, r.why = cgUnknown, afterExitAllows
	default:
		r.state = cgAllow
	}
	return r
}

// afterExitAllows: a policy read after the process exited can prove a
// denial (its programs deny the access) but not an allowance: whatever set
// up the job's cgroup may have removed its programs or rules with the job.
const afterExitAllows = "the cgroup's device policy, read after the process had exited, allows this access, but whatever set up the job may have removed its rules with it"

type v1Eval struct {
	state cgState
	rules []cgroupdev.V1Rule
	why   string
}

// evalV1 judges req against devices.list. A missing v1 section counts as
// absent when v2 was read (a pure v2 host), unknown otherwise.
func evalV1(s *snapshot.Snapshot, req cgroupdev.Request) v1Eval {
	cg := s.CgroupV1
	if cg == nil {
		if s.CgroupV2 != nil && s.CgroupV2.QueryError == "" {
			return v1Eval{state: cgAbsent}
		}
		return v1Eval{state: cgUnknown, why: "no cgroup v1 information was collected"}
	}
	if cg.ReadError != "" {
		return v1Eval{state: cgUnknown, why: "devices.list could not be read: " + cg.ReadError}
	}
	rules, err := cgroupdev.ParseV1List(strings.Join(cg.DevicesList, "\n"))
	if err != nil {
		return v1Eval{state: cgUnknown, why: "devices.list could not be parsed: " + err.Error()}
	}
	ok, by := cgroupdev.EvaluateV1(rules, req)
	if ok && by != nil && by.Type == cgroupdev.TypeAll && by.Major < 0 && by.Minor < 0 {
		// A default-allow cgroup lists only "a *:* rwm"; the kernel hides
		// its deny exceptions, so the list cannot clear the access.
		return v1Eval{state: cgUnknown, rules: rules, why: "devices.list shows `a *:* rwm`: the v1 devices cgroup allows by default, and the kernel does not list the deny rules written to its devices.deny"}
	}
	if ok && cg.ReadAfterExit {
		return v1Eval{state: cgUnknown, rules: rules, why: afterExitAllows}
	}
	if ok {
		return v1Eval{state: cgAllow, rules: rules}
	}
	return v1Eval{state: cgDeny, rules: rules}
}

// requestFor builds the cgroup request the kernel made for e on node f.
func requestFor(e *tracer.Event, f nodeFacts) (cgroupdev.Request, bool) {
	d, ok := f.requestDev()
	if !ok {
		return cgroupdev.Request{}, false
	}
	req := cgroupdev.Request{Type: cgroupdev.TypeChar, Major: d.Major, Minor: d.Minor}
	if f.nodeType() == "b" {
		req.Type = cgroupdev.TypeBlock
	}
	switch e.Kind {
	case tracer.KindMknod:
		req.Access = cgroupdev.AccessMknod
	default:
		req.Access = cgroupdev.AccessForOpen(e.Flags)
	}
	return req, true
}

func reqString(r cgroupdev.Request) string {
	return fmt.Sprintf("%s %d:%d %s", r.Type, r.Major, r.Minor, r.Access)
}

// fixMajor is the major a rule must name: the driver's CURRENT registered
// major (decimal), falling back to the node's own.
func fixMajor(f nodeFacts, req cgroupdev.Request) (uint32, string) {
	name := f.regName
	if f.regOK {
		return f.regMajor, name
	}
	if f.driver != "" {
		name = f.driver
	}
	return req.Major, name
}

// programRules phrases what a program allows, from its decoded rules.
func programRules(rules []cgroupdev.Rule, defAllow, ok bool) string {
	if !ok {
		return "Its program shape was not recognised; its emulated verdict is deny."
	}
	var allows []string
	denies := 0
	for _, r := range rules {
		if r.Allow {
			allows = append(allows, fmt.Sprintf("%s %s:%s %s", r.Type, num(r.Major), num(r.Minor), r.Access))
		} else {
			denies++
		}
	}
	if !defAllow && denies == 0 {
		if len(allows) == 0 {
			return "That program denies every device."
		}
		return "That program allows " + joinAnd(allows) + " only."
	}
	return "That program " + cgroupdev.SummariseRules(rules, defAllow) + "."
}

func num(n int64) string {
	if n < 0 {
		return "*"
	}
	return fmt.Sprint(n)
}

func joinAnd(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

func progName(p snapshot.DeviceProgram) string {
	s := fmt.Sprintf("id %d", p.ID)
	if p.Name != "" {
		s += " (" + p.Name + ")"
	}
	if p.AttachedTo != "" {
		s += " attached to " + p.AttachedTo
	}
	return s
}

// containersOwn: cgroup path at is the container's (its name holds the
// container's ID, Proxmox CT ID, unit or pod UID), whose runtime's
// settings write its program.
func containersOwn(c snapshot.Container, at string) bool {
	for _, id := range []string{c.ID, c.ProxmoxCTID, c.Unit, c.PodUID, strings.ReplaceAll(c.PodUID, "-", "_")} {
		if id != "" && strings.Contains(at, id) {
			return true
		}
	}
	return false
}

// The cgroup attach flags (uapi bpf.h).
const (
	bpfAllowOverride = 1
	bpfAllowMulti    = 2
)

// heldAbove: where the first denying program attached above both the
// target's cgroup and its container's sits (a slice, a parent the runtime
// does not manage), and what that means for a rule; "" when none is. The
// fix goes where that program is. The container's own cgroup is the one
// its ID names (LXC attaches to /lxc/ID and runs the payload in
// /lxc/ID/ns). replaceable: it was attached with BPF_F_ALLOW_OVERRIDE, so
// a program attached below replaces it.
func heldAbove(s *snapshot.Snapshot, denied []snapshot.DeviceProgram) (text, at string, replaceable bool) {
	for _, p := range denied {
		at = p.AttachedTo
		if at == "" || at == s.CgroupV2.Path || containersOwn(s.Container, at) {
			continue
		}
		q := p
		q.AttachedTo = ""
		head := fmt.Sprintf("The denying program %s is inherited from %s, above the target's cgroup %s", progName(q), at, s.CgroupV2.Path)
		show := "`bpftool cgroup show /sys/fs/cgroup" + at + "`"
		switch {
		case p.AttachFlags&bpfAllowOverride != 0:
			return head + " (BPF_F_ALLOW_OVERRIDE): a device program attached to the target's own cgroup replaces it, so that program must allow the device and everything else the job needs. Or change the program on " + at + ".", at, true
		case p.AttachFlags&bpfAllowMulti != 0:
			return head + " (BPF_F_ALLOW_MULTI): every program from there down must allow, so a rule in the target's own cgroup or its container's config cannot lift it. Change the program on " + at + " (" + show + " names it), or run the job outside that cgroup.", at, false
		default:
			return head + " (no override flag): no device program can be attached below it, so only the program on " + at + " can change (" + show + ").", at, false
		}
	}
	return "", "", false
}

// staleAllowMajors lists majors that allow rules name but that no driver
// owns now: rules written for an earlier dynamic major.
func staleAllowMajors(s *snapshot.Snapshot, majors []int64, want uint32) []uint32 {
	if len(s.ProcDevices) == 0 {
		return nil
	}
	seen := map[uint32]bool{}
	var out []uint32
	for _, m := range majors {
		if m < 0 || uint32(m) == want || seen[uint32(m)] {
			continue
		}
		seen[uint32(m)] = true
		if s.MajorName(uint32(m)) == "" {
			out = append(out, uint32(m))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func majorsList(ms []uint32) string {
	xs := make([]string, len(ms))
	for i, m := range ms {
		xs[i] = fmt.Sprint(m)
	}
	return joinAnd(xs)
}

// explainEPERM explains an EPERM open (or mknod) of an NVIDIA node: a device
// cgroup denial (v2 programs, v1 list, or inferred), an excluded GPU, or
// something else.
func (a *analyzer) explainEPERM(i int) {
	e := &a.ev[i]
	f := factsFor(a.s, a.ev, i, e, e.Path)
	head := a.headLines(i, f)
	req, reqOK := requestFor(e, f)
	events := a.failEvents()

	var v2 v2Eval
	var v1 v1Eval
	if reqOK {
		v2 = evalV2(a.s, req)
		v1 = evalV1(a.s, req)
	} else {
		v2 = v2Eval{state: cgUnknown, why: "the node's device number is unknown, so the cgroup rules cannot be applied"}
		v1 = v1Eval{state: cgUnknown, why: v2.why}
	}
	major, name := fixMajor(f, req)
	denied := false

	if v2.state == cgDeny {
		denied = true
		a.cgroup2Denied(e, f, req, v2, head, events, major, name)
	}
	if v1.state == cgDeny {
		denied = true
		a.cgroup1Denied(e, f, req, v1, head, events, major, name)
	}
	excluded := a.s.Driver.Params["ExcludedGpus"]
	if !denied && nvdev.IsGPUNode(e.Path) && strings.TrimSpace(excluded) != "" && strings.Trim(excluded, `" `) != "" {
		a.gpuExcluded(e, f, head, events, excluded, v2.state != cgUnknown && v1.state != cgUnknown)
		return
	}
	if j, _ := SeccompFilterBefore(a.ev, i); !denied && j >= 0 && (v2.state == cgUnknown || v1.state == cgUnknown) {
		// The trace saw a filter installed over this call (a log of a
		// supervisor: seccomp(..., NEW_LISTENER)), and no device policy
		// is known to deny it: the filter is the evidence.
		a.seccompDenied(i, false)
		return
	}
	if !denied && (v2.state == cgUnknown || v1.state == cgUnknown) {
		denied = true
		a.cgroupInferred(e, f, req, reqOK, v2, v1, head, events, major, name)
	}
	if !denied {
		d := append(head, "The device cgroup allows this access ("+cgSummary(v2.state, v1.state)+"), so EPERM comes from elsewhere.")
		d = append(d, a.epermAlternatives(e)...)
		a.add(Finding{ID: "eperm-unexplained", Severity: SeverityError,
			Summary:  fmt.Sprintf("%s was refused with EPERM although the device cgroup allows it", e.Path),
			Detail:   d,
			Fix:      "Check the kernel log and the seccomp/LSM profile of the target; run with `--security-opt seccomp=unconfined` (Docker) once to confirm.",
			Inferred: true, Events: events}, "refused with EPERM, not by the device cgroup")
		return
	}
	if reqOK && req.Major == nvfile.Major {
		a.daemonReload(e, f, req, v2, v1, events)
	}
}

func cgSummary(v2, v1 cgState) string {
	var parts []string
	if v2 == cgAllow {
		parts = append(parts, "cgroup v2 programs allow it")
	} else if v2 == cgAbsent {
		parts = append(parts, "no cgroup v2 device program is attached")
	}
	if v1 == cgAllow {
		parts = append(parts, "devices.list allows it")
	} else if v1 == cgAbsent {
		parts = append(parts, "no cgroup v1 devices controller")
	}
	return strings.Join(parts, "; ")
}

func (a *analyzer) epermAlternatives(e *tracer.Event) []string {
	var d []string
	p := a.s.Process
	if nvdev.IsGPUNode(e.Path) {
		ex := a.s.Driver.Params["ExcludedGpus"]
		if ex == "" {
			ex = "not set"
		}
		d = append(d, fmt.Sprintf("The NVIDIA driver refuses opens of an excluded GPU with EPERM (NVreg_ExcludedGpus; ExcludedGpus in /proc/driver/nvidia/params: %s).", ex))
	}
	switch n, known := a.targetFilters(); {
	case known && n > 0:
		d = append(d, fmt.Sprintf("The target runs under %d seccomp filter(s) of its own (Seccomp: 2); a filter that answers open with EPERM looks the same.", n))
	case known && p.Seccomp == 2:
		d = append(d, "A seccomp filter answering open with EPERM would look the same, but the target's only filter is cudatrace's own (ptrace), which refuses nothing.")
	case known:
		d = append(d, fmt.Sprintf("A seccomp filter answering open with EPERM would look the same, but the target has none (Seccomp: %d).", p.Seccomp))
	default:
		d = append(d, "A seccomp filter answering open with EPERM would look the same.")
	}
	return d
}

func (a *analyzer) cgroup2Denied(e *tracer.Event, f nodeFacts, req cgroupdev.Request, v2 v2Eval, head []string, events []uint64, major uint32, name string) {
	d := append([]string{}, head...)
	var ids []string
	var allowMajors []int64
	for _, p := range v2.deniedBy {
		ids = append(ids, fmt.Sprint(p.ID))
		rules, defAllow, ok := cgroupdev.DecodeRules(p.Instructions)
		d = append(d, fmt.Sprintf("Denied by cgroup v2 device program %s. %s", progName(p), programRules(rules, defAllow, ok)))
		if ok {
			for _, r := range rules {
				if r.Allow && r.Type != cgroupdev.TypeBlock {
					allowMajors = append(allowMajors, r.Major)
				}
			}
		}
	}
	for _, p := range v2.allowers {
		d = append(d, fmt.Sprintf("Program %s allows it; the kernel needs every program to allow.", progName(p)))
	}
	for _, err := range v2.errs {
		d = append(d, "Could not emulate "+err.Error()+".")
	}
	d = append(d, fmt.Sprintf("The kernel checked %s for %s; the target's cgroup is %s, with %d effective device program(s).", reqString(req), e.Path, a.s.CgroupV2.Path, len(a.s.CgroupV2.Programs)))
	if a.s.CgroupV2.ReadAfterExit {
		d = append(d, afterExitNote("programs were queried on", a.s.CgroupV2.Path))
	}
	word, verb := "program", "denies"
	if len(ids) > 1 {
		word, verb = "programs", "deny"
	}
	sum := fmt.Sprintf("cgroup v2 device %s %s %s %s (%s)", word, strings.Join(ids, ", "), verb, reqString(req), e.Path)
	fix := nvdev.DeviceAllowFix(a.s, "v2", major, name, e.Path, a.s.CgroupV2.Path)
	if held, at, replaceable := heldAbove(a.s, v2.deniedBy); held != "" {
		if !replaceable {
			// The runtime's own settings act below the program: the rule
			// goes in the program on that cgroup.
			fix = nvdev.DeviceAllowFix(&snapshot.Snapshot{}, "v2", major, name, e.Path, at)
		}
		fix = held + "\n" + fix
	}
	a.add(Finding{ID: "cgroup2-denied", Severity: SeverityError, Summary: sum, Detail: d,
		Fix:    fix,
		Events: events}, fmt.Sprintf("denied by cgroup v2 device %s %s", word, strings.Join(ids, ", ")))

	if f.regOK && major != nvfile.Major {
		if stale := staleAllowMajors(a.s, allowMajors, major); len(stale) > 0 {
			a.add(Finding{ID: "cgroup2-stale-major", Severity: SeverityError,
				Summary: fmt.Sprintf("the rule allows %s, but %s is now %d", majorsList(stale), name, major),
				Detail: []string{
					fmt.Sprintf("The denying program allows char major %s, which no driver owns in /proc/devices now.", majorsList(stale)),
					fmt.Sprintf("%s is registered at major %d; %s is c %d:%d.", name, major, e.Path, req.Major, req.Minor),
					"The rule was most likely written for an earlier major: this major is dynamic and moves between kernels, boots and driver versions.",
				},
				Fix:    fmt.Sprintf("Replace c %s:* with c %d:* in the rule.\n", majorsList(stale), major) + nvdev.DeviceAllowFix(a.s, "v2", major, name, e.Path, a.s.CgroupV2.Path),
				Events: events}, "")
		}
	}
}

func (a *analyzer) cgroup1Denied(e *tracer.Event, f nodeFacts, req cgroupdev.Request, v1 v1Eval, head []string, events []uint64, major uint32, name string) {
	d := append([]string{}, head...)
	var lines, partial []string
	var majors []int64
	for _, r := range v1.rules {
		lines = append(lines, r.String())
		if r.Type != cgroupdev.TypeBlock {
			majors = append(majors, r.Major)
		}
		probe := req
		probe.Access = r.Access
		if r.Matches(probe) && req.Access&^r.Access != 0 {
			partial = append(partial, r.String())
		}
	}
	shown := lines
	if len(shown) > 16 {
		shown = append(append([]string{}, shown[:16]...), fmt.Sprintf("… %d more", len(lines)-16))
	}
	path := a.s.CgroupV1.Path
	d = append(d, fmt.Sprintf("The cgroup v1 devices.list of %s (%d rules: %s) has no rule that grants %s.", path, len(lines), strings.Join(shown, ", "), reqString(req)))
	if len(partial) > 0 {
		d = append(d, fmt.Sprintf("%s names this device but not the access %s.", joinAnd(partial), req.Access))
	}
	if a.s.CgroupV1.ReadAfterExit {
		d = append(d, afterExitNote("devices.list was read from", path))
	}
	if f.regOK && major != nvfile.Major {
		if stale := staleAllowMajors(a.s, majors, major); len(stale) > 0 {
			d = append(d, fmt.Sprintf("The list allows char major %s, which no driver owns now; %s is %d: the rule was written for an earlier major.", majorsList(stale), name, major))
		}
	}
	a.add(Finding{ID: "cgroup1-denied", Severity: SeverityError,
		Summary: fmt.Sprintf("the cgroup v1 devices list of %s does not allow %s (%s)", path, reqString(req), e.Path),
		Detail:  d,
		Fix:     nvdev.DeviceAllowFix(a.s, "v1", major, name, e.Path, path),
		Events:  events}, "denied by the cgroup v1 devices list of "+path)
}

// afterExitNote says that a cgroup's policy was read after the process
// had gone: from the cgroup it was in, not through the process.
func afterExitNote(what, path string) string {
	return fmt.Sprintf("The process had exited before its snapshot: the %s the cgroup it was in (%s, as read while it ran) after its exit; a rule changed in between would not show.", what, path)
}

func (a *analyzer) cgroupInferred(e *tracer.Event, f nodeFacts, req cgroupdev.Request, reqOK bool, v2 v2Eval, v1 v1Eval, head []string, events []uint64, major uint32, name string) {
	d := append([]string{}, head...)
	for _, w := range []string{v2.why, v1.why} {
		if w != "" {
			d = append(d, strings.ToUpper(w[:1])+w[1:]+".")
		}
	}
	if v2.state == cgAllow {
		d = append(d, "The readable cgroup v2 programs allow it.")
	}
	if v1.state == cgAllow {
		d = append(d, "The readable cgroup v1 devices.list allows it.")
	}
	d = append(d, "EPERM from opening a device node is what a device-cgroup denial returns (the kernel checks nodev and permissions first, and those give EACCES), so the verdict is inferred from the errno.")
	d = append(d, a.epermAlternatives(e)...)
	v := ""
	path := ""
	if a.s.CgroupV2 != nil {
		v, path = "v2", a.s.CgroupV2.Path
	} else if a.s.CgroupV1 != nil {
		v, path = "v1", a.s.CgroupV1.Path
	}
	if !reqOK {
		major, name = 0, ""
	}
	fix := ""
	if major != 0 {
		fix = nvdev.DeviceAllowFix(a.s, v, major, name, e.Path, path) + "\n"
	}
	fix += "To confirm, run cudatrace where the device programs can be read (on the host, or with CAP_SYS_ADMIN and CAP_BPF)."
	sum := fmt.Sprintf("%s is probably denied by the device cgroup (its rules could not be read)", e.Path)
	a.add(Finding{ID: "cgroup-denied-inferred", Severity: SeverityError, Summary: sum, Detail: d, Fix: fix,
		Inferred: true, Events: events}, "probably denied by the device cgroup (rules unreadable)")
}

func (a *analyzer) gpuExcluded(e *tracer.Event, f nodeFacts, head []string, events []uint64, excluded string, cgroupsKnown bool) {
	d := append([]string{}, head...)
	d = append(d, fmt.Sprintf("The driver parameter ExcludedGpus is set (%s in /proc/driver/nvidia/params); the driver refuses opens of an excluded GPU with EPERM (\"open() not permitted for excluded GPU\").", excluded))
	logged := false
	for _, l := range a.s.KernelLog {
		if strings.Contains(l.Text, "excluded GPU") {
			d = append(d, "Kernel log: "+l.Text)
			logged = true
		}
	}
	if cgroupsKnown {
		d = append(d, "The device cgroup allows this access, so it is not a cgroup denial.")
	}
	a.add(Finding{ID: "gpu-excluded", Severity: SeverityError,
		Summary:  fmt.Sprintf("%s belongs to a GPU excluded by NVreg_ExcludedGpus", e.Path),
		Detail:   d,
		Fix:      "Remove the GPU from NVreg_ExcludedGpus (in /etc/modprobe.d/*.conf or the kernel command line) and reload the nvidia module, or use a GPU that is not excluded (CUDA_VISIBLE_DEVICES).",
		Inferred: !logged && !cgroupsKnown, Events: events}, "the GPU is excluded by NVreg_ExcludedGpus")
}

// systemdCgroup is whether the target's cgroup path is one systemd made
// (the systemd cgroup driver names scopes and slices).
func systemdCgroup(s *snapshot.Snapshot) bool {
	var paths []string
	if s.CgroupV2 != nil {
		paths = append(paths, s.CgroupV2.Path)
	}
	if s.CgroupV1 != nil {
		paths = append(paths, s.CgroupV1.Path)
	}
	for _, p := range paths {
		if strings.Contains(p, ".scope") || strings.Contains(p, ".slice") {
			return true
		}
	}
	return false
}

// daemonReload adds the runc + systemd pattern: 195 denied while other
// NVIDIA majors are still allowed means the NVIDIA rules were dropped after
// the container started.
func (a *analyzer) daemonReload(e *tracer.Event, f nodeFacts, req cgroupdev.Request, v2 v2Eval, v1 v1Eval, events []uint64) {
	switch nvdev.RuntimeKind(a.s) {
	case "docker", "kubernetes", "systemd":
	default:
		return
	}
	var ev []string
	// Other NVIDIA majors the cgroup still allows.
	for _, d := range a.s.ProcDevices {
		if d.Major == nvfile.Major || !strings.HasPrefix(d.Name, "nvidia") {
			continue
		}
		other := cgroupdev.Request{Type: cgroupdev.TypeChar, Major: d.Major, Minor: 0, Access: cgroupdev.AccessRead | cgroupdev.AccessWrite}
		if v2.state == cgDeny {
			if ok, _, _ := cgroupdev.EvaluateV2(nvdev.EmulatedPrograms(a.s.CgroupV2.Programs), other); ok {
				ev = append(ev, fmt.Sprintf("the cgroup v2 programs still allow c %d:0 rw (%s)", d.Major, d.Name))
			}
		} else if v1.state == cgDeny {
			if ok, _ := cgroupdev.EvaluateV1(v1.rules, other); ok {
				ev = append(ev, fmt.Sprintf("devices.list still allows c %d:0 rw (%s)", d.Major, d.Name))
			}
		}
	}
	for _, r := range v1.rules {
		if (r.Type == cgroupdev.TypeChar || r.Type == cgroupdev.TypeAll) && r.Major == nvfile.Major && r.Access&(cgroupdev.AccessRead|cgroupdev.AccessWrite) == 0 {
			ev = append(ev, fmt.Sprintf("devices.list keeps only `%s` for major %d, as seen after such rewrites (kubernetes#77073)", r, nvfile.Major))
		}
	}
	for j := range a.ev {
		o := &a.ev[j]
		if o.Kind == tracer.KindOpen && !o.Failed() && o.Dev != nil && o.Dev.Major != nvfile.Major && isNvidiaNode(o.Path) {
			ev = append(ev, fmt.Sprintf("%s (c %d:%d) opened fine in this trace", o.Path, o.Dev.Major, o.Dev.Minor))
			break
		}
	}
	if len(ev) == 0 {
		return
	}
	systemd := systemdCgroup(a.s) || a.s.Container.Unit != ""
	d := []string{
		fmt.Sprintf("Major %d is denied but %s.", nvfile.Major, joinAnd(ev)),
		fmt.Sprintf("That is the footprint of a device cgroup rewritten after the container started without the NVIDIA rules: with runc and the systemd cgroup driver, `systemctl daemon-reload` re-applies the unit's DeviceAllow list, which cannot name the NVIDIA nodes because they have no /dev/char/%d:N links; `docker update` and the kubelet CPU manager (static policy) re-apply the container's cgroup the same way.", nvfile.Major),
	}
	if systemd {
		d = append(d, "The target's cgroup is a systemd scope/slice, so systemd manages its device program.")
	} else {
		d = append(d, "The snapshot does not show a systemd-managed cgroup, so this is inferred from the pattern.")
	}
	sev := SeverityError
	if !systemd {
		sev = SeverityWarning
	}
	a.add(Finding{ID: "ctl-denied-daemon-reload", Severity: sev,
		Summary:  "the NVIDIA device rules were dropped from a running container (daemon-reload / docker update / CPU manager pattern)",
		Detail:   d,
		Fix:      "Restart the container to restore access now. To stop it recurring, create the /dev/char links on the host at boot (`nvidia-ctk system create-dev-char-symlinks --create-all`, e.g. from a udev rule), or pass the nodes explicitly (`--device /dev/nvidiactl --device /dev/nvidia0 --device /dev/nvidia-uvm …`), or use the cgroupfs cgroup driver; under Kubernetes with the static CPU manager, use a device plugin that passes device specs.",
		Inferred: !systemd, Events: events}, "")
}
