package main

import (
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/spf13/pflag"
)

// subcommand is one word cudatrace takes before anything to trace. Adding
// one is adding a row to subcommands: help, completion, the man page and
// the "did you mean" suggestion all read this table.
type subcommand struct {
	name    string
	args    string   // the operands, for the usage line: "FILE"
	summary string   // one line, for the command list
	about   string   // a paragraph, for its own help
	flags   []string // the long names of the flags it takes (besides --help)
	// exits lists the exit statuses it uses, from exitStatuses.
	exits  []int
	hidden bool
	run    func(args []string, o *options, stdout, stderr io.Writer) error
	// direct, when set, takes the arguments unparsed: a command with flags
	// of its own (doctor's --pid takes one PID, -u a user to check).
	direct func(args []string, stdout, stderr io.Writer) int
}

var renderFlags = []string{"format", "output", "all-events", "redact", "quiet"}

// subcommands is filled in by init: help and completion refer to it.
var subcommands []subcommand

func init() {
	subcommands = []subcommand{
		{
			name: "report", args: "FILE", summary: "re-render and re-analyse a saved JSON report (no root needed)",
			about: "Loads a report written with -o, re-runs this build's analysis on its events and snapshot, " +
				"and prints it. A note on stderr says when the verdict differs from the stored one.",
			flags: renderFlags, exits: []int{0, 1, 2, 3, 4}, run: reportCommand,
		},
		{
			name: "explain", args: "LOG [LOG...]", summary: "analyse 'strace -f -o LOG' output (several files for -ff)",
			about: "Reads strace output (best recorded with strace -f -tt -yy) and explains the failing NVIDIA call. " +
				"A log holds no cgroup programs or /proc/devices, so causes are inferred and marked so.",
			flags: renderFlags, exits: []int{0, 1, 2, 3, 4}, run: explainCommand,
		},
		{
			name: "doctor", args: "[-u USER] [--pid PID | --cgroup PATH]", summary: "check, without a target, whether CUDA can start here",
			about: "Checks the NVIDIA nodes, the device cgroup policy, every LXC/Proxmox/incus config and CDI spec, " +
				"the driver and the environment; prints PASS/WARN/FAIL with a fix for each problem. " +
				"'cudatrace doctor --help' lists its flags.",
			exits: []int{0, 1, 2, 3, 5}, direct: doctorCommand,
		},
		{
			name: "watch", args: "[flags]", summary: "diagnose every CUDA start on this host as it fails (eBPF)",
			about: "Follows every process that opens an NVIDIA node or a CUDA/NVML library, and prints one line (JSON on a pipe) " +
				"per process in which CUDA or a device call failed, with the cause, the fix and where it runs; " +
				"--metrics serves Prometheus metrics. 'cudatrace watch --help' lists its flags.",
			exits: []int{0, 1, 2}, direct: watchCommand,
		},
		{
			name: "help", args: "[COMMAND]", summary: "show help for cudatrace or one command",
			exits: []int{0, 2}, run: helpCommand,
		},
		{
			name: "completion", args: "bash|zsh|fish", summary: "print a shell completion script",
			about: "bash: source <(cudatrace completion bash), or save it as /etc/bash_completion.d/cudatrace. " +
				"zsh: save it as _cudatrace in a directory on $fpath. " +
				"fish: save it as ~/.config/fish/completions/cudatrace.fish.",
			exits: []int{0, 2}, run: completionCommand,
		},
		{
			name: "version", summary: "print the version",
			exits: []int{0}, run: func(_ []string, _ *options, stdout, _ io.Writer) error {
				_, err := fmt.Fprintln(stdout, "cudatrace", toolVersion())
				return err
			},
		},
		{
			name: "man", summary: "print the man page (roff), generated from these flags",
			exits: []int{0}, hidden: true, run: func(_ []string, _ *options, stdout, _ io.Writer) error {
				return writeManPage(stdout)
			},
		},
	}
}

func lookupSubcommand(name string) *subcommand {
	for i := range subcommands {
		if subcommands[i].name == name {
			return &subcommands[i]
		}
	}
	return nil
}

// flagSetFor is the flag set of one subcommand: the named flags of the
// full set, the same definitions, plus --help.
func flagSetFor(sc *subcommand, o *options, stderr io.Writer) *pflag.FlagSet {
	full := newFlagSet(o, stderr)
	fs := pflag.NewFlagSet("cudatrace "+sc.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	for _, name := range append(append([]string{}, sc.flags...), "help") {
		fs.AddFlag(full.Lookup(name))
	}
	return fs
}

// exitStatuses words each exit status for help and the man page.
var exitStatuses = map[int]string{
	0:   "no NVIDIA call failed (and CUDA, where its return code was traced, started)",
	1:   "cudatrace failed (no privileges, BPF unavailable, I/O error)",
	2:   "usage error",
	3:   "a failing NVIDIA call was found",
	4:   "input is not a report or strace log, or holds nothing NVIDIA-related",
	5:   "doctor: no check FAILed, but one WARNed",
	126: "COMMAND is not executable",
	127: "COMMAND not found",
}

func subUsage(sc *subcommand) string {
	return strings.TrimSpace("cudatrace " + sc.name + " " + subOperands(sc))
}

// subOperands is what follows the word in the usage line.
func subOperands(sc *subcommand) string {
	u := sc.args
	if len(sc.flags) > 0 {
		u = strings.TrimSpace(u + " [flags]")
	}
	return u
}

// writeSubHelp prints one subcommand's help.
func writeSubHelp(w io.Writer, sc *subcommand) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s.\n", subUsage(sc), capitalise(sc.summary))
	if sc.about != "" {
		fmt.Fprintf(&b, "\n%s\n", wrap(sc.about, 78))
	}
	var o options
	fmt.Fprintf(&b, "\nFlags:\n%s", flagUsages(flagSetFor(sc, &o, io.Discard)))
	if len(sc.exits) > 1 {
		b.WriteString("\nExit status:\n")
		for _, c := range sc.exits {
			fmt.Fprintf(&b, "  %-3d  %s\n", c, exitStatuses[c])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// commandList is the "Commands:" block of the main help.
func commandList() string {
	var b strings.Builder
	for _, sc := range subcommands {
		if !sc.hidden {
			fmt.Fprintf(&b, "  %-11s %s\n", sc.name, sc.summary)
		}
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
		if !sc.hidden {
			out = append(out, sc.name)
		}
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
