// Package report is cudatrace's archive format: save, load, redact (package
// render prints it). A Report is self-contained: the events, the system snapshot and the findings, so
// that `cudatrace report FILE` can re-render and re-analyse it anywhere,
// without root or a GPU.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
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
	Analysis analysis.Result    `json:"analysis"`
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
	SyscallHook string `json:"syscall_hook,omitempty"`
	// Variants: the eBPF programs' variants chosen for the kernel
	// (tracer.Result.KernelVariants; docs/kernels.md).
	Variants []string      `json:"kernel_variants,omitempty"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Events counts every event the tracer delivered; Stored those kept in
	// Events (repeats of a call site beyond its first and last few are
	// counted in Ioctls and Folded instead).
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
func (t Trace) Facts() analysis.Facts {
	f := analysis.Facts{APIReturns: t.APIReturns, OwnSeccompFilters: t.OwnSeccompFilters}
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

// IoctlSummary and FoldedSummary are the recorder's counts, as the archive
// stores them (diagnose/record defines them).
type (
	IoctlSummary  = record.IoctlSummary
	FoldedSummary = record.FoldedSummary
)

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

// maxReportSize bounds what Load reads: maxStoredHint events of a few
// hundred bytes each fit many times over.
const maxReportSize = 1 << 30

// maxStoredHint bounds trace.stored where Load takes it as a size hint:
// the most events the recorder (diagnose/record) stores, 200,000 plus 20,000
// for the calls a verdict rests on.
const maxStoredHint = 220_000

var errTooLarge = fmt.Errorf("%w: larger than %d MiB", ErrCorrupt, maxReportSize>>20)

// MaxMemberSize bounds one JSON value Load decodes: a top-level member
// other than the events, or one event. The decoder holds a value whole
// before decoding it (and the string it decodes to is another copy), so
// a 300 MB one-string report took 1.7 GB; a real report's largest member,
// the snapshot, is a few MiB.
const MaxMemberSize = 64 << 20

var errMemberTooLarge = fmt.Errorf("%w: a JSON value larger than %d MiB (a report's largest member is a few MiB)", ErrCorrupt, MaxMemberSize>>20)

// Load reads a report, checking that it is one and that its version is
// readable. It decodes the events one at a time as they stream in, so
// that the file's bytes and the decoded report are never both in memory:
// a report of the stored-events cap loads in little more than its own
// size (BenchmarkLoadMemory).
func Load(r io.Reader) (*Report, error) {
	rep, err := load(r)
	if err == nil {
		return rep, nil
	}
	var syn *json.SyntaxError
	var ve *VersionError
	switch {
	case errors.As(err, &ve), errors.Is(err, ErrEmpty), errors.Is(err, ErrCorrupt):
		return nil, err
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%w: truncated JSON (the file ends early)", ErrCorrupt)
	case errors.As(err, &syn):
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, jsonError(err))
	}
	return nil, err // reading the file failed
}

// jsonKind names the JSON type a token starts.
func jsonKind(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "object"
		}
		return "array"
	case string:
		return "string"
	case bool:
		return "bool"
	case float64, json.Number:
		return "number"
	}
	return "value"
}

// Facts are the analysis's inputs about the trace itself, with the calls
// counted but not stored.
func (r *Report) Facts() analysis.Facts {
	f := r.Trace.Facts()
	f.Unstored = r.Unstored()
	f.Attached = r.Target.Attached
	for _, n := range r.Trace.Notes {
		if strings.HasSuffix(n, tracer.HeldNoteSuffix) {
			f.HeldAtAttach = append(f.HeldAtAttach, strings.TrimSuffix(n, tracer.HeldNoteSuffix))
		}
	}
	return f
}

// jsonError words a decoding error without Go type names.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Errorf("field %q holds a JSON %s, not what a report has there", te.Field, te.Value)
		}
		return fmt.Errorf("a JSON %s where a report has something else", te.Value)
	}
	return err
}

func load(r io.Reader) (*Report, error) {
	lr := &limitReader{r: r, left: maxReportSize}
	dec := json.NewDecoder(lr)
	lr.dec = dec
	lr.next()
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, ErrEmpty
	}
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: a report is a JSON object, this file starts with %q", ErrCorrupt, bytes.TrimSpace(lr.head))
	}
	// Every member but the events is kept raw (they are small) and decoded
	// once the header is checked; the events are decoded as they come.
	rest := map[string]json.RawMessage{}
	var events []tracer.Event
	for lr.next() && dec.More() {
		lr.next()
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // object keys are strings
		lr.next()
		if key != "events" {
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			rest[key] = v
			continue
		}
		// The writer puts the header first: a newer report is said to be
		// newer before its events are read with this version's types.
		if h, err := header(rest); err == nil && h.Schema != nil && *h.Schema > SchemaVersion {
			return nil, &VersionError{*h.Schema}
		}
		if events, err = decodeEvents(dec, lr, storedHint(rest)); err != nil {
			return nil, err
		}
	}
	lr.next()
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%w: data after the report", ErrCorrupt)
		}
		return nil, err
	}

	h, err := header(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, jsonError(err))
	}
	if h.Schema == nil || h.Tool.Name != "cudatrace" {
		return nil, fmt.Errorf("%w: no cudatrace schema field", ErrCorrupt)
	}
	if *h.Schema < 1 {
		return nil, fmt.Errorf("%w: schema %d", ErrCorrupt, *h.Schema)
	}
	if *h.Schema > SchemaVersion {
		return nil, &VersionError{*h.Schema}
	}
	var rep Report
	if err := unmarshalMembers(rest, &rep); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, jsonError(err))
	}
	if events != nil {
		rep.Events = events
	}
	return &rep, nil
}

type reportHeader struct {
	Schema *int `json:"schema"`
	Tool   Tool `json:"tool"`
}

// header decodes the schema and tool among the members read so far.
func header(members map[string]json.RawMessage) (reportHeader, error) {
	var h reportHeader
	err := unmarshalMembers(members, &h, "schema", "tool")
	return h, err
}

// unmarshalMembers decodes the named members (all, with none named) into
// v, one at a time: a huge member (a 300 MB string) is scanned once, not
// copied into one object with the rest first.
func unmarshalMembers(members map[string]json.RawMessage, v any, keys ...string) error {
	if keys == nil {
		for k := range members {
			keys = append(keys, k)
		}
		slices.Sort(keys) // the first error is the same every time
	}
	for _, k := range keys {
		raw, ok := members[k]
		if !ok {
			continue
		}
		name, _ := json.Marshal(k) // a string marshals
		obj := make([]byte, 0, len(name)+len(raw)+3)
		obj = append(append(append(append(append(obj, '{'), name...), ':'), raw...), '}')
		if err := json.Unmarshal(obj, v); err != nil {
			return err
		}
	}
	return nil
}

// storedHint is trace.stored when it came before the events, bounded so
// that a crafted number cannot make Load allocate much ahead of the data.
func storedHint(members map[string]json.RawMessage) int {
	var t struct {
		Trace struct {
			Stored int `json:"stored"`
		} `json:"trace"`
	}
	if unmarshalMembers(members, &t, "trace") != nil {
		return 0
	}
	return min(max(t.Trace.Stored, 0), maxStoredHint)
}

// decodeEvents reads the events array (or null) one event at a time.
func decodeEvents(dec *json.Decoder, lr *limitReader, hint int) ([]tracer.Event, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return []tracer.Event{}, nil
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("%w: field \"events\" holds a JSON %s, not an array", ErrCorrupt, jsonKind(tok))
	}
	events := make([]tracer.Event, 0, hint)
	for lr.next() && dec.More() {
		lr.next()
		events = append(events, tracer.Event{})
		if err := dec.Decode(&events[len(events)-1]); err != nil {
			var typ *json.UnmarshalTypeError
			if errors.As(err, &typ) {
				return nil, fmt.Errorf("%w: events[%d]: %v", ErrCorrupt, len(events)-1, jsonError(err))
			}
			return nil, err
		}
	}
	lr.next()
	_, err = dec.Token() // ]
	return events, err
}

// limitReader fails with errTooLarge past left bytes: a cut report would
// only give a misleading "truncated" error. With dec set it also fails with
// errMemberTooLarge once the decoder reads MaxMemberSize past where its
// current value starts (next marks that start).
type limitReader struct {
	r    io.Reader
	left int64
	head []byte // the first bytes read, for an error message

	dec    *json.Decoder
	read   int64 // bytes passed to dec
	window int64 // read may not pass this
}

// next lets the decoder read one more value of up to MaxMemberSize from
// where it stands. It returns true, to sit in a loop's condition.
func (l *limitReader) next() bool {
	l.window = l.dec.InputOffset() + MaxMemberSize
	return true
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.dec != nil {
		if l.read >= l.window {
			return 0, errMemberTooLarge
		}
		p = p[:min(int64(len(p)), l.window-l.read)]
	}
	n, err := l.read1(p)
	l.read += int64(n)
	return n, err
}

func (l *limitReader) read1(p []byte) (int, error) {
	if l.left <= 0 {
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, errTooLarge
		}
		return 0, err // EOF or the reader's error
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if len(l.head) < 16 {
		l.head = append(l.head, p[:min(n, 16-len(l.head))]...)
	}
	return n, err
}

// LoadFile is Load on a path.
// Only a regular file is read: /dev/zero would be read until killed, a
// FIFO with no writer would block.
func LoadFile(path string) (*Report, error) {
	f, err := snapshot.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: nothing to lose
	return Load(f)
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
