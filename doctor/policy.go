package doctor

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cudatrace/cudatrace/cgroupdev"
	"github.com/cudatrace/cudatrace/nvdev"
)

// checkPolicy: the emulated device cgroup verdict for every node CUDA
// opens, read-write, for the subject's cgroup (v2 programs, all of them,
// inherited ones included; and the v1 devices.list where that controller
// is mounted).
func checkPolicy(h *host) []Check {
	v1, v2 := h.b.CgroupV1, h.b.CgroupV2
	if v1 == nil && v2 == nil {
		return Check{ID: "device-policy", Category: CatPolicy, Status: Skip, Subject: h.sv.Subject,
			Summary: "the subject's cgroups could not be read"}.one()
	}
	var rules []cgroupdev.V1Rule
	v1Err := ""
	if v1 != nil {
		switch {
		case v1.ReadError != "":
			v1Err = "devices.list of " + v1.Path + ": " + v1.ReadError
		default:
			var err error
			if rules, err = cgroupdev.ParseV1List(strings.Join(v1.DevicesList, "\n")); err != nil {
				v1Err = err.Error()
			}
		}
	}
	v2Err := ""
	if v2 != nil && v2.QueryError != "" {
		v2Err = "device programs of " + v2.Path + ": " + v2.QueryError
	}
	var out []Check
	for _, nd := range h.needs() {
		if !nd.known {
			continue
		}
		out = append(out, policyFor(h, nd, rules, v1Err, v2Err))
	}
	if len(out) == 0 {
		return Check{ID: "device-policy", Category: CatPolicy, Status: Skip, Subject: h.sv.Subject,
			Summary: "no NVIDIA device numbers known (driver not registered), nothing to judge"}.one()
	}
	return out
}

func policyFor(h *host, nd need, rules []cgroupdev.V1Rule, v1Err, v2Err string) Check {
	v1, v2 := h.b.CgroupV1, h.b.CgroupV2
	c := Check{ID: "device-policy", Category: CatPolicy, Status: Pass, Subject: nd.path}
	// libcuda opens its nodes O_RDWR, and the MIG capability nodes O_RDONLY.
	req := cgroupdev.Request{Type: cgroupdev.TypeChar, Major: nd.major, Minor: nd.minor, Access: cgroupdev.AccessRead | cgroupdev.AccessWrite}
	if nvdev.IsCapsNode(nd.path) {
		req.Access = cgroupdev.AccessRead
	}
	want := fmt.Sprintf("%s %s", devText(nd.major, nd.minor), req.Access)
	// The fix names the current major of the node's driver: allowing a
	// stale node's number would not help once the node is recreated.
	fixMajor, fixName := nd.major, nvdev.DriverName(h.b, nd.major, nd.minor)
	if nd.regOK {
		fixMajor, fixName = nd.regMajor, nd.driver
	}
	var said, skipped []string
	if v2 != nil {
		switch {
		case v2Err != "":
			skipped = append(skipped, v2Err)
		case len(v2.Programs) == 0:
			said = append(said, "no cgroup v2 device program applies")
		default:
			allowed, deniedBy, errs := cgroupdev.EvaluateV2(nvdev.EmulatedPrograms(v2.Programs), req)
			switch {
			case len(deniedBy) > 0:
				c.Status = Fail
				var where []string
				for _, id := range deniedBy {
					for _, p := range v2.Programs {
						if p.ID == id {
							where = append(where, fmt.Sprintf("%d (attached to %s)", id, p.AttachedTo))
						}
					}
				}
				c.Summary = fmt.Sprintf("denied: cgroup v2 device %s %s refuses %s (open fails with EPERM)",
					pluralWord(len(deniedBy), "program", "programs"), strings.Join(where, ", "), want)
				c.Detail = append(c.Detail, fmt.Sprintf("The cgroup %s runs %s; the kernel refuses the open if any one denies it.", v2.Path, plural(len(v2.Programs), "device program", "device programs")))
				c.Detail = append(c.Detail, staleAllows(h, v2.Programs, deniedBy, fixMajor)...)
				c.Fix = nvdev.DeviceAllowFix(h.b, "v2", fixMajor, fixName, nd.path, deniedAt(v2.Programs, deniedBy, v2.Path))
			case len(errs) > 0:
				for _, e := range errs {
					skipped = append(skipped, e.Error())
				}
			case allowed:
				said = append(said, fmt.Sprintf("allowed by %s", plural(len(v2.Programs), "cgroup v2 device program", "cgroup v2 device programs")))
			}
		}
	}
	if v1 != nil && c.Status != Fail {
		switch {
		case v1Err != "":
			skipped = append(skipped, v1Err)
		default:
			allowed, rule := cgroupdev.EvaluateV1(rules, req)
			if !allowed {
				c.Status = Fail
				by := "no rule allows it"
				if rule != nil {
					by = "rule `" + rule.String() + "`"
				}
				c.Summary = fmt.Sprintf("denied: cgroup v1 devices.list of %s refuses %s (%s; open fails with EPERM)", v1.Path, want, by)
				c.Fix = nvdev.DeviceAllowFix(h.b, "v1", fixMajor, fixName, nd.path, v1.Path)
			} else {
				said = append(said, "allowed by devices.list of "+v1.Path)
				if rule != nil && rule.Type == cgroupdev.TypeAll && rule.Major < 0 && v1.Path != "/" {
					// The kernel lists an allow-by-default cgroup as
					// "a *:* rwm" alone and hides its deny exceptions.
					c.Detail = append(c.Detail, "devices.list of "+v1.Path+" reads `a *:* rwm` (allow by default); cgroup v1 does not show the deny exceptions such a cgroup may hold, so a `devices.deny` written to it cannot be seen here.")
				}
			}
		}
	}
	if c.Status == Fail {
		c.Detail = append(c.Detail, skipped...)
		return c
	}
	if len(skipped) > 0 {
		c.Status = Skip
		c.Summary = fmt.Sprintf("%s not judged: %s", want, skipped[0])
		c.Detail = append(said, skipped[1:]...)
		return c
	}
	c.Summary = want + ": " + strings.Join(said, "; ")
	return c
}

func deniedAt(progs []cgroupProgram, ids []uint32, fallback string) string {
	for _, p := range progs {
		if len(ids) > 0 && p.ID == ids[0] && p.AttachedTo != "" {
			return p.AttachedTo
		}
	}
	return fallback
}

func pluralWord(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// staleAllows names the majors a denying program allows that no driver
// holds now: rules written for an earlier dynamic major (the uvm major
// before a kernel or driver upgrade).
func staleAllows(h *host, progs []cgroupProgram, deniedBy []uint32, want uint32) []string {
	var out []string
	for _, p := range progs {
		if !slices.Contains(deniedBy, p.ID) {
			continue
		}
		rules, _, ok := cgroupdev.DecodeRules(p.Instructions)
		if !ok {
			continue
		}
		for _, r := range rules {
			if r.Allow && r.Major >= 0 && uint32(r.Major) != want && !h.registered(uint32(r.Major)) {
				out = append(out, fmt.Sprintf("Program %d allows `%s`, a major no driver holds now: a rule written for an earlier major (dynamic majors move after a driver or kernel upgrade).", p.ID, strings.TrimPrefix(r.String(), "allow ")))
			}
		}
	}
	return out
}
