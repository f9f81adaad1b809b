package analysis

import (
	"fmt"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// inbandFailure is an NVIDIA ioctl that returned 0 with a failure in its
// params; expected says why libcuda does not care ("" when it might).
type inbandFailure struct {
	i        int
	r        nvdev.Inband
	expected string
}

// learnedInband are in-band failures libcuda itself causes on a healthy
// start, learned from the healthy H200 runs in testdata/gpu (driver
// 580.159.04; analysis/inband_test.go TestHealthyRecordingsInbandExpected
// checks every recording against this list). Those recordings keep the
// first 8 calls of each ioctl site and show no in-band failure among them,
// so the list is empty until a recording shows one; add it here with the
// recording it came from.
var learnedInband = []struct {
	escape, object string
	status         uint32
	why            string
}{}

// inbandExpected says why the in-band failure at i is part of a normal start.
func (a *analyzer) inbandExpected(i int, r nvdev.Inband) string {
	for _, l := range learnedInband {
		if l.escape == r.Escape && l.object == r.Object && l.status == r.Status {
			return l.why
		}
	}
	if r.Escape == "NV_ESC_RM_CONTROL" && r.Status == nvErrNotSupported {
		// RM answers NOT_SUPPORTED for a control the GPU or driver lacks;
		// libcuda asks for optional features and goes on without them.
		return "a feature probe: the driver does not support this control here"
	}
	e := &a.ev[i]
	ver, have := a.driverVersion()
	for j := i + 1; j < len(a.ev); j++ {
		o := &a.ev[j]
		if o.PID != e.PID || o.Kind != tracer.KindIoctl || o.Request != e.Request {
			continue
		}
		if or, ok := nvdev.DecodeInband(o, ver, have); ok && or.Object == r.Object && or.Known && !or.Failed {
			return fmt.Sprintf("retried successfully at +%s", o.Time)
		}
	}
	return ""
}

// nvErrNotSupported is NV_ERR_NOT_SUPPORTED (nvstatuscodes.h).
const nvErrNotSupported = 0x56

func (a *analyzer) driverVersion() (nvdev.DriverVersion, bool) {
	return nvdev.DriverVersionOf(a.s.Host.DriverVersion, a.ev)
}

// inbandFailures lists the trace's in-band failures in order.
func (a *analyzer) inbandFailures() []inbandFailure {
	ver, have := a.driverVersion()
	var out []inbandFailure
	for i := range a.ev {
		e := &a.ev[i]
		if e.FD < 0 {
			continue
		}
		if r, ok := nvdev.DecodeInband(e, ver, have); ok && r.Failed {
			out = append(out, inbandFailure{i, r, a.inbandExpected(i, r)})
		}
	}
	return out
}

// cudaOutcomeKnown is whether the trace holds any CUDA/NVML return.
func (a *analyzer) cudaOutcomeKnown() bool {
	return a.cuda.Status == "failed" || a.cuda.Status == "ok"
}

// inbandSuspect is the prime suspect when CUDA failed and no call failed
// outright: the last unexpected in-band failure before CUDA's return.
// pinpoint calls it last; -1 when there is none.
func (a *analyzer) inbandSuspect() int {
	if a.cudaIdx < 0 {
		return -1
	}
	suspect := -1
	for _, f := range a.inbandFailures() {
		if a.beforeCUDAFailure(f.i) && f.expected == "" {
			suspect = f.i
		}
	}
	return suspect
}

// inbandText is the in-band result of the call at e, "" when none failed.
func (a *analyzer) inbandText(e *tracer.Event) string {
	ver, have := a.driverVersion()
	r, ok := nvdev.DecodeInband(e, ver, have)
	if !ok {
		return ""
	}
	return r.StatusText()
}

// explainInband explains the failing call when it failed in-band.
func (a *analyzer) explainInband(i int) {
	ver, have := a.driverVersion()
	e := &a.ev[i]
	r, ok := nvdev.DecodeInband(e, ver, have)
	if !ok || !r.Failed {
		return
	}
	id, summary := inbandFinding(r)
	d := []string{nvdev.CallLine(e) + ", " + r.StatusText()}
	d = append(d, fmt.Sprintf("The ioctl itself succeeded; the driver put %s in the params' %s field.", nvdev.StatusName(r.Status), r.Field))
	if r.Assumed {
		d = append(d, "The driver version is unknown, so the newest params layout was assumed.")
	}
	events := []uint64{e.Seq}
	if c := a.cudaFailed(); c != nil {
		d = append(d, fmt.Sprintf("%s then returned %s at +%s; this was the last unexpected in-band failure before it.", c.Func, nvdev.ReturnName(c.Func, c.Ret)+fmt.Sprintf(" (%d)", c.Ret), c.Time))
		events = append(events, c.Seq)
	}
	var expected []string
	for _, f := range a.inbandFailures() {
		if f.expected != "" && f.i < i {
			expected = append(expected, fmt.Sprintf("`%s` %s (%s)", nvdev.FormatCall(&a.ev[f.i]), f.r.StatusText(), f.expected))
		}
	}
	if len(expected) > 0 {
		d = append(d, "Expected in-band failures before it, not the cause: "+strings.Join(expected, "; ")+".")
	}
	d = append(d, a.kernelLines(func(string) bool { return true })...)
	a.add(Finding{ID: id, Severity: SeverityError, Summary: summary, Detail: d,
		Fix: inbandFix(r, a.s.Host.DriverVersion), Events: events},
		fmt.Sprintf("the driver answered %s", nvdev.StatusShort(r.Status)))
}

// checkInband reports in-band failures that did not become the failing
// call: when CUDA's outcome is unknown the last unexpected one is a
// warning; when CUDA succeeded they are listed as survived.
func (a *analyzer) checkInband() {
	if a.fail >= 0 && a.ev[a.fail].Kind == tracer.KindIoctl && !a.ev[a.fail].Failed() {
		return // explained as the failing call
	}
	var unexpected []inbandFailure
	for _, f := range a.inbandFailures() {
		if f.expected == "" {
			unexpected = append(unexpected, f)
		}
	}
	if len(unexpected) == 0 {
		return
	}
	last := unexpected[len(unexpected)-1]
	e := &a.ev[last.i]
	id, summary := inbandFinding(last.r)
	d := []string{nvdev.CallLine(e) + ", " + last.r.StatusText()}
	sev := SeverityWarning
	switch {
	case a.cudaFailed() != nil:
		d = append(d, "CUDA failed, but before this call; it is not the cause.")
		sev = SeverityInfo
	case a.cudaOutcomeKnown():
		d = append(d, "CUDA succeeded, so libcuda got past it.")
		sev = SeverityInfo
	default:
		d = append(d, "What CUDA returned is unknown; if it failed, this is the prime suspect (the last unexpected in-band failure).")
	}
	if len(unexpected) > 1 {
		d = append(d, fmt.Sprintf("%d other in-band failures before it.", len(unexpected)-1))
	}
	events := make([]uint64, 0, len(unexpected))
	for _, f := range unexpected {
		events = append(events, a.ev[f.i].Seq)
	}
	a.add(Finding{ID: id, Severity: sev, Summary: summary, Detail: d,
		Fix: inbandFix(last.r, a.s.Host.DriverVersion), Events: events}, "")
}

func inbandFinding(r nvdev.Inband) (id, summary string) {
	id = "rm-status-failed"
	if strings.HasPrefix(r.Escape, "UVM_") {
		id = "uvm-status-failed"
	}
	what := r.Escape
	if r.Object != "" {
		what += " " + r.Object
	}
	return id, fmt.Sprintf("the driver refused %s: %s", what, nvdev.StatusShort(r.Status))
}

// inbandFix is the remedy for the common NV_STATUS codes of a driver
// request; the rest point at the kernel log, where RM says why.
func inbandFix(r nvdev.Inband, driverVersion string) string {
	name := nvdev.StatusShort(r.Status)
	switch name {
	case "NV_ERR_INSUFFICIENT_PERMISSIONS":
		return "The driver refuses this request to this user: check NVreg_RmProfilingAdminOnly and the MIG/capability nodes (/dev/nvidia-caps) the process may open, or run it with the access the request needs."
	case "NV_ERR_INVALID_CLASS", "NV_ERR_NOT_SUPPORTED", "NV_ERR_INVALID_COMMAND":
		return fmt.Sprintf("The kernel module (%s) does not offer this class or command: the user-space driver (libcuda) is probably from another driver version, or the GPU is too old or too new for this driver. Install matching driver libraries and kernel module.", orUnknown(driverVersion))
	case "NV_ERR_NO_MEMORY", "NV_ERR_INSUFFICIENT_RESOURCES":
		return "The driver ran out of memory or resources: check the GPU's memory use (`nvidia-smi`), the host's free memory and the memory cgroup's limit (RLIMIT_MEMLOCK is not the cause: " + nvdev.PinnedMemoryUncharged + ")."
	case "NV_ERR_GPU_IS_LOST", "NV_ERR_GPU_IN_FULLCHIP_RESET", "NV_ERR_RESET_REQUIRED":
		return "The GPU needs a reset: `nvidia-smi -r`, or reboot the host; check the kernel log for Xid messages."
	case "NV_ERR_STATE_IN_USE", "NV_ERR_IN_USE":
		return "Another process holds the GPU: check the compute mode (`nvidia-smi -q | grep 'Compute Mode'`; Exclusive_Process allows one process) and `nvidia-smi` for its users."
	}
	return "Read the NVRM lines of the kernel log (`dmesg | grep -E 'NVRM|Xid'`) from the time of the call: RM logs why it refused the request."
}

// inbandVerdict is the headline when no call failed outright but the
// driver refused one in band: "nothing failed" would not be true.
func (a *analyzer) inbandVerdict() string {
	for _, f := range a.out {
		if (f.ID == "rm-status-failed" || f.ID == "uvm-status-failed") && f.Severity == SeverityWarning {
			return "No NVIDIA device call failed outright, but " + f.Summary + " (see " + f.ID + ")."
		}
	}
	return ""
}
