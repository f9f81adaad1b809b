package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Each subcommand has its own help, by --help, -h or cudatrace help CMD:
// its usage line and only the flags it takes.
func TestSubcommandHelp(t *testing.T) {
	for _, sc := range subcommands {
		for _, args := range [][]string{{sc.name, "--help"}, {sc.name, "-h"}, {"help", sc.name}} {
			r := runCLI(t, args...)
			if r.code != exitOK || r.stderr != "" {
				t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "Usage: "+subUsage(&sc)+"\n") {
				t.Errorf("%v: help does not start with its usage line:\n%s", args, r.stdout)
			}
			if strings.Contains(r.stdout, "Commands:") || strings.Contains(r.stdout, "127") {
				t.Errorf("%v: printed the global help:\n%s", args, r.stdout)
			}
			for _, f := range sc.flags {
				if !strings.Contains(r.stdout, "--"+f) {
					t.Errorf("%v: help lacks --%s", args, f)
				}
			}
			if strings.Contains(r.stdout, "--backend") || strings.Contains(r.stdout, "--user") {
				t.Errorf("%v: help lists trace-only flags:\n%s", args, r.stdout)
			}
		}
	}
	// A trace-only flag is an error for report, not silently ignored.
	r := runCLI(t, "report", "x.json", "--user", "nobody")
	if r.code != exitUsage || !strings.Contains(r.stderr, "unknown flag: --user") || !strings.Contains(r.stderr, "cudatrace help report") {
		t.Errorf("report --user: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "help", "bogus")
	if r.code != exitUsage || !strings.Contains(r.stderr, `no help for "bogus"`) {
		t.Errorf("help bogus: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A first word a letter or two from a command word, and not a program on
// PATH, is a typo: say which command was meant instead of tracing it.
func TestDidYouMean(t *testing.T) {
	for word, want := range map[string]string{"reprot": "report", "explian": "explain", "rport": "report", "verison": "version", "hlep": "help"} {
		r := runCLI(t, word, "x")
		if r.code != exitUsage || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q", word, r.code, r.stdout)
		}
		oneLineError(t, r, `did you mean "`+want+`"?`)
	}
	// Far from every command word: traced as a command, not found.
	r := runCLI(t, "no-such-program-xyz")
	if r.code != exitNotFound {
		t.Errorf("no-such-program-xyz: exit %d, want %d; stderr %q", r.code, exitNotFound, r.stderr)
	}
	// A real program of that name wins.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "reprot"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	if s := suggestion("reprot"); s != "" {
		t.Errorf("reprot is on PATH, yet suggested %q", s)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"report", "report", 0}, {"reprot", "report", 1}, {"rep", "report", 3}, {"", "abc", 3}, {"explian", "explain", 1}, {"python3", "report", 6}} {
		if got := editDistance(tc.a, tc.b); got != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}

// strace's -f is accepted (cudatrace always follows); --format has no
// short flag to collide with it.
func TestFollowFlagIsStraces(t *testing.T) {
	var o options
	fs := newFlagSet(&o, &bytes.Buffer{})
	if err := fs.Parse([]string{"-f", "--", "true"}); err != nil {
		t.Fatalf("-f: %v", err)
	}
	if o.format != "text" {
		t.Errorf("-f changed the format to %q", o.format)
	}
	if f := fs.Lookup("format"); f.Shorthand != "" {
		t.Errorf("--format has the short flag -%s", f.Shorthand)
	}
	r := runCLI(t, "-f", "--format", "bogus", "--", "true")
	oneLineError(t, r, `unknown format "bogus"`) // -f itself was fine
}

func TestPIDNotANumber(t *testing.T) {
	for _, arg := range []string{"abc", "12,x", ""} {
		r := runCLI(t, "-p", arg)
		if r.code != exitUsage {
			t.Errorf("-p %q: exit %d", arg, r.code)
		}
		oneLineError(t, r, "not a process ID")
		if strings.Contains(r.stderr, "strconv") {
			t.Errorf("-p %q: %q", arg, r.stderr)
		}
	}
	var o options
	fs := newFlagSet(&o, &bytes.Buffer{})
	if err := fs.Parse([]string{"-p", "1,2", "-p", "3"}); err != nil || len(o.pids) != 3 || o.pids[2] != 3 {
		t.Errorf("-p 1,2 -p 3: %v %v", o.pids, err)
	}
}

// The man page documents every visible flag and command word, and man
// renders it without a warning.
func TestManPage(t *testing.T) {
	r := runCLI(t, "man")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	page := r.stdout
	var o options
	newFlagSet(&o, &bytes.Buffer{}).VisitAll(func(f *pflag.Flag) {
		has := strings.Contains(page, `\fB\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+`\fR`)
		if has == f.Hidden {
			t.Errorf("--%s: hidden %v, in the man page %v", f.Name, f.Hidden, has)
		}
	})
	for _, sc := range subcommands {
		if has := strings.Contains(page, ".B cudatrace "+sc.name+"\n"); has == sc.hidden {
			t.Errorf("command %s: hidden %v, in the synopsis %v", sc.name, sc.hidden, has)
		}
	}
	if _, err := exec.LookPath("man"); err != nil {
		t.Skip("no man here to render the page")
	}
	cmd := exec.Command("man", "--warnings", "-l", "-")
	cmd.Stdin = strings.NewReader(page)
	cmd.Env = append(os.Environ(), "MANPAGER=cat", "MANWIDTH=80")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "warning") {
		t.Fatalf("man: %v\n%s", err, out)
	}
	for _, want := range []string{"EXIT STATUS", "--output FILE", "cudatrace report FILE [flags]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
}

// no-color.org: NO_COLOR set and not empty turns colour off; empty does
// not. TERM=dumb turns it off too.
func TestWantColor(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, true},
		{map[string]string{"NO_COLOR": ""}, true},
		{map[string]string{"NO_COLOR": "1"}, false},
		{map[string]string{"TERM": "dumb"}, false},
		{map[string]string{"TERM": "xterm-256color"}, true},
	} {
		if got := wantColor(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("%v: colour %v, want %v", tc.env, got, tc.want)
		}
	}
}
