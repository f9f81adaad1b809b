package report

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/tracer"
)

// Format is an output format.
type Format string

const (
	FormatText     Format = "text"
	FormatJSON     Format = "json"
	FormatMarkdown Format = "markdown"
)

// RenderOptions are the renderer's only inputs besides the report; they
// never carry command-line flags.
type RenderOptions struct {
	Color     bool // ANSI colour (the caller decides: TTY and no NO_COLOR)
	Width     int  // terminal width; 0 means 100
	AllEvents bool // every stored event instead of the condensed timeline
	Quiet     bool // the verdict line only
}

// Render writes rep in format f.
func Render(w io.Writer, rep *Report, f Format, o RenderOptions) error {
	switch f {
	case FormatJSON:
		return WriteJSON(w, rep)
	case FormatMarkdown:
		return renderMarkdown(w, rep, o)
	default:
		return renderText(w, rep, o)
	}
}

type palette struct{ on bool }

func (p palette) wrap(code, s string) string {
	if !p.on {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}
func (p palette) red(s string) string    { return p.wrap("1;31", s) }
func (p palette) yellow(s string) string { return p.wrap("33", s) }
func (p palette) bold(s string) string   { return p.wrap("1", s) }
func (p palette) dim(s string) string    { return p.wrap("2", s) }

func severityLabel(p palette, s annotate.Severity) string {
	switch s {
	case annotate.SeverityError:
		return p.red("ERROR")
	case annotate.SeverityWarning:
		return p.yellow("WARN ")
	}
	return p.dim("INFO ")
}

// dropWarning is the loud line every incomplete trace carries.
func dropWarning(rep *Report) string {
	if rep.Trace.Dropped == 0 {
		return ""
	}
	return fmt.Sprintf("INCOMPLETE TRACE: %d events dropped by the kernel; the failing call may be missing", rep.Trace.Dropped)
}

func renderText(w io.Writer, rep *Report, o RenderOptions) error {
	p := palette{o.Color}
	width := o.Width
	if width <= 0 {
		width = 100
	}
	a := &rep.Analysis
	var b strings.Builder
	if d := dropWarning(rep); d != "" {
		fmt.Fprintln(&b, p.red(d))
	}
	headline := a.Verdict
	if a.Failing != nil {
		headline = p.red(headline)
	} else {
		headline = p.bold(headline)
	}
	fmt.Fprintln(&b, headline)
	if o.Quiet {
		_, err := io.WriteString(w, b.String())
		return err
	}
	if a.Failing != nil {
		e := a.Failing
		fmt.Fprintf(&b, "\nFailing call  %s %s\n", annotate.FormatCall(e), p.red(FormatErrno(e)))
		fmt.Fprintf(&b, "              by %s[%d] (tid %d) at +%s\n", e.Comm, e.PID, e.TID, fmtDur(e.Time))
	}
	for _, f := range a.Findings {
		fmt.Fprintf(&b, "\n%s %s", severityLabel(p, f.Severity), p.bold(f.Summary))
		if f.Inferred {
			fmt.Fprint(&b, p.dim(" (inferred)"))
		}
		fmt.Fprintf(&b, "  [%s]\n", f.ID)
		for _, d := range f.Detail {
			fmt.Fprintf(&b, "      %s\n", d)
		}
		if f.Fix != "" {
			fmt.Fprintf(&b, "  Fix: %s\n", strings.ReplaceAll(f.Fix, "\n", "\n       "))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	b.Reset()

	rows := timelineRows(rep, o.AllEvents)
	title := fmt.Sprintf("\nTimeline: %d device calls", len(rows))
	if !o.AllEvents {
		title += " (condensed; --all-events lists every call)"
	}
	fmt.Fprintln(w, title)
	if len(rows) > 0 {
		t := tablewriter.NewTable(w,
			tablewriter.WithMaxWidth(width),
			tablewriter.WithHeaderAutoFormat(tw.Off),
			tablewriter.WithRowAutoWrap(tw.WrapNormal),
			tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{Symbols: tw.NewSymbols(tw.StyleLight)})),
		)
		t.Header("TIME", "PROCESS", "CALL", "RESULT", "DEVICE")
		for _, r := range rows {
			if err := t.Append(r); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, traceSummary(rep))
	for _, n := range rep.Trace.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	for _, l := range rep.Trace.Limits {
		fmt.Fprintf(&b, "Cannot tell: %s\n", l)
	}
	if rep.Snapshot != nil {
		for _, u := range rep.Snapshot.Unavailable {
			fmt.Fprintf(&b, "Not checked: %s\n", u)
		}
	}
	if d := dropWarning(rep); d != "" {
		fmt.Fprintln(&b, p.red(d))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// FormatErrno renders a result for the failing-call line: "= -1 EPERM
// (Operation not permitted)".
func FormatErrno(e *tracer.Event) string {
	if !e.Failed() {
		return fmt.Sprintf("= %d", e.Ret)
	}
	return fmt.Sprintf("= -1 %s (%s)", e.ErrnoName(), e.Errno().Error())
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.6fs", d.Seconds())
}

func traceSummary(rep *Report) string {
	t := rep.Trace
	var parts []string
	if t.Source == "strace-log" {
		parts = append(parts, "source: strace log")
	} else {
		parts = append(parts, "backend: "+t.Backend)
	}
	parts = append(parts, fmt.Sprintf("%d events (%d stored)", t.Events, t.Stored))
	parts = append(parts, fmt.Sprintf("%d dropped", t.Dropped))
	if t.Duration > 0 {
		parts = append(parts, "duration "+t.Duration.Round(time.Millisecond).String())
	}
	if ex := rep.Target.Exit; ex != nil {
		if ex.Signal != 0 {
			parts = append(parts, fmt.Sprintf("target killed by signal %d", ex.Signal))
		} else {
			parts = append(parts, fmt.Sprintf("target exited %d", ex.Code))
		}
	}
	return "Trace: " + strings.Join(parts, ", ")
}

// timelineRows lists the events for the timeline. Condensed, runs of
// successful ioctls by one thread on one device fold into one row.
func timelineRows(rep *Report, all bool) [][]string {
	var rows [][]string
	evs := rep.Events
	for i := 0; i < len(evs); i++ {
		e := &evs[i]
		if !all && e.Kind == tracer.KindIoctl && !e.Failed() {
			j := i
			for j+1 < len(evs) && evs[j+1].Kind == tracer.KindIoctl && !evs[j+1].Failed() &&
				evs[j+1].TID == e.TID && evs[j+1].FD == e.FD {
				j++
			}
			if j > i {
				rows = append(rows, []string{"+" + fmtDur(e.Time), proc(e),
					fmt.Sprintf("ioctl(%d, ...) ×%d", e.FD, j-i+1), "ok", devString(e)})
				i = j
				continue
			}
		}
		rows = append(rows, []string{"+" + fmtDur(e.Time), proc(e), annotate.FormatCall(e), resultCell(e), devString(e)})
	}
	return rows
}

func proc(e *tracer.Event) string {
	if e.TID != 0 && e.TID != e.PID {
		return fmt.Sprintf("%s[%d/%d]", e.Comm, e.PID, e.TID)
	}
	return fmt.Sprintf("%s[%d]", e.Comm, e.PID)
}

func resultCell(e *tracer.Event) string {
	switch {
	case e.Kind == tracer.KindExit:
		return ""
	case e.Failed():
		return e.ErrnoName()
	case e.Kind == tracer.KindOpen:
		return fmt.Sprintf("fd %d", e.Ret)
	}
	return fmt.Sprintf("%d", e.Ret)
}

func devString(e *tracer.Event) string {
	if e.Dev == nil {
		return ""
	}
	return "c " + e.Dev.String()
}
