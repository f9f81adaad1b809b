package record

import "github.com/cudatrace/cudatrace/tracer"

// Site is what makes two calls repeats of each other: the key the
// recorder folds calls under, and the one a report's
// FoldedSummary, Unstored and condensed timeline read back.
type Site struct {
	PID     int
	Kind    tracer.Kind
	Path    string     // calls other than ioctls; CUDA/NVML returns: the entry point
	Dev     tracer.Dev // ioctls
	Request uint32     // ioctls
	Errno   int        // 0 for successful calls; CUDA/NVML returns: the code
}

// SiteOf is e's call site; ok is false for events that are never folded:
// execs and exits.
func SiteOf(e *tracer.Event) (k Site, ok bool) {
	switch e.Kind {
	case tracer.KindExec, tracer.KindExit:
		return k, false
	case tracer.KindAPI:
		// A CUDA program may ask cuDeviceGetCount in a loop: its returns
		// fold per entry point and code like calls, the first kept.
		k = Site{PID: e.PID, Kind: e.Kind, Path: e.Func}
		if e.APIFailed() {
			k.Errno = int(e.Ret)
		}
		return k, true
	}
	k = Site{PID: e.PID, Kind: e.Kind, Errno: int(e.Errno())}
	if e.Kind == tracer.KindLimit {
		// Folded per call and errno, as the kernel folds them (tracer.Folded).
		k.Path = e.Syscall
		return k, true
	}
	if e.Kind == tracer.KindIoctl {
		if e.Dev != nil {
			k.Dev = *e.Dev
		}
		k.Request = e.Request
	} else {
		k.Path = e.Path
	}
	return k, true
}

// IoctlSite is one process's ioctls of one request on one device, the key
// of an IoctlSummary.
type IoctlSite struct {
	PID     int
	Dev     tracer.Dev
	Request uint32
}

// IoctlSummary counts ioctls per process, device and request.
type IoctlSummary struct {
	PID     int        `json:"pid"`
	Dev     tracer.Dev `json:"dev"`
	Request uint32     `json:"request"`
	Count   uint64     `json:"count"`
	Failed  uint64     `json:"failed"`
}

// FoldedSummary counts the calls of one site when there were more than the
// report stores: the successful calls of one process on one path (opens,
// stats, ...) past the first SamplePerSite, and the failures of one
// process, call, path or device and request, and errno past the first
// FailSamplePerSite and the last FailTailPerSite.
type FoldedSummary struct {
	PID     int         `json:"pid"`
	Kind    tracer.Kind `json:"kind"`
	Path    string      `json:"path"`
	Dev     *tracer.Dev `json:"dev,omitempty"`     // ioctls
	Request uint32      `json:"request,omitempty"` // ioctls
	Errno   int         `json:"errno,omitempty"`   // failures: the error; absent for successful calls
	Calls   uint64      `json:"calls"`             // in all; the first (and last) few are in events
}

// Site is the call site the summary counts.
func (f *FoldedSummary) Site() Site {
	k := Site{PID: f.PID, Kind: f.Kind, Path: f.Path, Request: f.Request, Errno: f.Errno}
	if f.Kind == tracer.KindIoctl {
		k.Path = ""
		if f.Dev != nil {
			k.Dev = *f.Dev
		}
	}
	return k
}
