package render_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/snapshot"
)

// hostile is a name a target can give a path, a mount or its comm: a
// terminal title and screen-clear sequence, BEL, CR/LF, and Markdown that
// would close the code span, the table cell and the <details> around it.
const hostile = "x\x1b]0;pwned\x07\x1b[2J\r\n</details> | `tick` ``` <b>\u202e"

// AssertPrintable fails when out holds anything a terminal would act on:
// every rune must be printable or a newline.
func assertPrintable(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("%s: raw %U at byte %d: %q", what, r, i, out[max(0, i-20):min(len(out), i+20)])
			return
		}
	}
}

// outsideCode is line without its code spans (CommonMark: a run of n
// backticks up to the next run of exactly n), whose text is shown as is.
// Outside code a backslash escapes the next character.
func outsideCode(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] == '\\' && i+1 < len(line) { // an escaped character is literal
			b.WriteString(line[i : i+2])
			i += 2
			continue
		}
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 0
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		end := -1
		for j := i + n; j < len(line); {
			if line[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(line) && line[j+m] == '`' {
				m++
			}
			if m == n {
				end = j + m
				break
			}
			j += m
		}
		if end < 0 { // no closing run: the backticks are literal
			b.WriteString(line[i : i+n])
			i += n
			continue
		}
		i = end
	}
	return b.String()
}

// assertMarkdownIntact fails when hostile text escaped its container: every
// <details> still closes once, no HTML is live outside code, and every
// table row keeps its columns.
func assertMarkdownIntact(t *testing.T, md string) {
	t.Helper()
	var prose []string
	fence := ""
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			run := line[:len(line)-len(strings.TrimLeft(line, "`"))]
			switch {
			case fence == "":
				fence = run
			case run == fence && strings.TrimLeft(line, "`") == "":
				fence = ""
			}
			continue
		}
		if fence == "" {
			prose = append(prose, outsideCode(line))
		}
	}
	if fence != "" {
		t.Errorf("a code block fenced by %s never closes", fence)
	}
	text := strings.Join(prose, "\n")
	if o, c := strings.Count(text, "<details>"), strings.Count(text, "</details>"); o != c {
		t.Errorf("%d <details> but %d </details>", o, c)
	}
	if strings.Contains(text, "<b>") {
		t.Error("raw HTML from the target reached the Markdown")
	}
	cols := 0
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(line, "|") - strings.Count(line, `\|`)
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("table row has %d cell borders, the header %d: %s", n, cols, line)
		}
	}
}

// A live-shaped report whose target named its paths, mounts, comm and
// environment to attack the terminal: nothing reaches the text or the
// Markdown raw.
func TestRenderEscapesTargetStrings(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[0])
	for i := range rep.Events {
		e := &rep.Events[i]
		e.Comm = "py" + hostile
		if e.Path == "/dev/nvidia-uvm" {
			e.Path += hostile
		}
	}
	s := rep.Snapshot
	s.Process.Comm = hostile
	s.Mounts = append(s.Mounts, snapshot.Mount{MountPoint: "/dev/" + hostile, Root: hostile, FSType: hostile, Source: hostile, NoDev: true, Bind: true})
	s.Nodes = append(s.Nodes, snapshot.Node{Path: "/dev/nvidia-uvm" + hostile, Exists: true, Type: "c", Major: 238})
	s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": hostile}
	s.KernelLog = append(s.KernelLog, snapshot.KernelLine{Seq: 1, Text: "NVRM: " + hostile})
	s.Unavailable = append(s.Unavailable, "listing /dev/"+hostile)
	s.CgroupV2.Path = hostile
	s.CgroupV2.Programs[0].Name = hostile
	s.Container.ID = hostile
	rep.Trace.Notes = append(rep.Trace.Notes, "fd 3 → /dev/"+hostile)
	rep.Analysis = analysis.Analyze(rep.Events, s)
	if f := rep.Analysis.Failing; f == nil || !strings.Contains(f.Path, "pwned") {
		t.Fatalf("the crafted open is not the failing call: %+v", f)
	}
	for _, f := range []render.Format{render.FormatText, render.FormatMarkdown} {
		for _, all := range []bool{false, true} {
			var b strings.Builder
			if err := render.Report(&b, rep, f, render.Options{Width: 100, AllEvents: all}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			assertPrintable(t, string(f), out)
			if !strings.Contains(out, `\x1b]0;pwned\a`) {
				t.Errorf("%s: the crafted path is not shown escaped", f)
			}
			if f == render.FormatMarkdown {
				assertMarkdownIntact(t, out)
			}
		}
	}
}

// A comm or path shaped as a Markdown link stays text in --format
// markdown: pasted into a ticket it must not become a clickable link.
func TestMarkdownNoLinksFromTarget(t *testing.T) {
	rep := reportfixture.Build(t, reportfixture.All[0])
	evil := "[x](http://e.vil/)"
	rep.Analysis.Verdict = "openat by " + evil + "[5] → EPERM"
	for i := range rep.Analysis.Findings {
		rep.Analysis.Findings[i].Detail = append(rep.Analysis.Findings[i].Detail, "path /tmp/"+evil, "quoted `"+evil+"`")
	}
	var b strings.Builder
	if err := render.Report(&b, rep, render.FormatMarkdown, render.Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		// Inside a code span the link is text already.
		outside := line
		for strings.Count(outside, "`") >= 2 {
			i := strings.Index(outside, "`")
			j := i + 1 + strings.Index(outside[i+1:], "`")
			outside = outside[:i] + outside[j+1:]
		}
		if strings.Contains(outside, "](http") {
			t.Errorf("a link from the target's text: %q", line)
		}
	}
	if !strings.Contains(out, `[x]\(http://e.vil/)`) {
		t.Errorf("the link's text is not shown as text:\n%s", out)
	}
}
