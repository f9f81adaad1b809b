package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/cudatrace/cudatrace/annotate"
)

// FormatHTML is one self-contained HTML file for a bug ticket: no script,
// no external resource (the Content-Security-Policy forbids any), every
// string from the trace escaped by html/template after esc.

// htmlPage is what the template shows.
type htmlPage struct {
	Verdict, Failing, FailingBy string
	Failed, Incomplete          bool
	Dropped                     string
	Findings                    []htmlFinding
	Rows                        []timelineRow
	Trace, Tool                 string
	Notes                       []string
}

type htmlFinding struct {
	Class, Label, Summary, ID string
	Inferred                  bool
	Detail, Fix               []string
}

// Exported for the template, which sees only exported fields.
func (r timelineRow) Time() string   { return r.time }
func (r timelineRow) Proc() string   { return r.proc }
func (r timelineRow) Call() string   { return r.callCell() }
func (r timelineRow) Result() string { return r.result }
func (r timelineRow) Dev() string    { return r.dev }
func (r timelineRow) Failing() bool  { return r.failing }

var htmlTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cudatrace: {{.Verdict}}</title>
<style>
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.25em; padding: .6em .8em; border-radius: 6px; background: #eef3ee; border-left: 6px solid #2e7d32; }
h1.failed { background: #fdecea; border-left-color: #c62828; }
h2 { font-size: 1.05em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
code, td { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 13px; }
.failing { background: #fff4f4; border: 1px solid #f0b8b8; border-radius: 6px; padding: .6em .8em; }
.finding { border: 1px solid #ddd; border-radius: 6px; padding: .5em .8em; margin: .7em 0; }
.finding .label { font-weight: bold; padding: 0 .4em; border-radius: 3px; color: #fff; margin-right: .4em; }
.error .label { background: #c62828; } .warning .label { background: #b26a00; } .info .label { background: #607d8b; }
.finding .id { color: #666; font-size: .85em; } .inferred { color: #666; font-style: italic; }
.fix { background: #f1f8e9; border-radius: 4px; padding: .4em .6em; white-space: pre-wrap; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .15em .6em; border-bottom: 1px solid #eee; vertical-align: top; }
tr.fail td { background: #fdecea; font-weight: bold; }
.warn { color: #c62828; font-weight: bold; }
footer { margin-top: 2em; color: #666; font-size: .85em; }
</style>
</head>
<body>
{{if .Incomplete}}<p class="warn">{{.Dropped}}</p>{{end}}
<h1{{if .Failed}} class="failed"{{end}}>{{.Verdict}}</h1>
{{if .Failing}}<h2>Failing call</h2>
<div class="failing"><code>{{.Failing}}</code><br>{{.FailingBy}}</div>{{end}}
{{if .Findings}}<h2>Findings</h2>
{{range .Findings}}<div class="finding {{.Class}}"><span class="label">{{.Label}}</span><strong>{{.Summary}}</strong>{{if .Inferred}} <span class="inferred">(inferred)</span>{{end}} <span class="id">[{{.ID}}]</span>
{{if .Detail}}<ul>{{range .Detail}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Fix}}<div class="fix"><strong>Fix:</strong> {{range $i, $l := .Fix}}{{if $i}}
{{end}}{{$l}}{{end}}</div>{{end}}</div>
{{end}}{{end}}
<h2>Timeline{{if .Rows}} ({{len .Rows}} device calls){{end}}</h2>
{{if .Rows}}<table>
<tr><th>time</th><th>process</th><th>call</th><th>result</th><th>device</th></tr>
{{range .Rows}}<tr{{if .Failing}} class="fail"{{end}}><td>{{.Time}}</td><td>{{.Proc}}</td><td>{{.Call}}</td><td>{{.Result}}{{if .Failing}} ◀{{end}}</td><td>{{.Dev}}</td></tr>
{{end}}</table>{{else}}<p>No NVIDIA device call was traced.</p>{{end}}
<footer>{{.Trace}}{{range .Notes}}<br>{{.}}{{end}}<br>{{.Tool}}</footer>
</body>
</html>
`))

func renderHTML(w io.Writer, rep *Report, o RenderOptions) error {
	a := &rep.Analysis
	p := htmlPage{Verdict: esc(a.Verdict), Failed: a.Failing != nil || (a.CUDA != nil && a.CUDA.Status == "failed"),
		Rows: timelineRows(rep, o.AllEvents), Trace: esc(traceSummary(rep)), Tool: "cudatrace " + esc(rep.Tool.Version)}
	if d := dropWarning(rep); d != "" {
		p.Incomplete, p.Dropped = true, d
	}
	if e := a.Failing; e != nil {
		p.Failing = esc(annotate.FormatCall(e) + " " + formatOutcome(rep, e))
		p.FailingBy = fmt.Sprintf("by %s[%d] (tid %d) at +%s", esc(e.Comm), e.PID, e.TID, fmtDur(e.Time))
	}
	for _, f := range a.Findings {
		hf := htmlFinding{Class: string(f.Severity), Label: strings.ToUpper(string(f.Severity)), Summary: esc(f.Summary), ID: esc(f.ID), Inferred: f.Inferred}
		for _, d := range f.Detail {
			hf.Detail = append(hf.Detail, esc(d))
		}
		if f.Fix != "" {
			hf.Fix = escLines(f.Fix)
		}
		p.Findings = append(p.Findings, hf)
	}
	for _, n := range rep.Trace.Notes {
		p.Notes = append(p.Notes, "Note: "+esc(n))
	}
	for _, l := range rep.Trace.Limits {
		p.Notes = append(p.Notes, "Cannot tell: "+esc(l))
	}
	if rep.Snapshot != nil {
		for _, u := range rep.Snapshot.Unavailable {
			p.Notes = append(p.Notes, "Not checked: "+esc(u))
		}
	}
	return htmlTemplate.Execute(w, p)
}
