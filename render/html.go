package render

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
)

// FormatHTML is one self-contained page for a bug ticket: no script, no
// font, no image, nothing fetched (its Content-Security-Policy forbids it),
// so it opens offline and shows the same on every machine.
const FormatHTML Format = "html"

//go:embed html.tmpl
var htmlTemplateText string

var htmlTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	"prose": htmlProse,
	"esc":   esc,
	"upper": strings.ToUpper,
}).Parse(htmlTemplateText))

// htmlPage is what the template shows; every string in it is still plain
// text (escaped by html/template), except prose's code spans.
type htmlPage struct {
	Verdict   string
	Warning   string
	Failing   string // the call and its outcome
	FailingBy string
	Problems  []analysis.Finding
	Context   []analysis.Finding
	Rows      []htmlRow
	Facts     []string
	Nodes     []snapshot.Node
	Env       []string
	KernelLog []string
	Summary   string
	Version   string
}

// htmlRow is a timeline row for the template (which sees exported fields
// only).
type htmlRow struct {
	Time, Proc, Call, Result, Dev string
	Failing                       bool
}

func renderHTML(w io.Writer, rep *report.Report, o Options) error {
	a := &rep.Analysis
	p := htmlPage{
		Verdict: a.Verdict,
		Warning: dropWarning(rep),
		Summary: traceSummary(rep),
		Version: rep.Tool.Version,
	}
	for _, r := range timelineRows(rep, o.AllEvents) {
		p.Rows = append(p.Rows, htmlRow{r.time, r.proc, r.callCell(), r.result, r.dev, r.failing})
	}
	if e := a.Failing; e != nil {
		p.Failing = nvdev.FormatCall(e) + " " + formatOutcome(rep, e)
		p.FailingBy = fmt.Sprintf("by %s[%d] (tid %d) at +%s", e.Comm, e.PID, e.TID, fmtDur(e.Time))
	}
	for _, f := range a.Findings {
		if f.Severity == analysis.SeverityInfo {
			p.Context = append(p.Context, f)
		} else {
			p.Problems = append(p.Problems, f)
		}
	}
	if s := rep.Snapshot; s != nil {
		p.Facts, p.Env = snapshotFacts(s)
		p.Nodes = s.Nodes
		for _, l := range s.KernelLog {
			p.KernelLog = append(p.KernelLog, l.Text)
		}
	}
	return htmlTemplate.Execute(w, p)
}

// snapshotFacts are the snapshot's lines that can change a verdict, as
// plain text: the host, container, process, telling mounts, NVIDIA majors,
// device policy; and the diagnostic environment.
func snapshotFacts(s *snapshot.Snapshot) (facts, env []string) {
	if s.Host.Kernel != "" {
		f := "kernel " + s.Host.Kernel
		if s.Host.DriverVersion != "" {
			f += ", NVIDIA driver " + s.Host.DriverVersion
		}
		facts = append(facts, f)
	}
	if c := s.Container; c.Runtime != "" {
		facts = append(facts, strings.TrimSpace("container: "+c.Runtime+" "+c.ID))
	}
	if pr := s.Process; pr.PID != 0 {
		f := fmt.Sprintf("process %s[%d] uid %d gid %d", pr.Comm, pr.PID, pr.UID, pr.GID)
		if pr.UserNS {
			f += ", in a user namespace"
		}
		if pr.Seccomp == 2 {
			f += ", seccomp filter"
		}
		facts = append(facts, f)
	}
	for _, m := range s.Mounts {
		if m.NoDev || m.Bind {
			f := fmt.Sprintf("mount %s: %s from %s", m.MountPoint, m.FSType, m.Source)
			if m.Bind {
				f += ", bind of " + m.Root
			}
			if m.NoDev {
				f += ", nodev"
			}
			facts = append(facts, f)
		}
	}
	var majors []string
	for _, d := range s.ProcDevices {
		if strings.HasPrefix(d.Name, "nvidia") {
			majors = append(majors, fmt.Sprintf("%d %s", d.Major, d.Name))
		}
	}
	if len(majors) > 0 {
		facts = append(facts, "/proc/devices: "+strings.Join(majors, ", "))
	}
	if v2 := s.CgroupV2; v2 != nil {
		f := fmt.Sprintf("cgroup v2 %s: %d device program(s)", v2.Path, len(v2.Programs))
		for _, pg := range v2.Programs {
			f += fmt.Sprintf("; id %d on %s", pg.ID, pg.AttachedTo)
		}
		facts = append(facts, f)
	}
	if v1 := s.CgroupV1; v1 != nil {
		facts = append(facts, fmt.Sprintf("cgroup v1 devices %s: %s", v1.Path, strings.Join(v1.DevicesList, ", ")))
	}
	for _, u := range s.Unavailable {
		facts = append(facts, "not checked: "+u)
	}
	vars := snapshot.DiagnosticEnv(s.Env)
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return facts, env
}

// htmlProse is finding text: escaped for HTML (and for a terminal, as
// every string from a trace is), its line breaks kept and its `code spans`
// shown as code.
func htmlProse(s string) template.HTML {
	lines := escLines(s)
	for i, line := range lines {
		parts := strings.Split(line, "`")
		var b strings.Builder
		for j, part := range parts {
			switch {
			case j%2 == 1 && j < len(parts)-1:
				b.WriteString("<code>" + template.HTMLEscapeString(part) + "</code>")
			case j%2 == 1: // an unpaired last backtick stays text
				b.WriteString("`" + template.HTMLEscapeString(part))
			default:
				b.WriteString(template.HTMLEscapeString(part))
			}
		}
		lines[i] = b.String()
	}
	return template.HTML(strings.Join(lines, "<br>\n"))
}
