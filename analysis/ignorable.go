package analysis

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/tracer"
)

// optionalNodes are NVIDIA nodes CUDA starts without: libcuda may try
// them, and a failure there is not why CUDA failed (the field's red
// herring: a missing nvidia-modeset beside the uvm node that mattered).
var optionalNodes = []struct{ prefix, why string }{
	{"/dev/nvidia-modeset", "the display (modeset) node; CUDA does not need it"},
	{"/dev/nvidia-uvm-tools", "the UVM tools node, for profilers; CUDA runs without it"},
	{"/dev/nvidia-nvswitch", "an NVSwitch node, used by the fabric manager, not by CUDA itself"},
	{"/dev/nvidia-nvlink", "the NVLink node, used by the fabric manager"},
}

// ignorable says why failed call i does not decide CUDA's outcome, when it
// does not: an optional node, a retry that worked, a repair of a node that
// then opened fine.
func (a *analyzer) ignorable(i int) (string, bool) {
	e := &a.ev[i]
	if !e.Failed() {
		return "", false
	}
	for _, o := range optionalNodes {
		if strings.HasPrefix(e.Path, o.prefix) {
			return o.why, true
		}
	}
	if why := a.hiddenOnPurpose(e); why != "" {
		return why, true
	}
	switch e.Kind {
	case tracer.KindOpen:
		if a.recovered(i) {
			return "a later open of the same node by the same process succeeded", true
		}
	case tracer.KindMknod, tracer.KindUnlink, tracer.KindSymlink, tracer.KindMkdir:
		if a.openedLater(i) {
			return "libcuda's repair of the node failed, but the node then opened fine", true
		}
	}
	return "", false
}

// hiddenOnPurpose says why a GPU node that is absent did not matter: CUDA
// started, and the node is missing where GPUs are allocated per container
// (a device plugin, CDI, NVIDIA_VISIBLE_DEVICES) or CUDA_VISIBLE_DEVICES
// narrows the GPUs. An intended isolation is not a fault; a node that
// exists and is denied still is.
func (a *analyzer) hiddenOnPurpose(e *tracer.Event) string {
	if e.Kind != tracer.KindOpen || !nvdev.IsGPUNode(e.Path) || e.Errno() != unix.ENOENT || a.cuda.Status != "ok" {
		return ""
	}
	if v, ok := a.s.Env["NVIDIA_VISIBLE_DEVICES"]; ok {
		return fmt.Sprintf("the GPU was not given to this container (NVIDIA_VISIBLE_DEVICES=%q), and CUDA started with the others", v)
	}
	if v, ok := a.s.Env["CUDA_VISIBLE_DEVICES"]; ok {
		return fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q narrows the GPUs, and CUDA started with the others", v)
	}
	if a.inContainer() {
		return "its node is absent in this container, as when a device plugin or CDI allocates only some GPUs, and CUDA started with the others"
	}
	return ""
}

// openedLater: the same process opened the path successfully after call i.
func (a *analyzer) openedLater(i int) bool {
	e := &a.ev[i]
	for j := i + 1; j < len(a.ev); j++ {
		o := &a.ev[j]
		if o.PID == e.PID && o.Kind == tracer.KindOpen && o.Path == e.Path && !o.Failed() {
			return true
		}
	}
	return false
}

// noteIgnored lists the failed NVIDIA calls judged ignorable, so the report
// says why they are not the verdict. Only worth saying when something
// failed; /dev/char links and nvidia-modprobe lookups are libcuda's routine.
func (a *analyzer) noteIgnored() {
	// With nothing failed, only a GPU hidden on purpose is worth saying:
	// the job runs on fewer GPUs than the host has, by design.
	onlyHidden := a.fail < 0 && a.cudaFailed() == nil
	var d []string
	var events []uint64
	for i := range a.ev {
		e := &a.ev[i]
		if i == a.fail || !e.Failed() || !isNvidiaNode(e.Path) {
			continue
		}
		why, ok := a.ignorable(i)
		if !ok || len(d) >= 8 || onlyHidden && a.hiddenOnPurpose(e) == "" {
			continue
		}
		d = append(d, fmt.Sprintf("`%s` by %s %s: %s.", nvdev.FormatCall(e), nvdev.Caller(e), nvdev.FormatResult(e), why))
		events = append(events, e.Seq)
	}
	if len(d) == 0 {
		return
	}
	a.add(Finding{ID: "ignored-failures", Severity: SeverityInfo,
		Summary: fmt.Sprintf("%d failed call(s) that did not decide the outcome", len(d)),
		Detail:  d, Events: events}, "")
}
