package analysis

import (
	"github.com/cudatrace/cudatrace/tracer"
)

// seccompFlagNewListener is SECCOMP_FILTER_FLAG_NEW_LISTENER: the filter's
// refusals may come from a user-space supervisor (SECCOMP_RET_USER_NOTIF).
const seccompFlagNewListener = 8

// SeccompFilterBefore returns the index of the seccomp filter that covers
// event i: the last KindSeccomp event that succeeded in the same process
// (PID) before it, or failing that the last one anywhere in the trace
// before it (a parent's filter is inherited by the children it forks
// later; the event stream has no fork events, so any earlier filter in the
// traced tree is a candidate). -1 when no filter was installed before i.
// sameProcess says which of the two it found.
//
// strace shows a call a filter refused (SECCOMP_RET_ERRNO, or EPERM from a
// USER_NOTIF supervisor) exactly as a driver's own error: when this finds
// a filter, the failing call's errno may be the filter's, not the kernel
// object's.
func SeccompFilterBefore(ev []tracer.Event, i int) (idx int, sameProcess bool) {
	idx = -1
	for j := i - 1; j >= 0; j-- {
		f := &ev[j]
		if f.Kind != tracer.KindSeccomp || f.Ret < 0 {
			continue
		}
		if f.PID == ev[i].PID {
			return j, true
		}
		if idx < 0 {
			idx = j
		}
	}
	return idx, false
}
