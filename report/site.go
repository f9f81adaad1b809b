package report

import "github.com/cudatrace/cudatrace/tracer"

// Site is what makes two calls repeats of each other: the key the
// recorder (tracer/record) folds calls under, and the one a report's
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

// ioctlSite is one process's ioctls of one request on one device, the key
// of an IoctlSummary.
type ioctlSite struct {
	pid     int
	dev     tracer.Dev
	request uint32
}
