package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/snapshot"
)

// renderMarkdown writes a report that pastes straight into a GitHub issue:
// verdict and fix first, the evidence folded into <details>.
func renderMarkdown(w io.Writer, rep *Report, o RenderOptions) error {
	var b strings.Builder
	a := &rep.Analysis
	fmt.Fprintf(&b, "### cudatrace: %s\n\n", mdEscape(a.Verdict))
	if d := dropWarning(rep); d != "" {
		fmt.Fprintf(&b, "> [!WARNING]\n> %s\n\n", d)
	}
	if a.Failing != nil {
		e := a.Failing
		fmt.Fprintf(&b, "**Failing call:** `%s %s` by `%s[%d]` at +%s\n\n", annotate.FormatCall(e), formatOutcome(rep, e), e.Comm, e.PID, fmtDur(e.Time))
	}
	for _, f := range a.Findings {
		if f.Severity == annotate.SeverityInfo {
			continue
		}
		inferred := ""
		if f.Inferred {
			inferred = " _(inferred)_"
		}
		fmt.Fprintf(&b, "**%s** %s%s `%s`\n\n", strings.ToUpper(string(f.Severity)), mdEscape(f.Summary), inferred, f.ID)
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
	var info []annotate.Finding
	for _, f := range a.Findings {
		if f.Severity == annotate.SeverityInfo {
			info = append(info, f)
		}
	}
	if len(info) > 0 {
		b.WriteString("<details><summary>Context</summary>\n\n")
		for _, f := range info {
			fmt.Fprintf(&b, "- **%s** `%s`\n", mdEscape(f.Summary), f.ID)
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
	fmt.Fprintf(&b, "<sub>%s · cudatrace %s</sub>\n", mdEscape(traceSummary(rep)), rep.Tool.Version)
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
		if c := r.call; c != "" && !strings.Contains(c, "`") {
			// A code span shows the call as typed; only | needs escaping
			// inside a table.
			cells[2] = "`" + strings.ReplaceAll(c, "|", "\\|") + "`"
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
		fmt.Fprintf(b, "- kernel `%s`", s.Host.Kernel)
		if s.Host.DriverVersion != "" {
			fmt.Fprintf(b, ", NVIDIA driver `%s`", s.Host.DriverVersion)
		}
		b.WriteString("\n")
	}
	if c := s.Container; c.Runtime != "" {
		fmt.Fprintf(b, "- container: %s %s", c.Runtime, c.ID)
		if c.ProxmoxCTID != "" && c.ProxmoxCTID != c.ID {
			fmt.Fprintf(b, " (Proxmox CT %s)", c.ProxmoxCTID)
		}
		b.WriteString("\n")
	}
	if p := s.Process; p.PID != 0 {
		fmt.Fprintf(b, "- process: `%s[%d]` uid %d gid %d", p.Comm, p.PID, p.UID, p.GID)
		if p.User != "" {
			fmt.Fprintf(b, " (%s)", mdEscape(p.User))
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
			fmt.Fprintf(b, "- mount `%s`: %s from `%s`", m.MountPoint, m.FSType, m.Source)
			if m.Bind {
				fmt.Fprintf(b, ", bind of `%s`", m.Root)
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
			fmt.Fprintf(b, "- /proc/devices: `%s`\n", strings.Join(parts, "`, `"))
		}
	}
	if len(s.Nodes) > 0 {
		b.WriteString("\n| node | type | major:minor | mode | owner |\n|---|---|---|---|---|\n")
		for _, n := range s.Nodes {
			if !n.Exists {
				fmt.Fprintf(b, "| `%s` | missing | | | |\n", n.Path)
				continue
			}
			fmt.Fprintf(b, "| `%s` | %s | %d:%d | %04o | %d:%d |\n", n.Path, n.Type, n.Major, n.Minor, n.Mode, n.UID, n.GID)
		}
		b.WriteString("\n")
	}
	if v2 := s.CgroupV2; v2 != nil {
		fmt.Fprintf(b, "- cgroup v2 `%s`: %d device program(s)", v2.Path, len(v2.Programs))
		for _, p := range v2.Programs {
			fmt.Fprintf(b, " · id %d", p.ID)
			if p.Name != "" {
				fmt.Fprintf(b, " `%s`", p.Name)
			}
			fmt.Fprintf(b, " on `%s`", p.AttachedTo)
		}
		if v2.QueryError != "" {
			fmt.Fprintf(b, " (query failed: %s)", v2.QueryError)
		}
		b.WriteString("\n")
	}
	if v1 := s.CgroupV1; v1 != nil {
		fmt.Fprintf(b, "- cgroup v1 devices `%s`: `%s`\n", v1.Path, strings.Join(v1.DevicesList, "`, `"))
	}
	if len(s.Env) > 0 {
		keys := make([]string, 0, len(s.Env))
		for k := range s.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(b, "- `%s=%s`\n", k, s.Env[k])
		}
	}
	for _, u := range s.Unavailable {
		fmt.Fprintf(b, "- not checked: %s\n", mdEscape(u))
	}
	if len(s.KernelLog) > 0 {
		b.WriteString("\nKernel log during the trace:\n\n```\n")
		for _, l := range s.KernelLog {
			b.WriteString(l.Text + "\n")
		}
		b.WriteString("```\n")
	}
}

// mdEscape keeps finding text from breaking the Markdown around it.
func mdEscape(s string) string {
	return strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(s)
}

func mdCell(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}
