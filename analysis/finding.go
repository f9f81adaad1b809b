// Package analysis turns a trace (events) and a system snapshot into
// findings: which call failed, why, and how to fix it. Everything here is a
// pure function of its inputs, so it runs the same live, on an archived
// report, and in tests without root or a GPU.
package analysis

import "github.com/cudatrace/cudatrace/tracer"

// Severity orders findings: the report leads with the worst.
type Severity string

const (
	SeverityError   Severity = "error"   // explains a failure
	SeverityWarning Severity = "warning" // will or may break CUDA, or hides a problem
	SeverityInfo    Severity = "info"    // context: what worked, what was repaired
)

// Finding is one conclusion with its evidence and remedy.
type Finding struct {
	// ID is stable across versions (tests and tickets refer to it), e.g.
	// "cgroup2-denied", "node-missing".
	ID       string   `json:"id"`
	Severity Severity `json:"severity"`
	// Summary is one line: what is wrong.
	Summary string `json:"summary"`
	// Detail lines: the facts that lead there, in order.
	Detail []string `json:"detail,omitempty"`
	// Fix is the concrete remedy, with real numbers and paths. It may hold
	// several lines (alternatives, then caveats), one per line.
	Fix string `json:"fix,omitempty"`
	// Inferred is true when the evidence is indirect (e.g. the cgroup
	// programs could not be read and the verdict is deduced from the errno).
	Inferred bool `json:"inferred,omitempty"`
	// Events are the Seq numbers of the events that show it.
	Events []uint64 `json:"events,omitempty"`
}

// Result is what Analyze finds: the failing call, the verdict, CUDA's own
// return and the findings (a report stores it as "analysis").
type Result struct {
	// Failing is the call that makes CUDA init fail, or nil if none did.
	Failing *tracer.Event `json:"failing,omitempty"`
	// Verdict is the report's headline, one sentence.
	Verdict string `json:"verdict"`
	// CUDA is what CUDA or NVML itself returned, when the trace saw it.
	CUDA     *CUDAResult `json:"cuda,omitempty"`
	Findings []Finding   `json:"findings"`
}
