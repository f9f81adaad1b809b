package analysis

import (
	"fmt"
	"strings"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// CUDAResult is what CUDA (or NVML) itself returned, from the probed entry
// points: the verdict the syscalls are explained against.
type CUDAResult struct {
	// Status: "failed", "ok", "not-called" (libcuda/NVML was loaded, or not,
	// and no probed entry point returned), or "unknown" (the backend could
	// not see return codes).
	Status  string `json:"status"`
	Func    string `json:"func,omitempty"`    // the call that decided it: the first that failed, else cuInit
	Code    int64  `json:"code"`              // its return code
	Name    string `json:"name,omitempty"`    // CUDA_ERROR_UNKNOWN, NVML_ERROR_DRIVER_NOT_LOADED
	Devices *int64 `json:"devices,omitempty"` // what cuDeviceGetCount returned, when it did
	Library string `json:"library,omitempty"`
	Event   uint64 `json:"event,omitempty"` // Seq of the deciding api event
}

// Facts are what the tracer knew about its own view, which the events
// alone cannot say.
type Facts struct {
	// APIReturns: return codes of CUDA/NVML entry points were traced
	// (uprobes). Without it, no api event does not mean CUDA succeeded.
	APIReturns bool
	// APIWhyNot says why not, in a few words, when !APIReturns.
	APIWhyNot string
	// OwnSeccompFilters are the tracer's own filters on the target (the
	// ptrace backend's one), not to be reported as the target's.
	OwnSeccompFilters int
	// Attached: the trace began by attaching to running processes, and
	// HeldAtAttach are the NVIDIA device fds they held then ("fd 3 →
	// /dev/nvidiactl (c 195:255)"): CUDA was initialised before the trace.
	Attached     bool
	HeldAtAttach []string
	// Unstored are the calls a recorder counted without storing them in
	// the events, so that counts in findings are true counts.
	Unstored []Unstored
}

// initFuncs are the entry points whose failure is a failed start, first
// the one that initialises.
func isInitFunc(f string) bool {
	return f == "cuInit" || strings.HasPrefix(f, "nvmlInit")
}

// cudaOutcome reads CUDA's verdict from the api events: the first failing
// entry point, else cuInit's success (with the device count, when seen).
func (a *analyzer) cudaOutcome() {
	r := &CUDAResult{Status: "unknown"}
	a.cudaIdx = -1
	var ok *tracer.Event
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindAPI {
			continue
		}
		if e.Func == "cuDeviceGetCount" && e.Ret == 0 && e.Out != nil && r.Devices == nil {
			n := *e.Out
			r.Devices = &n
		}
		if e.APIFailed() && a.cudaIdx < 0 {
			a.cudaIdx = i
		}
		// cuInit's success is the one to say; NVML's when CUDA was not started.
		if e.Ret == 0 && isInitFunc(e.Func) && (ok == nil || e.Func == "cuInit" && ok.Func != "cuInit") {
			ok = e
		}
	}
	switch {
	case a.cudaIdx >= 0:
		e := &a.ev[a.cudaIdx]
		r.Status, r.Func, r.Code, r.Library, r.Event = "failed", e.Func, e.Ret, e.Path, e.Seq
	case ok != nil:
		r.Status, r.Func, r.Code, r.Library, r.Event = "ok", ok.Func, 0, ok.Path, ok.Seq
	case a.facts.APIReturns:
		r.Status = "not-called"
	}
	if r.Func != "" {
		r.Name = nvdev.ReturnName(r.Func, r.Code)
	}
	a.cuda = r
}

// cudaFailed is the failing api event, or nil.
func (a *analyzer) cudaFailed() *tracer.Event {
	if a.cudaIdx < 0 {
		return nil
	}
	return &a.ev[a.cudaIdx]
}

// beforeCUDAFailure limits the failing-call search to calls that can have
// caused CUDA's failure: those of its process before it returned. With no
// CUDA failure, every call counts.
func (a *analyzer) beforeCUDAFailure(i int) bool {
	f := a.cudaFailed()
	if f == nil {
		return true
	}
	return i < a.cudaIdx && a.ev[i].PID == f.PID
}

// apiHead opens the headline with CUDA's own verdict: "cuInit returned 999
// (CUDA_ERROR_UNKNOWN) in python3[845] at +0.31s".
func apiHead(e *tracer.Event) string {
	return fmt.Sprintf("%s returned %d (%s) in %s at +%.2fs", e.Func, e.Ret, nvdev.ReturnName(e.Func, e.Ret), nvdev.Caller(e), e.Time.Seconds())
}

// codeMeaning is what a failed start with this code usually means, for a
// verdict no failing call explains.
func codeMeaning(fn string, code int64) string {
	if strings.HasPrefix(fn, "nvml") {
		switch code {
		case 9:
			return "NVML could not reach the driver: /dev/nvidiactl could not be opened, or the nvidia module is not loaded"
		case 18:
			return "the NVML library and the kernel module are different driver versions"
		case 4:
			return "the user may not open the device nodes"
		}
		return "NVML could not initialise"
	}
	switch code {
	case 999:
		return "usually a device node (most often /dev/nvidia-uvm) could not be opened, or nvidia_uvm failed to initialise"
	case 100:
		return "no usable GPU: CUDA_VISIBLE_DEVICES hides them all, no /dev/nvidiaN could be opened, or the driver sees no GPU"
	case 3:
		return "CUDA was not initialised in this process: most often it was forked after its parent initialised CUDA (use the spawn start method); otherwise the driver failed to initialise (GSP firmware, RmInitAdapter, HMM in nvidia_uvm; the kernel log has the reason)"
	case 304:
		return "an OS call libcuda needs was refused: a seccomp filter (memfd_create, ioctl), a resource limit such as RLIMIT_NOFILE, or shared memory"
	case 803:
		return "libcuda is not the kernel module's version (Driver/library version mismatch)"
	case 804:
		return "the forward-compatibility libcuda does not support this GPU"
	case 34:
		return "the toolkit's stub libcuda was loaded instead of the driver's"
	case 35:
		return "the driver is older than the CUDA runtime needs"
	case 46:
		return "the GPU is busy or in Exclusive_Process compute mode"
	case 802:
		return "the system is not ready: NVSwitch systems need nvidia-fabricmanager running"
	case 2:
		return "the driver could not allocate memory: most often RLIMIT_AS (`ulimit -v`) is too low for CUDA's virtual address reservations"
	case 101:
		return "the device ordinal does not exist among the visible GPUs"
	}
	return "CUDA could not start"
}

// cudaUnexplained says that CUDA failed and nothing explained it, with the
// code's usual meaning and what was checked and ruled out.
func (a *analyzer) cudaUnexplained(e *tracer.Event) {
	d := []string{fmt.Sprintf("`%s()` by %s returned %d (%s).", e.Func, nvdev.Caller(e), e.Ret, nvdev.ReturnName(e.Func, e.Ret)),
		"This code usually means " + codeMeaning(e.Func, e.Ret) + "."}
	d = append(d, a.ruledOut(e)...)
	a.add(Finding{ID: "cuda-failed-unexplained", Severity: SeverityError,
		Summary: fmt.Sprintf("%s failed with %s and no failing call explains it", e.Func, nvdev.ReturnName(e.Func, e.Ret)),
		Detail:  d,
		Fix:     "Read the kernel log around the failure (`dmesg | grep -E 'NVRM|nvidia'`), then check the candidates above that could not be ruled out; `cudatrace doctor` checks the node and driver state.",
		Events:  []uint64{e.Seq}}, "")
}

// ruledOut lists what the trace and snapshot show did not cause a failure.
func (a *analyzer) ruledOut(e *tracer.Event) []string {
	var opened, failed []string
	seen := map[string]bool{}
	for i := 0; i < a.cudaIdx; i++ {
		o := &a.ev[i]
		if o.PID != e.PID || o.Kind != tracer.KindOpen || !isNvidiaNode(o.Path) || seen[o.Path] {
			continue
		}
		seen[o.Path] = true
		if o.Failed() {
			failed = append(failed, o.Path)
		} else {
			opened = append(opened, o.Path)
		}
	}
	var d []string
	if len(opened) > 0 {
		d = append(d, "Ruled out: the device nodes it opened opened fine ("+strings.Join(opened, ", ")+"), so cgroup policy, node modes and majors did not stop them.")
	} else {
		d = append(d, "It opened no /dev/nvidia* node before failing.")
	}
	if len(failed) > 0 {
		d = append(d, "Failed, but libcuda goes on without them (see ignored-failures): "+strings.Join(failed, ", ")+".")
	}
	refused := 0
	for i := 0; i < a.cudaIdx; i++ {
		if a.ev[i].NoEntry {
			refused++
		}
	}
	if refused == 0 && a.facts.APIReturns {
		d = append(d, "Ruled out: no traced call was refused by a seccomp filter.")
	}
	if n, known := a.targetFilters(); known {
		d = append(d, fmt.Sprintf("The target ran as uid %d with %d seccomp filter(s) of its own (cudatrace's ptrace filter not counted).", a.s.Process.UID, n))
	}
	if len(a.s.KernelLog) == 0 {
		d = append(d, "The kernel log showed no NVIDIA messages during the trace (or could not be read).")
	}
	return d
}

// cudaVerdict is the headline when CUDA's own return code is known.
func (a *analyzer) cudaVerdict() (string, bool) {
	r := a.cuda
	switch r.Status {
	case "failed":
		e := a.cudaFailed()
		head := apiHead(e)
		if a.fail >= 0 {
			c := &a.ev[a.fail]
			s := head + ": " + nvdev.FormatCall(c) + " by " + nvdev.Caller(c)
			if c.NoReturn {
				s += " never returned"
			} else if c.Failed() {
				s += " → " + c.ErrnoName()
			} else if st := a.inbandText(c); st != "" {
				s += " → " + st
			}
			if a.cause != "" {
				s += ": " + a.cause
			}
			return s + ".", true
		}
		for _, f := range a.out {
			if f.Severity == SeverityError && f.ID != "cuda-failed-unexplained" {
				return head + ": " + f.Summary + ".", true
			}
		}
		return head + ", and no failing call or known cause explains it (see cuda-failed-unexplained).", true
	case "ok":
		s := fmt.Sprintf("%s succeeded (%s)", r.Func, r.Name)
		if ok := a.findSeq(r.Event); ok != nil {
			s = fmt.Sprintf("%s succeeded in %s", r.Func, nvdev.Caller(ok))
		}
		if r.Devices != nil {
			s += fmt.Sprintf(" and found %d GPU(s)", *r.Devices)
		}
		if a.fail >= 0 {
			c := &a.ev[a.fail]
			s += ", but " + nvdev.FormatCall(c) + " by " + nvdev.Caller(c)
			if c.NoReturn {
				s += " never returned"
			} else if c.Failed() {
				s += " → " + c.ErrnoName()
			}
			if a.cause != "" {
				s += ": " + a.cause
			}
			if nvdev.IsGPUNode(c.Path) {
				// Several GPUs: the job runs on fewer, far from the cause.
				s += "; CUDA runs without that GPU"
			}
			return s + ".", true
		}
		for _, f := range a.out {
			if f.Severity == SeverityError {
				// The job failed elsewhere (a forked child, a node no
				// call reached): never "nothing failed".
				return s + ", but " + f.Summary + ".", true
			}
		}
		s += "; no NVIDIA device call failed."
		if a.byID["node-repaired"] {
			s += " libcuda recreated a device node during the run, so the setup is not clean (see node-repaired)."
		}
		return s, true
	}
	return "", false
}

func (a *analyzer) findSeq(seq uint64) *tracer.Event {
	for i := range a.ev {
		if a.ev[i].Seq == seq {
			return &a.ev[i]
		}
	}
	return nil
}

// apiUnseen is the caveat a verdict without CUDA's return code carries.
func (a *analyzer) apiUnseen() string {
	if a.cuda.Status == "not-called" {
		if a.loadedLibcuda() {
			return " libcuda was loaded, but no probed CUDA or NVML entry point returned (not called, or the process died inside it)."
		}
		return " The target did not load libcuda or NVML."
	}
	why := a.facts.APIWhyNot
	if why == "" {
		why = "this trace did not record it"
	}
	return " CUDA's own return code is unknown (" + why + "), so this does not show that CUDA started."
}

func (a *analyzer) loadedLibcuda() bool {
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind == tracer.KindOpen && !e.Failed() && nvfile.IsLibrary(e.Path) {
			return true
		}
	}
	return false
}
