package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func completionScript(t *testing.T, shell string) string {
	t.Helper()
	r := runCLI(t, "completion", shell)
	if r.code != exitOK || r.stdout == "" {
		t.Fatalf("completion %s: exit %d, stderr %q", shell, r.code, r.stderr)
	}
	path := filepath.Join(t.TempDir(), "cudatrace."+shell)
	if err := os.WriteFile(path, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bash: the generated function completes command words, flag names and
// flag values, and hands a traced command over to bash's own completion.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script := completionScript(t, "bash")
	for _, tc := range []struct {
		words []string
		want  []string
		not   []string
	}{
		{[]string{"rep"}, []string{"report"}, nil},
		{[]string{"ex"}, []string{"explain"}, nil},
		{[]string{"--format", ""}, []string{"text", "json", "markdown"}, nil},
		{[]string{"--backend", "e"}, []string{"ebpf"}, []string{"auto"}},
		{[]string{"report", "--"}, []string{"--format", "--output", "--redact"}, []string{"--backend", "--user"}},
		{[]string{"--du"}, []string{"--duration"}, nil},
		{[]string{"completion", ""}, []string{"bash", "zsh", "fish"}, nil},
		{[]string{"help", "comp"}, []string{"completion"}, nil},
		{[]string{"-o", "x.json", "--", "ech"}, []string{"echo"}, []string{"report"}},
		{[]string{"-q", "ech"}, []string{"echo"}, nil},
		// Each command completes its own flags and their values.
		{[]string{"watch", "--"}, []string{"--format", "--json", "--report-dir", "--metrics", "--comm"}, []string{"--backend", "--all-events", "--user"}},
		{[]string{"doctor", "--"}, []string{"--format", "--cgroup", "--pid", "--user", "--color"}, []string{"--all-events", "--backend", "-f"}},
		{[]string{"doctor", "--format", ""}, []string{"text", "json", "markdown"}, nil},
		{[]string{"watch", "--format", ""}, []string{"json", "text"}, []string{"markdown"}},
		{[]string{"watch", "--metrics", ":9464", "--"}, []string{"--report-dir"}, nil},
		{[]string{"--color", ""}, []string{"auto", "always", "never"}, nil},
		{[]string{"ma"}, []string{"man"}, nil},
		{[]string{"help", "m"}, []string{"man"}, nil},
	} {
		words := append([]string{"cudatrace"}, tc.words...)
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoted, " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _cudatrace; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command(bash, "-c", prog, "bash", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.words, err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range tc.want {
			if !contains(got, w) {
				t.Errorf("%v: completions %v lack %q", tc.words, got, w)
			}
		}
		for _, w := range tc.not {
			if contains(got, w) {
				t.Errorf("%v: completions %v include %q", tc.words, got, w)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// fish: the same questions, asked through fish's own complete -C.
func TestFishCompletion(t *testing.T) {
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Skip("no fish (apt-get install fish)")
	}
	script := completionScript(t, "fish")
	for line, want := range map[string]string{
		"cudatrace rep":                "report",
		"cudatrace ma":                 "man",
		"cudatrace --format ":          "json",
		"cudatrace --back":             "--backend",
		"cudatrace help ex":            "explain",
		"cudatrace completion ":        "zsh",
		"cudatrace watch --rep":        "--report-dir",
		"cudatrace doctor --cg":        "--cgroup",
		"cudatrace doctor --format ":   "markdown",
		"cudatrace report x.json --al": "--all-events",
	} {
		out, err := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, out)
		}
		var got []string
		for _, l := range strings.Split(string(out), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		if !contains(got, want) {
			t.Errorf("%q: completions %q lack %q", line, got, want)
		}
	}
	// A command offers its own flags only, not the trace form's.
	for line, not := range map[string][]string{
		"cudatrace watch --":  {"--backend", "--pid", "--all-events", "--user"},
		"cudatrace doctor --": {"--backend", "--all-events", "--duration"},
		"cudatrace report --": {"--backend", "--user", "--pid"},
	} {
		out, err := exec.Command(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if w := strings.SplitN(l, "\t", 2)[0]; contains(not, w) {
				t.Errorf("%q: offers %s, another command's flag", line, w)
			}
		}
	}
}

// zsh: the script parses, and compinit loads it as the completion for
// cudatrace. (Driving zsh's completion widget needs a pty harness; the
// _arguments specs come from the same flag table bash and fish test.)
func TestZshCompletion(t *testing.T) {
	zsh, err := exec.LookPath("zsh")
	if err != nil {
		t.Skip("no zsh (apt-get install zsh)")
	}
	script := completionScript(t, "zsh")
	dir := filepath.Dir(script)
	if err := os.Rename(script, filepath.Join(dir, "_cudatrace")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", filepath.Join(dir, "_cudatrace")).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s", err, out)
	}
	prog := `fpath=("$1" $fpath); autoload -Uz compinit; compinit -u -d "$1/.zcompdump"; print -r -- $_comps[cudatrace]`
	out, err := exec.Command(zsh, "-f", "-c", prog, "zsh", dir).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_cudatrace" {
		t.Fatalf("compinit did not register _cudatrace for cudatrace: %v\n%s", err, out)
	}
}

func TestCompletionBadShell(t *testing.T) {
	r := runCLI(t, "completion", "tcsh")
	if r.code != exitUsage {
		t.Errorf("exit %d", r.code)
	}
	oneLineError(t, r, `no completion for shell "tcsh"`)
}
