package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer"
)

// Each subcommand has its own help, by --help, -h or cudatrace help CMD:
// its usage line and only the flags it takes.
func TestSubcommandHelp(t *testing.T) {
	for _, sc := range subcommands {
		want := runCLI(t, "help", sc.name).stdout
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
			// One help per command, whichever way it is asked for.
			if r.stdout != want {
				t.Errorf("%v differs from help %s:\n%s\n--- help %s:\n%s", args, sc.name, r.stdout, sc.name, want)
			}
			for _, f := range visibleFlags(flagsOf(&sc)) {
				if !strings.Contains(r.stdout, "--"+f.Name) {
					t.Errorf("%v: help lacks --%s", args, f.Name)
				}
			}
			// doctor parses its own flags, --user among them (whose nodes to check).
			if strings.Contains(r.stdout, "--backend") || (sc.direct == nil && strings.Contains(r.stdout, "--user")) {
				t.Errorf("%v: help lists trace-only flags:\n%s", args, r.stdout)
			}
			// Its own exit table, every code it lists and no other.
			for _, e := range sc.exits {
				if !strings.Contains(r.stdout, "\n  "+strconv.Itoa(e.code)+" ") {
					t.Errorf("%v: exit table lacks %d", args, e.code)
				}
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
		if !strings.Contains(page, ".B cudatrace "+sc.name+"\n") {
			t.Errorf("command %s is not in the synopsis", sc.name)
		}
		// Its section lists its own flags and exit statuses.
		sec := page[strings.Index(page, ".SS "+roff(subUsage(&sc))+"\n"):]
		sec = sec[:strings.Index(sec[4:], "\n.S")+4]
		for _, f := range visibleFlags(flagsOf(&sc)) {
			if f.Name != "help" && !strings.Contains(sec, `\fB\-\-`+roff(f.Name)+`\fR`) {
				t.Errorf("man page: %s's section lacks --%s", sc.name, f.Name)
			}
		}
		for _, e := range sc.exits {
			if !strings.Contains(sec, ".B "+strconv.Itoa(e.code)+"\n") {
				t.Errorf("man page: %s's section lacks exit status %d", sc.name, e.code)
			}
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

// --color always colours a pipe, never and NO_COLOR keep a report plain,
// and a word other than auto, always or never is a usage error.
func TestColorFlag(t *testing.T) {
	file := filepath.Join("..", "..", "render", "testdata", "golden", "lxc-deny-uvm.json")
	if r := runCLI(t, "report", file, "--color", "always"); !strings.Contains(r.stdout, "\x1b[") {
		t.Errorf("--color always: no colour in %q", r.stdout)
	}
	t.Setenv("NO_COLOR", "1")
	for _, args := range [][]string{{"report", file, "--color", "never"}, {"report", file}} {
		if r := runCLI(t, args...); strings.Contains(r.stdout, "\x1b[") || r.code != exitFound {
			t.Errorf("%v: exit %d, colour in %q", args, r.code, r.stdout)
		}
	}
	r := runCLI(t, "report", file, "--color", "yes")
	if r.code != exitUsage {
		t.Errorf("--color yes: exit %d", r.code)
	}
	oneLineError(t, r, `--color "yes": use auto, always or never`)
	// -c is strace's summary: calls and errors per node, no timeline.
	r = runCLI(t, "report", file, "-c")
	if !strings.Contains(r.stdout, "Summary: calls per node and call") || strings.Contains(r.stdout, "Timeline:") {
		t.Errorf("-c:\n%s", r.stdout)
	}
}

// watch spells the output format as every command does: --format, with
// --json its documented alias; no command uses -f (strace's follow) for it.
func TestWatchFormatFlag(t *testing.T) {
	for args, want := range map[string]string{
		"watch --format yaml":        `unknown format "yaml": use json or text`,
		"watch --json --format text": "--json and --format text disagree",
	} {
		r := runCLI(t, strings.Fields(args)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
	for _, sc := range subcommands {
		fs := flagsOf(&sc)
		if f := fs.Lookup("format"); f != nil && f.Shorthand != "" {
			t.Errorf("%s: --format has the short flag -%s", sc.name, f.Shorthand)
		}
		if f := fs.ShorthandLookup("f"); f != nil {
			t.Errorf("%s: -f is --%s (strace's -f is follow)", sc.name, f.Name)
		}
	}
}

// A report of a run that made no NVIDIA call and a strace log of one end
// with the same documented status, 4; the report is still printed.
func TestNothingNVIDIAExitsAlike(t *testing.T) {
	dir := t.TempDir()
	rep := &report.Report{Schema: report.SchemaVersion, Tool: report.Tool{Name: "cudatrace", Version: "test"},
		Trace: report.Trace{Source: "live", Backend: "ebpf", Events: 2, Stored: 2, Complete: true},
		Events: []tracer.Event{
			{Seq: 1, PID: 7, TID: 7, Comm: "true", Kind: tracer.KindExec, Syscall: "execve", Path: "/bin/true", Argv: []string{"true"}},
			{Seq: 2, PID: 7, TID: 7, Comm: "true", Kind: tracer.KindExit},
		}}
	saved := filepath.Join(dir, "r.json")
	if err := report.Save(saved, rep); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "s.log")
	if err := os.WriteFile(log, []byte("7 10:00:00.000001 execve(\"/bin/true\", [\"true\"], 0x7ffd /* 1 vars */) = 0\n7 10:00:00.000100 +++ exited with 0 +++\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "report", saved)
	if r.code != exitBadInput || !strings.Contains(r.stdout, "Trace:") {
		t.Errorf("report: exit %d, stdout %q", r.code, r.stdout)
	}
	oneLineError(t, r, "holds no NVIDIA call")
	e := runCLI(t, "explain", log)
	if e.code != exitBadInput {
		t.Errorf("explain: exit %d, stderr %q", e.code, e.stderr)
	}
	for _, cmd := range []string{"report", "explain"} {
		if h := runCLI(t, "help", cmd).stdout; !strings.Contains(h, "4    the input is not a report or strace log, or holds no NVIDIA call") {
			t.Errorf("help %s does not document 4:\n%s", cmd, h)
		}
	}
}

// --format html: one self-contained page on stdout, for a bug ticket.
func TestReportFormatHTML(t *testing.T) {
	file := filepath.Join("..", "..", "render", "testdata", "golden", "lxc-deny-uvm.json")
	r := runCLI(t, "report", file, "--format", "html")
	if r.code != exitFound || !strings.HasPrefix(r.stdout, "<!DOCTYPE html>") || !strings.Contains(r.stdout, "cgroup2-denied") {
		t.Errorf("exit %d, stdout %.200q", r.code, r.stdout)
	}
}
