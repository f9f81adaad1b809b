package snapshot

import (
	"slices"
	"strings"
	"testing"
)

// Argv secrets are masked by the environment's rule, and a token of a
// well-known shape wherever it stands; nothing else changes.
func TestMaskArgv(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"python3", "serve.py", "--hf-token=hf_abcdefghijklmnopqrstuv", "--port", "8000"},
			[]string{"python3", "serve.py", "--hf-token=<masked>", "--port", "8000"}},
		{[]string{"mysql", "--password", "hunter2", "-h", "db"}, []string{"mysql", "--password", "<masked>", "-h", "db"}},
		{[]string{"env", "API_KEY=abc", "OTHER=1", "job"}, []string{"env", "API_KEY=<masked>", "OTHER=1", "job"}},
		{[]string{"git", "clone", "https://me:s3cret@example.com/r.git"}, []string{"git", "clone", "https://me:<masked>@example.com/r.git"}},
		{[]string{"job", "ghp_0123456789abcdefABCDEF"}, []string{"job", "<masked>"}},
		// A flag with no value before the next flag masks nothing.
		{[]string{"job", "--use-auth-token", "--verbose"}, []string{"job", "--use-auth-token", "--verbose"}},
		{[]string{"python3", "train.py", "--epochs", "3"}, []string{"python3", "train.py", "--epochs", "3"}},
	} {
		in := slices.Clone(tc.in)
		if got := MaskArgv(in); !slices.Equal(got, tc.want) {
			t.Errorf("MaskArgv(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("MaskArgv changed its argument: %q", in)
		}
	}
	env := DiagnosticEnv(map[string]string{"LD_PRELOAD": "/opt/x.so", "NVIDIA_VISIBLE_DEVICES": "https://u:pw@h/x hf_abcdefghijklmnopqrstuv"})
	if v := env["NVIDIA_VISIBLE_DEVICES"]; strings.Contains(v, "pw") || strings.Contains(v, "hf_abc") {
		t.Errorf("a credential in NVIDIA_VISIBLE_DEVICES kept: %q", v)
	}
	if env["LD_PRELOAD"] != "/opt/x.so" {
		t.Errorf("LD_PRELOAD changed: %q", env["LD_PRELOAD"])
	}
}
