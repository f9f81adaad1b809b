// Package report is cudatrace's archive format and its renderers. A Report
// is self-contained: the events, the system snapshot and the findings, so
// that `cudatrace report FILE` can re-render and re-analyse it anywhere,
// without root or a GPU.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// SchemaVersion is the version this build writes. Load accepts every
// version from 1 up to it; docs/report-schema.md describes each.
const SchemaVersion = 1

// Report is one archived trace.
type Report struct {
	Schema   int                `json:"schema"`
	Tool     Tool               `json:"tool"`
	Created  time.Time          `json:"created"`
	Target   Target             `json:"target"`
	Trace    Trace              `json:"trace"`
	Events   []tracer.Event     `json:"events"`
	Ioctls   []IoctlSummary     `json:"ioctls,omitempty"`
	Folded   []FoldedSummary    `json:"folded,omitempty"`
	Snapshot *snapshot.Snapshot `json:"snapshot,omitempty"`
	Analysis annotate.Analysis  `json:"analysis"`
}

// Tool identifies the cudatrace that wrote the report.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Target is what was traced.
type Target struct {
	Argv     []string           `json:"argv,omitempty"`
	PIDs     []int              `json:"pids,omitempty"` // attach mode
	User     string             `json:"user,omitempty"`
	UID      int                `json:"uid"`
	Exit     *tracer.ExitStatus `json:"exit,omitempty"`
	Attached bool               `json:"attached,omitempty"`
}

// Trace describes the trace itself: how it was taken and whether it is
// complete.
type Trace struct {
	Source  string `json:"source"` // "live" or "strace-log"
	Backend string `json:"backend,omitempty"`
	// SyscallHook: where eBPF's syscall programs ran (tracer.Result).
	SyscallHook string        `json:"syscall_hook,omitempty"`
	Started     time.Time     `json:"started"`
	Duration    time.Duration `json:"duration_ns"`
	// Events counts every event the tracer delivered; Stored those kept in
	// Events (successful ioctls beyond a per-call-site sample are folded
	// into Ioctls).
	Events  uint64 `json:"events"`
	Stored  int    `json:"stored"`
	Dropped uint64 `json:"dropped"`
	// Complete is false when anything was dropped: the trace may lack the
	// very call that failed.
	Complete bool     `json:"complete"`
	Notes    []string `json:"notes,omitempty"`
	// Limits lists what this kind of trace cannot tell (strace logs have no
	// cgroup programs, for example).
	Limits []string `json:"limits,omitempty"`
	// APIReturns: the return codes of CUDA/NVML entry points were traced
	// (uprobes on APILibraries), so their absence means they did not return.
	APIReturns   bool     `json:"api_returns,omitempty"`
	APILibraries []string `json:"api_libraries,omitempty"`
	// OwnSeccompFilters are the tracer's filters on the target (ptrace).
	OwnSeccompFilters int `json:"own_seccomp_filters,omitempty"`
}

// Facts is what the analysis needs to know about the trace itself.
func (t Trace) Facts() annotate.Facts {
	f := annotate.Facts{APIReturns: t.APIReturns, OwnSeccompFilters: t.OwnSeccompFilters}
	switch {
	case t.APIReturns:
	case t.Source == "strace-log":
		f.APIWhyNot = "strace logs hold no library calls"
	case t.Backend == "ptrace":
		f.APIWhyNot = "the ptrace backend could not probe the CUDA libraries"
	default:
		f.APIWhyNot = "this trace did not record it"
	}
	return f
}

// IoctlSummary counts ioctls per process, device and request.
type IoctlSummary struct {
	PID     int        `json:"pid"`
	Dev     tracer.Dev `json:"dev"`
	Request uint32     `json:"request"`
	Count   uint64     `json:"count"`
	Failed  uint64     `json:"failed"`
}

// FoldedSummary counts the successful calls of one process on one path
// (opens, stats, ...) when there were too many to store them all.
type FoldedSummary struct {
	PID   int         `json:"pid"`
	Kind  tracer.Kind `json:"kind"`
	Path  string      `json:"path"`
	Calls uint64      `json:"calls"` // in all; the first few are in events
}

// Errors from Load. Each is a one-line reason the CLI prints as is.
var (
	ErrEmpty   = errors.New("empty file")
	ErrCorrupt = errors.New("corrupt or not a cudatrace report")
)

// VersionError is a report newer than this build understands.
type VersionError struct{ Schema int }

func (e *VersionError) Error() string {
	return fmt.Sprintf("report schema %d is newer than this cudatrace (reads up to %d): upgrade cudatrace", e.Schema, SchemaVersion)
}

// maxReportSize bounds what Load reads: maxStored events of a few hundred
// bytes each fit many times over.
const maxReportSize = 1 << 30

// Load reads a report, checking that it is one and that its version is
// readable.
func Load(r io.Reader) (*Report, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxReportSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxReportSize {
		// Cutting it would only make a misleading "truncated" error.
		return nil, fmt.Errorf("%w: larger than %d MiB", ErrCorrupt, maxReportSize>>20)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, ErrEmpty
	}
	var probe struct {
		Schema *int `json:"schema"`
		Tool   Tool `json:"tool"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) && int(syn.Offset) >= len(data) {
			return nil, fmt.Errorf("%w: truncated JSON (the file ends early)", ErrCorrupt)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: truncated JSON (the file ends early)", ErrCorrupt)
		}
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if probe.Schema == nil || probe.Tool.Name != "cudatrace" {
		return nil, fmt.Errorf("%w: no cudatrace schema field", ErrCorrupt)
	}
	if *probe.Schema < 1 {
		return nil, fmt.Errorf("%w: schema %d", ErrCorrupt, *probe.Schema)
	}
	if *probe.Schema > SchemaVersion {
		return nil, &VersionError{*probe.Schema}
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return &rep, nil
}

// LoadFile is Load on a path.
func LoadFile(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f)
}

// Save writes the report atomically: a temporary file in the same
// directory, fsynced, then renamed over path. A crash never leaves half a
// report.
func Save(path string, rep *Report) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := WriteJSON(tmp, rep); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// Make the rename itself durable; the report is complete either way,
	// so a directory that cannot be synced is not an error.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
