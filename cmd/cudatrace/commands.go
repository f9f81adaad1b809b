package main

import (
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/spf13/pflag"
)

// subcommand is one word cudatrace takes before anything to trace. Adding
// one is adding a row to subcommands: help (cudatrace help X and X --help
// print the same), completion, the man page and the "did you mean"
// suggestion all read this table and the flag set it defines.
type subcommand struct {
	name    string
	args    string // the operands, for the usage line: "FILE"
	summary string // one line, for the command list
	about   string // paragraphs (blank-line separated), for its own help and the man page
	// flagSet is the one definition of the command's flags: parsing,
	// help, completion and the man page all take them from it. A run
	// command's values land in o; a direct one binds its own.
	flagSet func(o *options) *pflag.FlagSet
	// exits are the exit statuses it uses, worded for it.
	exits []exitRow
	run   func(args []string, o *options, stdout, stderr io.Writer) error
	// direct, when set, takes the arguments unparsed: a command with flags
	// of its own (doctor's --pid takes one PID, -u a user to check).
	direct func(args []string, stdout, stderr io.Writer) int
}

// exitRow is one line of a command's exit-status table.
type exitRow struct {
	code int
	text string
}

// renderFlags are the trace flags report and explain take too.
var renderFlags = []string{"format", "color", "summary", "output", "all-events", "redact", "quiet"}

// Exit rows the trace, report and explain forms share.
var (
	exitRowUsage    = exitRow{exitUsage, "usage error"}
	exitRowFailure  = exitRow{exitFailure, "cudatrace failed (no privileges, BPF unavailable, I/O error, a file that cannot be read, the -o report not written; a launched COMMAND's own status wins)"}
	exitRowNoneSeen = exitRow{exitOK, "no NVIDIA call failed (and CUDA, where its return code was traced, started)"}
	exitRowFound    = exitRow{exitFound, "a failing NVIDIA call was found, or CUDA's traced return code was an error"}
	exitRowBadInput = exitRow{exitBadInput, "the input is not a report or strace log, or holds no NVIDIA call (report prints it first); a device or FIFO is refused unread"}
	offlineExits    = []exitRow{exitRowNoneSeen, exitRowFailure, exitRowUsage, exitRowFound, exitRowBadInput}
	simpleExits     = []exitRow{{exitOK, "done"}, exitRowUsage}
)

// subcommands is filled in by init: help and completion refer to it.
var subcommands []subcommand

func init() {
	subcommands = []subcommand{
		{
			name: "report", args: "FILE", summary: "re-render and re-analyse a saved JSON report (no root needed)",
			about: "Loads a report written with -o, re-runs this build's analysis on its events and snapshot, " +
				"and prints it. A note on stderr says when the verdict differs from the stored one.",
			flagSet: renderFlagSet("report"), exits: offlineExits, run: reportCommand,
		},
		{
			name: "explain", args: "LOG [LOG...]", summary: "analyse 'strace -f -o LOG' output (several files for -ff)",
			about: "Reads strace output (best recorded with strace -f -tt -yy) and explains the failing NVIDIA call. " +
				"A log holds no cgroup programs or /proc/devices, so causes are inferred and marked so.",
			flagSet: renderFlagSet("explain"), exits: offlineExits, run: explainCommand,
		},
		{
			name: "doctor", args: "[-u USER] [--pid PID | --cgroup PATH]", summary: "check, without a target, whether CUDA can start here",
			about: doctorAbout, flagSet: func(*options) *pflag.FlagSet { return doctorFlagSet(new(doctorFlags)) },
			exits: doctorExits, direct: doctorCommand,
		},
		{
			name: "watch", args: "[flags]", summary: "diagnose every CUDA start on this host as it fails (eBPF)",
			about: watchAbout, flagSet: func(*options) *pflag.FlagSet { return watchFlagSet(new(watchFlags)) },
			exits: watchExits, direct: watchCommand,
		},
		{
			name: "help", args: "[COMMAND]", summary: "show help for cudatrace or one command",
			about:   "With a COMMAND, prints what 'cudatrace COMMAND --help' prints.",
			flagSet: helpOnly("help"), exits: simpleExits, run: helpCommand,
		},
		{
			name: "completion", args: "bash|zsh|fish", summary: "print a shell completion script",
			about: "bash: source <(cudatrace completion bash), or save it as /etc/bash_completion.d/cudatrace. " +
				"zsh: save it as _cudatrace in a directory on $fpath. " +
				"fish: save it as ~/.config/fish/completions/cudatrace.fish. " +
				"make install puts all three where the shells look.",
			flagSet: helpOnly("completion"), exits: simpleExits, run: completionCommand,
		},
		{
			name: "man", summary: "print the man page (roff), generated from these flags",
			about:   "cudatrace man | man -l - reads it; make install installs it as cudatrace(1).",
			flagSet: helpOnly("man"), exits: simpleExits, run: func(_ []string, _ *options, stdout, _ io.Writer) error {
				return writeManPage(stdout)
			},
		},
		{
			name: "version", summary: "print the version",
			flagSet: helpOnly("version"), exits: simpleExits, run: func(_ []string, _ *options, stdout, _ io.Writer) error {
				_, err := fmt.Fprintln(stdout, "cudatrace", toolVersion())
				return err
			},
		},
	}
}

// renderFlagSet is report's and explain's flag set: the named trace
// flags, the same definitions, plus --help.
func renderFlagSet(name string) func(*options) *pflag.FlagSet {
	return func(o *options) *pflag.FlagSet { return subsetFlagSet(name, renderFlags, o) }
}

func helpOnly(name string) func(*options) *pflag.FlagSet {
	return func(o *options) *pflag.FlagSet { return subsetFlagSet(name, nil, o) }
}

// flagsOf is sc's flag set, bound to throwaway values: for help,
// completion and the man page.
func flagsOf(sc *subcommand) *pflag.FlagSet { return sc.flagSet(new(options)) }

func subsetFlagSet(name string, names []string, o *options) *pflag.FlagSet {
	full := newFlagSet(o, io.Discard)
	fs := pflag.NewFlagSet("cudatrace "+name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	for _, n := range append(append([]string{}, names...), "help") {
		fs.AddFlag(full.Lookup(n))
	}
	return fs
}

func lookupSubcommand(name string) *subcommand {
	for i := range subcommands {
		if subcommands[i].name == name {
			return &subcommands[i]
		}
	}
	return nil
}

func subUsage(sc *subcommand) string {
	return strings.TrimSpace("cudatrace " + sc.name + " " + subOperands(sc))
}

// subOperands is what follows the word in the usage line.
func subOperands(sc *subcommand) string {
	u := sc.args
	if u == "" || u[0] != '[' {
		if hasFlags(flagsOf(sc)) {
			u = strings.TrimSpace(u + " [flags]")
		}
	}
	return u
}

// hasFlags reports whether fs has a visible flag besides --help.
func hasFlags(fs *pflag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			n++
		}
	})
	return n > 0
}

// writeSubHelp prints one subcommand's help: what both 'cudatrace help X'
// and 'cudatrace X --help' print.
func writeSubHelp(w io.Writer, sc *subcommand) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s.\n", subUsage(sc), capitalise(sc.summary))
	for _, para := range paragraphs(sc.about) {
		fmt.Fprintf(&b, "\n%s\n", wrap(para, 78))
	}
	fmt.Fprintf(&b, "\nFlags:\n%s", flagUsages(flagsOf(sc)))
	b.WriteString("\nExit status:\n")
	for _, r := range sc.exits {
		fmt.Fprintf(&b, "  %-3d  %s\n", r.code, wrapIndent(r.text, 70, 7))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// paragraphs splits text at blank lines.
func paragraphs(s string) []string {
	var out []string
	for _, p := range strings.Split(s, "\n\n") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// wrapIndent wraps s at width and indents the continuation lines.
func wrapIndent(s string, width, indent int) string {
	return strings.ReplaceAll(wrap(s, width), "\n", "\n"+strings.Repeat(" ", indent))
}

// commandList is the "Commands:" block of the main help.
func commandList() string {
	var b strings.Builder
	for _, sc := range subcommands {
		fmt.Fprintf(&b, "  %-11s %s\n", sc.name, sc.summary)
	}
	return b.String()
}

func helpCommand(args []string, _ *options, stdout, _ io.Writer) error {
	switch len(args) {
	case 0:
		return writeMainHelp(stdout)
	case 1:
		if sc := lookupSubcommand(args[0]); sc != nil {
			return writeSubHelp(stdout, sc)
		}
		return fail(exitUsage, "no help for %q: commands are %s", args[0], strings.Join(visibleNames(), ", "))
	}
	return fail(exitUsage, "usage: cudatrace help [COMMAND]")
}

func visibleNames() []string {
	var out []string
	for _, sc := range subcommands {
		out = append(out, sc.name)
	}
	return out
}

// suggestion is the subcommand word is probably a typo of, if word is not
// a program on PATH (cudatrace traces any program; a real one wins).
func suggestion(word string) string {
	if strings.ContainsRune(word, '/') {
		return ""
	}
	if _, err := exec.LookPath(word); err == nil {
		return ""
	}
	best, bestDist := "", 3
	for _, name := range visibleNames() {
		if d := editDistance(word, name); d < bestDist && d < len(name)/2+1 {
			best, bestDist = name, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (optimal string
// alignment): a swap of two neighbours counts once, so "reprot" is 1
// from "report".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// wrap breaks s into lines of at most width bytes at spaces.
func wrap(s string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
