package report_test

import (
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
)

// A report written by an older version holds every CUDA_* and NVIDIA_*
// variable, an API key included: neither --redact's output nor the
// Markdown carries it, and the variables that matter stay.
func TestOldReportEnvSecrets(t *testing.T) {
	old := func() *report.Report {
		rep := reportfixture.Build(t, reportfixture.All[0])
		rep.Snapshot.Env = map[string]string{
			"NVIDIA_API_KEY":         "nvapi-s3cr3t",
			"CUDA_AUTH_TOKEN":        "t0k3n-s3cr3t",
			"NVIDIA_VISIBLE_DEVICES": "all",
			"LD_LIBRARY_PATH":        "/usr/local/nvidia/lib64",
		}
		return rep
	}
	var md strings.Builder
	if err := render.Report(&md, old(), render.FormatMarkdown, render.Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(md.String(), "s3cr3t") || !strings.Contains(md.String(), "`NVIDIA_VISIBLE_DEVICES=all`") {
		t.Errorf("Markdown env:\n%s", md.String())
	}

	rep := old()
	report.Redact(rep)
	var js strings.Builder
	if err := report.WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), "s3cr3t") || strings.Contains(js.String(), "NVIDIA_API_KEY") {
		t.Errorf("redacted report keeps a secret: %v", rep.Snapshot.Env)
	}
	if len(rep.Snapshot.Env) != 2 || rep.Snapshot.Env["LD_LIBRARY_PATH"] != "/usr/local/nvidia/lib64" {
		t.Errorf("redaction lost the variables that matter: %v", rep.Snapshot.Env)
	}
}
