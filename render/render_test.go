package render_test

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func renderString(t *testing.T, rep *report.Report, f render.Format, o render.Options) string {
	t.Helper()
	var b bytes.Buffer
	if err := render.Report(&b, rep, f, o); err != nil {
		t.Fatalf("render %s: %v", f, err)
	}
	return b.String()
}

func TestColourOnlyWhenAsked(t *testing.T) {
	for _, fx := range reportfixture.All {
		rep := reportfixture.Build(t, fx)
		for _, f := range []render.Format{render.FormatText, render.FormatMarkdown, render.FormatJSON} {
			if out := renderString(t, rep, f, render.Options{}); strings.Contains(out, "\x1b") {
				t.Errorf("%s %s: escape codes without Color", fx.Name, f)
			}
		}
		// Markdown and JSON go into files and tickets: never coloured.
		for _, f := range []render.Format{render.FormatMarkdown, render.FormatJSON} {
			if out := renderString(t, rep, f, render.Options{Color: true}); strings.Contains(out, "\x1b") {
				t.Errorf("%s %s: escape codes in a non-terminal format", fx.Name, f)
			}
		}
		plain := renderString(t, rep, render.FormatText, render.Options{})
		col := renderString(t, rep, render.FormatText, render.Options{Color: true})
		if !strings.Contains(col, "\x1b[") {
			t.Errorf("%s: Color set but no escape codes", fx.Name)
		}
		// Colour changes nothing else: not the words, not the alignment.
		if stripped := ansi.ReplaceAllString(col, ""); stripped != plain {
			t.Errorf("%s: coloured text differs from plain text once the colour is removed:\n%s", fx.Name, stripped)
		}
		first, _, _ := strings.Cut(col, "\n")
		if rep.Analysis.Failing != nil && !strings.HasPrefix(first, "\x1b[1;31m") {
			t.Errorf("%s: the failing verdict is not red: %q", fx.Name, first)
		}
	}
}

func TestFailingRowMarked(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[0])
	var marked []string
	for _, line := range strings.Split(renderString(t, rep, render.FormatText, render.Options{Width: 100}), "\n") {
		if strings.Contains(line, "◀") {
			marked = append(marked, line)
		}
	}
	if len(marked) != 1 || !strings.Contains(marked[0], `openat("/dev/nvidia-uvm", O_RDWR|O_CLOEXEC)`) || !strings.Contains(marked[0], "(c 238:0)") {
		t.Errorf("marked rows: %q", marked)
	}
	md := renderString(t, rep, render.FormatMarkdown, render.Options{})
	if !strings.Contains(md, "| `openat(\"/dev/nvidia-uvm\", O_RDWR\\|O_CLOEXEC)` | **EPERM ◀** | (c 238:0) |") {
		t.Error("Markdown timeline does not mark the failing row")
	}
}

func TestIncompleteTraceIsLoud(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[0])
	rep.Trace.Dropped, rep.Trace.Complete = 12, false
	const loud = "INCOMPLETE TRACE: 12 events dropped by the kernel; the failing call may be missing"

	text := renderString(t, rep, render.FormatText, render.Options{})
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if lines[0] != loud {
		t.Errorf("text does not open with the warning: %q", lines[0])
	}
	if lines[len(lines)-1] != loud {
		t.Errorf("text does not end with the warning: %q", lines[len(lines)-1])
	}
	if !strings.Contains(text, "12 dropped") {
		t.Error("trace summary lacks the drop count")
	}
	if q := renderString(t, rep, render.FormatText, render.Options{Quiet: true}); !strings.HasPrefix(q, loud+"\n") {
		t.Errorf("--quiet hides the warning: %q", q)
	}

	md := renderString(t, rep, render.FormatMarkdown, render.Options{})
	if !strings.Contains(md, "> [!WARNING]\n> "+loud+"\n") {
		t.Error("Markdown lacks the warning block")
	}
	if i, j := strings.Index(md, "[!WARNING]"), strings.Index(md, "**Failing call:**"); i < 0 || j < 0 || i > j {
		t.Error("Markdown warning comes after the failing call")
	}

	var got struct {
		Trace struct {
			Dropped  uint64 `json:"dropped"`
			Complete *bool  `json:"complete"`
		} `json:"trace"`
	}
	if err := json.Unmarshal([]byte(renderString(t, rep, render.FormatJSON, render.Options{})), &got); err != nil {
		t.Fatal(err)
	}
	if got.Trace.Complete == nil || *got.Trace.Complete || got.Trace.Dropped != 12 {
		t.Errorf("JSON trace: complete %v dropped %d", got.Trace.Complete, got.Trace.Dropped)
	}

	// A complete trace says nothing of the kind.
	ok := reportfixture.Build(t, reportfixture.All[0])
	for _, f := range []render.Format{render.FormatText, render.FormatMarkdown} {
		if out := renderString(t, ok, f, render.Options{}); strings.Contains(out, "INCOMPLETE") {
			t.Errorf("%s: complete trace called incomplete", f)
		}
	}
	if !strings.Contains(renderString(t, ok, render.FormatJSON, render.Options{}), `"complete": true`) {
		t.Error(`JSON of a complete trace lacks "complete": true`)
	}
}

func TestQuietIsTheVerdictOnly(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[0])
	if got := renderString(t, rep, render.FormatText, render.Options{Quiet: true}); got != rep.Analysis.Verdict+"\n" {
		t.Errorf("quiet: %q", got)
	}
}

// The timeline table fits the width it is given, at any sensible width.
func TestTimelineFitsWidth(t *testing.T) {
	for _, fx := range reportfixture.All {
		rep := reportfixture.Build(t, fx)
		for _, width := range []int{80, 100, 132} {
			out := renderString(t, rep, render.FormatText, render.Options{Width: width})
			_, table, ok := strings.Cut(out, "\nTIME ")
			if !ok {
				t.Fatalf("%s: no timeline table", fx.Name)
			}
			table, _, _ = strings.Cut("TIME "+table, "\n\nTrace: ")
			for _, line := range strings.Split(table, "\n") {
				if n := utf8.RuneCountInString(line); n > width {
					t.Errorf("%s at width %d: %d-column line %q", fx.Name, width, n, line)
				}
			}
		}
	}
}

func TestAllEventsListsEveryEvent(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[1])
	all := render.TimelineRepeats(rep, true)
	if len(all) != len(rep.Events) {
		t.Errorf("--all-events: %d rows for %d events", len(all), len(rep.Events))
	}
	cond := render.TimelineRepeats(rep, false)
	if len(cond) >= len(all) {
		t.Errorf("condensed timeline (%d rows) is no shorter than the full one (%d)", len(cond), len(all))
	}
	// Every event is in exactly one condensed row: the ×N counts add up.
	n := uint64(0)
	for _, r := range cond {
		n += max(r, 1)
	}
	if n != uint64(len(rep.Events)) {
		t.Errorf("condensed rows cover %d events, want %d", n, len(rep.Events))
	}
}

// Odd but loadable reports render without panicking: a failing call that
// is not among the events, an exec with a huge argv, no snapshot.
func TestRenderOddReports(t *testing.T) {
	long := strings.Repeat("x", 5000)
	argv := make([]string, 500)
	for i := range argv {
		argv[i] = long
	}
	rep := &report.Report{Schema: 1, Tool: report.Tool{Name: "cudatrace"},
		Events: []tracer.Event{
			{Seq: 1, Kind: tracer.KindExec, Path: "/" + long, Argv: argv},
			{Seq: 2, Kind: tracer.KindOpen, Path: "/dev/" + long, Ret: -13},
			{Seq: 3, Kind: tracer.KindIoctl, FD: -1, Ret: -9},
			{Seq: 4, Kind: tracer.KindExit, Signal: 9},
		},
	}
	rep.Analysis.Failing = &tracer.Event{Seq: 99, Kind: tracer.KindOpen, Path: "/dev/nvidia0", Ret: -1}
	for _, f := range []render.Format{render.FormatText, render.FormatMarkdown, render.FormatJSON} {
		for _, w := range []int{0, 1, 40, 500} {
			renderString(t, rep, f, render.Options{Width: w, AllEvents: w == 40})
		}
	}
	if out := renderString(t, rep, render.FormatText, render.Options{}); strings.Contains(out, long[:100]+long[:100]) {
		t.Error("the exec argv was not shortened in the timeline")
	}
}

func BenchmarkRenderText(b *testing.B) {
	rep := reportfixture.Build(b, reportfixture.All[0])
	b.ReportAllocs()
	for b.Loop() {
		if err := render.Report(io.Discard, rep, render.FormatText, render.Options{Width: 100}); err != nil {
			b.Fatal(err)
		}
	}
}
