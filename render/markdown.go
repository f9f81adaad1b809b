package render

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
)

// renderMarkdown writes a report that pastes straight into a GitHub issue:
// verdict and fix first, the evidence folded into <details>.
func renderMarkdown(w io.Writer, rep *report.Report, o Options) error {
	var b strings.Builder
	a := &rep.Analysis
	fmt.Fprintf(&b, "### cudatrace: %s\n\n", mdEscape(a.Verdict))
	if d := dropWarning(rep); d != "" {
		fmt.Fprintf(&b, "> [!WARNING]\n> %s\n\n", d)
	}
	if a.Failing != nil {
		e := a.Failing
		fmt.Fprintf(&b, "**Failing call:** %s by %s at +%s\n\n", mdCode(nvdev.FormatCall(e)+" "+formatOutcome(rep, e)), mdCode(fmt.Sprintf("%s[%d]", e.Comm, e.PID)), fmtDur(e.Time))
	}
	for _, f := range a.Findings {
		if f.Severity == analysis.SeverityInfo {
			continue
		}
		inferred := ""
		if f.Inferred {
			inferred = " _(inferred)_"
		}
		fmt.Fprintf(&b, "**%s** %s%s %s\n\n", mdEscape(strings.ToUpper(string(f.Severity))), mdEscape(f.Summary), inferred, mdCode(f.ID))
		for _, d := range f.Detail {
			fmt.Fprintf(&b, "- %s\n", mdEscape(d))
		}
		if f.Fix != "" {
			// Prose with code spans, not a code block: a fence would show
			// the backticks around commands literally.
			fmt.Fprintf(&b, "\n**Fix:** %s\n", mdEscape(strings.ReplaceAll(f.Fix, "\n", " ")))
		}
		b.WriteString("\n")
	}
	var info []analysis.Finding
	for _, f := range a.Findings {
		if f.Severity == analysis.SeverityInfo {
			info = append(info, f)
		}
	}
	if len(info) > 0 {
		b.WriteString("<details><summary>Context</summary>\n\n")
		for _, f := range info {
			fmt.Fprintf(&b, "- **%s** %s\n", mdEscape(f.Summary), mdCode(f.ID))
			for _, d := range f.Detail {
				fmt.Fprintf(&b, "  - %s\n", mdEscape(d))
			}
		}
		b.WriteString("\n</details>\n\n")
	}

	rows := timelineRows(rep, o.AllEvents)
	if len(rows) == 0 {
		b.WriteString("No NVIDIA device call was traced.\n\n")
	} else {
		writeTimelineMarkdown(&b, rows)
	}

	if s := rep.Snapshot; s != nil {
		b.WriteString("<details><summary>System snapshot</summary>\n\n")
		writeSnapshotMarkdown(&b, s)
		b.WriteString("\n</details>\n\n")
	}
	fmt.Fprintf(&b, "<sub>%s · cudatrace %s</sub>\n", mdEscape(traceSummary(rep)), mdText(rep.Tool.Version))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTimelineMarkdown is the timeline as a folded table.
func writeTimelineMarkdown(b *strings.Builder, rows []timelineRow) {
	fmt.Fprintf(b, "<details><summary>Timeline (%d device calls)</summary>\n\n", len(rows))
	b.WriteString("| time | process | call | result | device |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		cells := r.cells()
		for i := range cells {
			cells[i] = mdCell(cells[i])
		}
		if c := r.call; c != "" {
			// A code span shows the call as typed.
			cells[2] = mdTableCode(c)
			if r.repeat > 1 {
				cells[2] += fmt.Sprintf(" ×%d", r.repeat)
			}
		}
		if r.failing {
			cells[3] = "**" + cells[3] + "**"
		}
		fmt.Fprintf(b, "| %s |\n", strings.Join(cells, " | "))
	}
	b.WriteString("\n</details>\n\n")
}

func writeSnapshotMarkdown(b *strings.Builder, s *snapshot.Snapshot) {
	if s.Host.Kernel != "" {
		fmt.Fprintf(b, "- kernel %s", mdCode(s.Host.Kernel))
		if s.Host.DriverVersion != "" {
			fmt.Fprintf(b, ", NVIDIA driver %s", mdCode(s.Host.DriverVersion))
		}
		b.WriteString("\n")
	}
	if c := s.Container; c.Runtime != "" {
		fmt.Fprintf(b, "- container: %s %s", mdText(c.Runtime), mdText(c.ID))
		if c.ProxmoxCTID != "" && c.ProxmoxCTID != c.ID {
			fmt.Fprintf(b, " (Proxmox CT %s)", mdText(c.ProxmoxCTID))
		}
		b.WriteString("\n")
	}
	if p := s.Process; p.PID != 0 {
		fmt.Fprintf(b, "- process: %s uid %d gid %d", mdCode(fmt.Sprintf("%s[%d]", p.Comm, p.PID)), p.UID, p.GID)
		if p.User != "" {
			fmt.Fprintf(b, " (%s)", mdText(p.User))
		}
		if p.UserNS {
			b.WriteString(", in a user namespace")
		}
		if p.NoNewPrivs {
			b.WriteString(", no_new_privs")
		}
		if p.Seccomp == 2 {
			b.WriteString(", seccomp filter")
		}
		b.WriteString("\n")
	}
	// Only the mounts that can change a verdict: nodev, or a node
	// bind-mounted in from elsewhere.
	for _, m := range s.Mounts {
		if m.NoDev || m.Bind {
			fmt.Fprintf(b, "- mount %s: %s from %s", mdCode(m.MountPoint), mdText(m.FSType), mdCode(m.Source))
			if m.Bind {
				fmt.Fprintf(b, ", bind of %s", mdCode(m.Root))
			}
			if m.NoDev {
				b.WriteString(", **nodev**")
			}
			b.WriteString("\n")
		}
	}
	if len(s.ProcDevices) > 0 {
		var parts []string
		for _, d := range s.ProcDevices {
			if strings.HasPrefix(d.Name, "nvidia") {
				parts = append(parts, fmt.Sprintf("%d %s", d.Major, d.Name))
			}
		}
		if len(parts) > 0 {
			fmt.Fprintf(b, "- /proc/devices: %s\n", mdCodes(parts))
		}
	}
	if len(s.Nodes) > 0 {
		b.WriteString("\n| node | type | major:minor | mode | owner |\n|---|---|---|---|---|\n")
		for _, n := range s.Nodes {
			if !n.Exists {
				fmt.Fprintf(b, "| %s | missing | | | |\n", mdTableCode(n.Path))
				continue
			}
			fmt.Fprintf(b, "| %s | %s | %d:%d | %04o | %d:%d |\n", mdTableCode(n.Path), mdCell(n.Type), n.Major, n.Minor, n.Mode, n.UID, n.GID)
		}
		b.WriteString("\n")
	}
	if v2 := s.CgroupV2; v2 != nil {
		fmt.Fprintf(b, "- cgroup v2 %s: %d device program(s)", mdCode(v2.Path), len(v2.Programs))
		for _, p := range v2.Programs {
			fmt.Fprintf(b, " · id %d", p.ID)
			if p.Name != "" {
				fmt.Fprintf(b, " %s", mdCode(p.Name))
			}
			fmt.Fprintf(b, " on %s", mdCode(p.AttachedTo))
		}
		if v2.QueryError != "" {
			fmt.Fprintf(b, " (query failed: %s)", mdText(v2.QueryError))
		}
		if v2.ReadAfterExit {
			b.WriteString(afterExit)
		}
		b.WriteString("\n")
	}
	if v1 := s.CgroupV1; v1 != nil {
		fmt.Fprintf(b, "- cgroup v1 devices %s: %s", mdCode(v1.Path), mdCodes(v1.DevicesList))
		if v1.ReadAfterExit {
			b.WriteString(afterExit)
		}
		b.WriteString("\n")
	}
	// The same policy as the capture, for reports of older versions.
	if env := snapshot.DiagnosticEnv(s.Env); len(env) > 0 {
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(b, "- %s\n", mdCode(k+"="+env[k]))
		}
	}
	for _, u := range s.Unavailable {
		fmt.Fprintf(b, "- not checked: %s\n", mdText(u))
	}
	if len(s.KernelLog) > 0 {
		texts := make([]string, len(s.KernelLog))
		for i, l := range s.KernelLog {
			texts[i] = l.Text
		}
		b.WriteString("\nKernel log during the trace:\n\n" + mdBlock(strings.Join(texts, "\n")))
	}
}

// Every string in the Markdown goes through one of these: text from the
// target, a trace or a report file must neither reach a terminal raw (the
// Markdown is printed too) nor close the code span, table or <details>
// around it.

// mdEscape is finding text in a paragraph or list item: no HTML. Its
// backticks stay: findings quote calls as code spans.
func mdEscape(s string) string {
	return noLinks(strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(esc(s)))
}

// noLinks breaks "](" outside code spans, so that a comm or path such as
// [x](http://…) stays text and is not a link in a ticket (inside a code
// span it is text already, and a backslash would show).
func noLinks(s string) string {
	if !strings.Contains(s, "](") {
		return s
	}
	var b strings.Builder
	code := false
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '`':
			code = !code
		case !code && s[i] == ']' && i+1 < len(s) && s[i+1] == '(':
			b.WriteString("]\\")
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mdText is a plain value in prose: mdEscape, and a backtick in it cannot
// open a code span that swallows what follows.
func mdText(s string) string {
	return strings.ReplaceAll(mdEscape(s), "`", "\\`")
}

// mdCell is text in a table cell, where | ends the cell.
func mdCell(s string) string {
	return strings.ReplaceAll(mdText(s), "|", "\\|")
}

// mdCode is s as a code span, fenced by more backticks than it holds in a
// row, so that a backtick in a path cannot end it.
func mdCode(s string) string {
	s = esc(s)
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// mdTableCode is mdCode in a table cell: GitHub ends a cell at | even in
// a code span, unless it is escaped.
func mdTableCode(s string) string {
	return strings.ReplaceAll(mdCode(s), "|", "\\|")
}

// mdCodes is a list of code spans.
func mdCodes(items []string) string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = mdCode(s)
	}
	return strings.Join(out, ", ")
}

// mdBlock is text as a fenced code block whose fence no line can close.
func mdBlock(text string) string {
	lines := escLines(text)
	n := 2
	for _, l := range lines {
		n = max(n, longestRun(l, '`'))
	}
	fence := strings.Repeat("`", n+1)
	return fence + "\n" + strings.Join(lines, "\n") + "\n" + fence + "\n"
}

// longestRun is the length of the longest run of c in s.
func longestRun(s string, c byte) int {
	best, cur := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			cur++
			best = max(best, cur)
		} else {
			cur = 0
		}
	}
	return best
}

// afterExit marks a cgroup policy read from the cgroup a process that had
// exited was in.
const afterExit = " (read after the process exited, from the cgroup it was in)"
