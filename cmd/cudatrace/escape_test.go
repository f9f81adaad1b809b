package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// hostilePath is an NVIDIA path as a crafted strace log spells it (strace
// escapes): a terminal title and clear-screen sequence, BEL, CR/LF, a bidi
// override, and Markdown that would close the code span, the table cell
// and the <details> around it.
const hostilePath = `/dev/nvidia-uvm\33]0;pwned\7\33[2J\r\n</details>|` + "`x`" + `\342\200\256`

// hostileText is the same, raw, as a crafted JSON report holds it.
const hostileText = "x\x1b]0;pwned\x07\x1b[2J\r\n</details>|`x`\u202e"

func assertPrintableOutput(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("%s: raw %U at byte %d: %q", what, r, i, out[max(0, i-30):min(len(out), i+30)])
			return
		}
	}
}

// writeHostileLog is the real H200 uvm-denied recording with the denied
// node renamed to hostilePath.
func writeHostileLog(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(recordings + "cuinit-deny-uvm.strace")
	if err != nil {
		t.Fatal(err)
	}
	crafted := strings.ReplaceAll(string(data), `"/dev/nvidia-uvm"`, `"`+hostilePath+`"`)
	p := filepath.Join(t.TempDir(), "crafted.strace")
	if err := os.WriteFile(p, []byte(crafted), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// explain on a crafted log, then report on a crafted JSON: the failing
// path, and every string the file supplies, reach stdout and stderr
// escaped.
func TestCraftedInputIsEscaped(t *testing.T) {
	log := writeHostileLog(t)
	for _, format := range []string{"text", "markdown"} {
		r := runCLI(t, "explain", log, "--format", format, "--all-events")
		if r.code != exitFound {
			t.Fatalf("explain --format %s: exit %d; stderr:\n%s", format, r.code, r.stderr)
		}
		assertPrintableOutput(t, "explain "+format, r.stdout+r.stderr)
		if !strings.Contains(r.stdout, `\x1b]0;pwned\a`) {
			t.Errorf("explain %s does not show the crafted path escaped:\n%s", format, r.stdout)
		}
	}

	r := runCLI(t, "explain", log, "--format", "json")
	var rep map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("explain json: %v", err)
	}
	rep["trace"].(map[string]any)["notes"] = []string{hostileText}
	rep["tool"].(map[string]any)["version"] = hostileText
	rep["snapshot"] = map[string]any{
		"unavailable": []string{hostileText},
		"process":     map[string]any{"pid": 639, "comm": hostileText, "user": hostileText},
		"mounts":      []map[string]any{{"mount_point": "/dev", "root": hostileText, "fstype": hostileText, "source": hostileText, "nodev": true, "bind": true}},
		"nodes":       []map[string]any{{"path": "/dev/" + hostileText, "exists": true, "type": "c"}},
		"env":         map[string]string{"LD_LIBRARY_PATH": hostileText},
		"kernel_log":  []map[string]any{{"seq": 1, "text": hostileText}},
	}
	// A stored finding id the re-analysis does not produce: the note on
	// stderr names it.
	analysis := rep["analysis"].(map[string]any)
	analysis["findings"] = append(analysis["findings"].([]any), map[string]any{"id": hostileText, "severity": "error", "summary": hostileText})
	crafted, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "crafted.json")
	if err := os.WriteFile(p, crafted, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"text", "markdown"} {
		r := runCLI(t, "report", p, "--format", format, "--all-events")
		if r.code != exitFound {
			t.Fatalf("report --format %s: exit %d; stderr:\n%s", format, r.code, r.stderr)
		}
		assertPrintableOutput(t, "report "+format, r.stdout+r.stderr)
		if !strings.Contains(r.stderr, "differs from the stored one") {
			t.Errorf("report %s: no note about the stored finding: %q", format, r.stderr)
		}
		if strings.Count(r.stdout, "pwned") < 3 {
			t.Errorf("report %s does not show the crafted strings:\n%s", format, r.stdout)
		}
	}
}
