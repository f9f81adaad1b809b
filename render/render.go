// Package render prints a report (text, Markdown, HTML; JSON is the
// archive's own encoding) or a doctor result. It takes a format, a writer
// and Options, never command-line flags, and escapes every string that
// came from the target.
package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/clipperhouse/displaywidth"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose/record"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// Format is an output format.
type Format string

const (
	FormatText     Format = "text"
	FormatJSON     Format = "json"
	FormatMarkdown Format = "markdown"
)

// Options are the renderer's only inputs besides the report; they
// never carry command-line flags.
type Options struct {
	Color     bool // ANSI colour (the caller decides: TTY and no NO_COLOR)
	Width     int  // terminal width; 0 means 100
	AllEvents bool // every stored event instead of the condensed timeline
	Quiet     bool // the verdict line only
	Summary   bool // text: the verdict, then calls and errors per node and call (strace -c)
}

// Report writes rep in format f.
func Report(w io.Writer, rep *report.Report, f Format, o Options) error {
	switch f {
	case FormatJSON:
		return report.WriteJSON(w, rep)
	case FormatMarkdown:
		return renderMarkdown(w, rep, o)
	case FormatHTML:
		return renderHTML(w, rep, o)
	default:
		return renderText(w, rep, o)
	}
}

// esc is how every string from the target, a trace, a report file or a
// strace log is printed: control characters escaped, never raw.
var esc = analysis.Printable

// escLines escapes each line of a text whose line breaks are meant.
func escLines(s string) []string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = esc(l)
	}
	return lines
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
func (p palette) green(s string) string  { return p.wrap("1;32", s) }

func severityLabel(p palette, s analysis.Severity) string {
	switch s {
	case analysis.SeverityError:
		return p.red("ERROR")
	case analysis.SeverityWarning:
		return p.yellow("WARN ")
	}
	return p.dim("INFO ")
}

// dropWarning is the loud line every incomplete trace carries.
func dropWarning(rep *report.Report) string {
	if rep.Trace.Dropped == 0 {
		return ""
	}
	return fmt.Sprintf("INCOMPLETE TRACE: %d events dropped by the kernel; the failing call may be missing", rep.Trace.Dropped)
}

func renderText(w io.Writer, rep *report.Report, o Options) error {
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
	headline := esc(a.Verdict)
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
	if o.Summary {
		if _, err := io.WriteString(w, b.String()); err != nil {
			return err
		}
		if err := writeSummary(w, rep, p); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "\n%s\n", esc(traceSummary(rep)))
		return err
	}
	if a.Failing != nil {
		e := a.Failing
		fmt.Fprintf(&b, "\nFailing call  %s %s\n", esc(nvdev.FormatCall(e)), p.red(esc(formatOutcome(rep, e))))
		fmt.Fprintf(&b, "              by %s[%d] (tid %d) at +%s\n", esc(e.Comm), e.PID, e.TID, fmtDur(e.Time))
	}
	for _, f := range a.Findings {
		fmt.Fprintf(&b, "\n%s %s", severityLabel(p, f.Severity), p.bold(esc(f.Summary)))
		if f.Inferred {
			fmt.Fprint(&b, p.dim(" (inferred)"))
		}
		fmt.Fprintf(&b, "  [%s]\n", esc(f.ID))
		for _, d := range f.Detail {
			fmt.Fprintf(&b, "      %s\n", esc(d))
		}
		if f.Fix != "" {
			fmt.Fprintf(&b, "  %s %s\n", p.green("Fix:"), strings.Join(escLines(f.Fix), "\n       "))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	b.Reset()

	rows := timelineRows(rep, o.AllEvents)
	title := fmt.Sprintf("\nTimeline: %d device calls", len(rows))
	switch {
	case len(rows) == 0:
		title = "\nTimeline: no NVIDIA device call was traced"
	case !o.AllEvents:
		title += " (condensed; --all-events lists every call)"
	}
	if _, err := fmt.Fprintln(w, title); err != nil {
		return err
	}
	if len(rows) > 0 {
		if err := writeTimelineTable(w, rows, width, p); err != nil {
			return err
		}
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, esc(traceSummary(rep)))
	for _, n := range rep.Trace.Notes {
		fmt.Fprintf(&b, "Note: %s\n", esc(n))
	}
	for _, l := range rep.Trace.Limits {
		fmt.Fprintf(&b, "Cannot tell: %s\n", esc(l))
	}
	if rep.Snapshot != nil {
		for _, u := range rep.Snapshot.Unavailable {
			fmt.Fprintf(&b, "Not checked: %s\n", esc(u))
		}
	}
	if d := dropWarning(rep); d != "" {
		fmt.Fprintln(&b, p.red(d))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// formatOutcome is FormatErrno plus what the params block reports for an
// ioctl that returned 0: "= 0, status NV_ERR_INVALID_CLASS".
func formatOutcome(rep *report.Report, e *tracer.Event) string {
	if st := inbandResult(rep, e); st != "" {
		return FormatErrno(e) + ", " + st
	}
	return FormatErrno(e)
}

// inbandResult is the in-band failure of an ioctl, "" when none.
func inbandResult(rep *report.Report, e *tracer.Event) string {
	if e.Kind != tracer.KindIoctl {
		return ""
	}
	ver := ""
	if rep.Snapshot != nil {
		ver = rep.Snapshot.Host.DriverVersion
	}
	return nvdev.InbandResult(e, ver)
}

// FormatErrno renders a result for the failing-call line: "= -1 EPERM
// (Operation not permitted)".
func FormatErrno(e *tracer.Event) string {
	if e.NoReturn {
		return "never returned (SIGSYS)"
	}
	if !e.Failed() {
		return fmt.Sprintf("= %d", e.Ret)
	}
	return fmt.Sprintf("= -1 %s (%s)", e.ErrnoName(), e.Errno().Error())
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.6fs", d.Seconds())
}

func traceSummary(rep *report.Report) string {
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

// timelineRow is one line of the timeline, before layout.
type timelineRow struct {
	time, proc, call, result, dev string
	repeat                        uint64 // calls this row stands for, when more than one
	failing                       bool   // the analysis's failing call
}

// callCell is the call with its repeat count: `stat("/dev/nvidiactl") ×2`.
func (r timelineRow) callCell() string {
	if r.repeat > 1 {
		return fmt.Sprintf("%s ×%d", r.call, r.repeat)
	}
	return r.call
}

func (r timelineRow) cells() []string {
	return []string{r.time, r.proc, r.callCell(), r.result, r.dev}
}

// timelineRows lists the events for the timeline. Condensed, a call site
// the recorder folded is one row with its true count, at its first call;
// runs of successful ioctls by one thread on one fd fold into one row, and
// so do repeats of the same call with the same result (libcuda stats each
// node twice), so the rows that matter fit on a screen. The failing call
// always has a row of its own.
func timelineRows(rep *report.Report, all bool) []timelineRow {
	var failSeq uint64
	if f := rep.Analysis.Failing; f != nil {
		failSeq = f.Seq
	}
	folded := make(map[record.Site]uint64, len(rep.Folded))
	for i := range rep.Folded {
		folded[rep.Folded[i].Site()] = rep.Folded[i].Calls
	}
	shown := map[record.Site]bool{}
	row := func(e *tracer.Event) timelineRow {
		r := timelineRow{time: "+" + fmtDur(e.Time), proc: esc(proc(e)), call: esc(timelineCall(e)), result: esc(resultCell(rep, e)), dev: esc(devCell(rep, e))}
		if failSeq != 0 && e.Seq == failSeq {
			r.failing = true
			r.result += " ◀"
		}
		return r
	}
	var rows []timelineRow
	evs := rep.Events
	for i := 0; i < len(evs); i++ {
		e := &evs[i]
		r := row(e)
		if all || r.failing {
			rows = append(rows, r)
			continue
		}
		if k, ok := record.SiteOf(e); ok && folded[k] > 0 {
			if !shown[k] {
				shown[k] = true
				r.repeat = folded[k]
				rows = append(rows, r)
			}
			continue
		}
		j := i
		if e.Kind == tracer.KindIoctl && !e.Failed() && inbandResult(rep, e) == "" {
			for j+1 < len(evs) && evs[j+1].Kind == tracer.KindIoctl && !evs[j+1].Failed() && inbandResult(rep, &evs[j+1]) == "" &&
				evs[j+1].TID == e.TID && evs[j+1].FD == e.FD && evs[j+1].Seq != failSeq {
				j++
			}
			if j > i {
				r.call, r.result = fmt.Sprintf("ioctl(%d, ...)", e.FD), "ok"
			}
		} else {
			for j+1 < len(evs) && evs[j+1].TID == e.TID && evs[j+1].Seq != failSeq {
				n := row(&evs[j+1])
				if n.call != r.call || n.result != r.result || n.dev != r.dev {
					break
				}
				j++
			}
		}
		if j > i {
			r.repeat = uint64(j - i + 1)
			i = j
		}
		rows = append(rows, r)
	}
	return rows
}

// timelineCall is FormatCall with exec argv cut short: a python -c script
// or a long command line would otherwise fill the screen. The report's
// events keep the full argv.
func timelineCall(e *tracer.Event) string {
	if e.Kind != tracer.KindExec || len(e.Argv) == 0 {
		return nvdev.FormatCall(e)
	}
	const maxArgs, maxArg = 4, 24
	var args []string
	for i, a := range e.Argv {
		if i == maxArgs {
			args = append(args, fmt.Sprintf("...%d more", len(e.Argv)-maxArgs))
			break
		}
		q := strconv.Quote(a)
		if utf8.RuneCountInString(q) > maxArg {
			q = string([]rune(q)[:maxArg-4]) + `"...`
		}
		args = append(args, q)
	}
	name := e.Syscall
	if name == "" {
		name = "execve"
	}
	return fmt.Sprintf("%s(%s, [%s])", name, strconv.Quote(e.Path), strings.Join(args, ", "))
}

// writeTimelineTable lays the timeline out in width columns. Every column
// but CALL is as wide as its widest cell; CALL gets the rest and wraps
// after a comma, so an argument is never split when it fits on a line.
func writeTimelineTable(w io.Writer, rows []timelineRow, width int, p palette) error {
	header := []string{"TIME", "PROCESS", "CALL", "RESULT", "DEVICE"}
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = displaywidth.String(h)
	}
	for _, r := range rows {
		for i, c := range r.cells() {
			widths[i] = max(widths[i], displaywidth.String(c))
		}
	}
	const gap = 2 // after each column, the last one included
	callWidth := width - (widths[0] + widths[1] + widths[3] + widths[4]) - gap*len(header)
	callWidth = min(max(callWidth, 24), widths[2])

	var buf strings.Builder
	t := plainTable(&buf, gap)
	t.Header(header)
	// Lines each row takes, so that the failing row can be coloured
	// after the layout (escape codes inside cells would only confuse it).
	var failLines []bool
	for _, r := range rows {
		cells := r.cells()
		call := wrapCall(r.callCell(), callWidth)
		cells[2] = strings.Join(call, "\n")
		for range call {
			failLines = append(failLines, r.failing)
		}
		if err := t.Append(cells); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	// The padding after the last column is invisible noise in a paste.
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	const headerLines = 2 // the header and its rule
	for i, l := range lines {
		l = strings.TrimRight(l, " ")
		if j := i - headerLines; j >= 0 && j < len(failLines) && failLines[j] {
			l = p.red(l)
		}
		lines[i] = l
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n")+"\n")
	return err
}

// wrapCall breaks a formatted call into lines of at most width columns
// (display width, as tablewriter pads: a CJK character or an emoji takes two),
// after ", " where it can, hard where a single argument is longer.
// Continuation lines are indented by two spaces. It works on one line's
// worth of text at a time, so a path of a megabyte (the target controls
// paths) takes linear time.
func wrapCall(s string, width int) []string {
	if displaywidth.String(s) <= width || width < 8 {
		return []string{s}
	}
	var lines []string
	cur, curN := "", 0 // the line being built, and its display width
	for s != "" {
		// The next piece: up to and including ", ", or the rest.
		pc := s
		if i := strings.Index(s, ", "); i >= 0 {
			pc = s[:i+2]
		}
		s = s[len(pc):]
		n := displaywidth.String(pc)
		if cur != "" && curN+n > width {
			lines = append(lines, strings.TrimRight(cur, " "))
			cur, curN = "  ", 2
		}
		for curN+n > width {
			// Too long for one line even alone: break a path after a
			// slash if there is one, else anywhere.
			k := width - curN
			take := widthPrefixLen(pc, k)
			line := cur + pc[:take]
			cut := len(line)
			if i := strings.LastIndex(line, "/"); i > 2 {
				cut = i + 1
			}
			lines = append(lines, line[:cut])
			cur = "  " + line[cut:]
			curN = 2 + displaywidth.String(line[cut:])
			pc, n = pc[take:], n-displaywidth.String(pc[:take])
		}
		cur += pc
		curN += n
	}
	if strings.TrimSpace(cur) != "" {
		lines = append(lines, strings.TrimRight(cur, " "))
	}
	return lines
}

// widthPrefixLen is the length in bytes of s's longest prefix of whole
// graphemes at most n columns wide; at least one grapheme, so that a wide
// character facing a one-column gap still makes progress.
func widthPrefixLen(s string, n int) int {
	i, w := 0, 0
	for g := displaywidth.StringGraphemes(s); g.Next(); {
		gw := g.Width()
		if i > 0 && w+gw > n {
			break
		}
		i += len(g.Value())
		w += gw
	}
	return i
}

func proc(e *tracer.Event) string {
	if e.TID != 0 && e.TID != e.PID {
		return fmt.Sprintf("%s[%d/%d]", e.Comm, e.PID, e.TID)
	}
	return fmt.Sprintf("%s[%d]", e.Comm, e.PID)
}

func resultCell(rep *report.Report, e *tracer.Event) string {
	if st := inbandResult(rep, e); st != "" {
		return fmt.Sprintf("%d, %s", e.Ret, st)
	}
	switch {
	case e.Kind == tracer.KindExit:
		return ""
	case e.NoReturn:
		return "never returned"
	case e.Kind == tracer.KindAPI:
		return nvdev.APIResult(e)
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

// devCell is the timeline's DEVICE: the device the call itself reported,
// or, for an open that failed (and so returned no device), the node at
// that path in the snapshot, in parentheses: the node the kernel refused.
func devCell(rep *report.Report, e *tracer.Event) string {
	if d := devString(e); d != "" {
		return d
	}
	if rep.Snapshot == nil || !e.Failed() || (e.Kind != tracer.KindOpen && e.Kind != tracer.KindAccess) {
		return ""
	}
	if n := rep.Snapshot.Node(e.Path); n != nil && n.Exists && (n.Type == "c" || n.Type == "b") {
		return fmt.Sprintf("(%s %d:%d)", n.Type, n.Major, n.Minor)
	}
	return ""
}

// plainTable is the layout of cudatrace's tables: no borders, a rule under
// the header, columns padded to their display width plus gap spaces, and
// cells that the caller has already wrapped.
func plainTable(w io.Writer, gap int) *tablewriter.Table {
	return tablewriter.NewTable(w,
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
		tablewriter.WithPadding(tw.Padding{Left: "", Right: strings.Repeat(" ", gap), Overwrite: true}),
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleLight),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenRows: tw.Off, BetweenColumns: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.On},
			},
		})),
	)
}
