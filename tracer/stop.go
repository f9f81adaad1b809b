package tracer

import "time"

// StopSink is a Sink that reads a failing process's own view of the system
// (its cgroup and device policy, its mount namespace's /dev, files under
// /proc/PID/root) while the backend holds the failing thread stopped at the
// exit of its failed call. A process that exits within milliseconds of its
// failing call is otherwise gone before those reads, and its cgroup rules
// can then only be inferred.
//
// Only the ptrace backend holds (its tracee is stopped there anyway, and a
// ptrace stop is invisible to the target's parent). The eBPF backend does
// not: stopping the target from BPF is a SIGSTOP, which its parent sees
// through waitpid(WUNTRACED) and a shell's job control acts on, on every
// failing run.
type StopSink interface {
	Sink
	// Stopped is called right after Event(e) for a failed traced call, with
	// e's thread stopped at that call's exit; the thread resumes when
	// Stopped returns, which must be by deadline. Other threads of the
	// process run on (one of them may still end it), and under ptrace every
	// other tracee's next stop waits too, so a sink returns at once unless
	// it has something to read. e is valid only during the call.
	Stopped(e *Event, deadline time.Time)
}

// Hold limits: one hold lasts at most StopHoldMax and all of a trace's holds
// together StopHoldBudget, so a target whose files stall every read (a hung
// FUSE server in its root costs a read deadline, 3 s) is not stalled by
// cudatrace for long. Reading a target's view takes milliseconds otherwise.
const (
	StopHoldMax    = 5 * time.Second
	StopHoldBudget = 10 * time.Second
)

// StopHolder applies the hold limits for one trace; a backend keeps one and
// calls Hold at each failed call's exit stop.
type StopHolder struct {
	sink StopSink // nil: the trace's Sink does not hold
	max  time.Duration
	left time.Duration
	now  func() time.Time
}

// NewStopHolder returns the holder for sink: a no-op unless it is a StopSink.
func NewStopHolder(sink Sink) *StopHolder {
	ss, _ := sink.(StopSink)
	return &StopHolder{sink: ss, max: StopHoldMax, left: StopHoldBudget, now: time.Now}
}

// Hold calls the sink's Stopped for e, within what is left of the budget.
func (h *StopHolder) Hold(e *Event) {
	if h == nil || h.sink == nil || h.left <= 0 || !e.Failed() {
		return
	}
	start := h.now()
	h.sink.Stopped(e, start.Add(min(h.max, h.left)))
	h.left -= h.now().Sub(start)
}
