package render

import (
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/report"
)

// A trace with no device call says so, in text and Markdown, instead of
// heading an empty table "Timeline: 0 device calls".
func TestEmptyTimeline(t *testing.T) {
	rep := &report.Report{Schema: report.SchemaVersion, Tool: report.Tool{Name: "cudatrace"}, Analysis: analysis.Result{Verdict: "nothing traced"}}
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var b strings.Builder
		if err := Report(&b, rep, f, Options{}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "0 device calls") || !strings.Contains(b.String(), "No NVIDIA device call was traced") && !strings.Contains(b.String(), "no NVIDIA device call was traced") {
			t.Errorf("%s:\n%s", f, b.String())
		}
		if strings.Contains(b.String(), "TIME") || strings.Contains(b.String(), "| time |") {
			t.Errorf("%s: an empty table was drawn:\n%s", f, b.String())
		}
	}
}

// In Markdown the Fix is prose, so its `commands` render as code spans,
// not as literal backticks inside a fenced block.
func TestMarkdownFixIsProse(t *testing.T) {
	rep := &report.Report{Schema: report.SchemaVersion, Tool: report.Tool{Name: "cudatrace"}, Analysis: analysis.Result{
		Verdict: "v",
		Findings: []analysis.Finding{{ID: "x", Severity: analysis.SeverityError, Summary: "s",
			Fix: "Allow `c 238:* rwm` in <cgroup>.\nThen restart."}},
	}}
	var b strings.Builder
	if err := Report(&b, rep, FormatMarkdown, Options{}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if strings.Contains(md, "```") {
		t.Errorf("the fix is in a code fence:\n%s", md)
	}
	if !strings.Contains(md, "**Fix:** Allow `c 238:* rwm` in &lt;cgroup&gt;. Then restart.\n") {
		t.Errorf("the fix is not one prose paragraph:\n%s", md)
	}
}
