package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// writeManPage prints cudatrace(1) in roff, from the flag definitions and
// the subcommand table that --help uses. A few dozen lines of roff need no
// library: cobra's doc generator (go-md2man) expects cobra commands, and
// this CLI is plain pflag.
func writeManPage(w io.Writer) error {
	var o options
	fl := visibleFlags(newFlagSet(&o, io.Discard))
	var b strings.Builder
	fmt.Fprintf(&b, ".TH CUDATRACE 1 \"\" \"cudatrace %s\" \"User Commands\"\n", roff(toolVersion()))
	b.WriteString(".SH NAME\ncudatrace \\- find the /dev/nvidia* call that makes CUDA initialisation fail\n")
	b.WriteString(".SH SYNOPSIS\n")
	b.WriteString(".B cudatrace\n[\\fIflags\\fR] [\\fB\\-\\-\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR...]\n.br\n")
	b.WriteString(".B cudatrace\n[\\fIflags\\fR] \\fB\\-p\\fR \\fIPID\\fR[,\\fIPID\\fR...]\n")
	for _, sc := range subcommands {
		fmt.Fprintf(&b, ".br\n.B cudatrace %s\n%s\n", sc.name, roff(subOperands(&sc)))
	}
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(roff("cudatrace traces the /dev/nvidia* calls of COMMAND (with its children and threads) or of running processes, "+
		"with eBPF or, failing that, ptrace; snapshots the device nodes, /proc/devices, mounts, credentials and device cgroups "+
		"the target sees; and explains the one call that makes CUDA initialisation fail, with the fix.") + "\n")
	b.WriteString(".PP\n" + roff("A launched COMMAND keeps its standard output, as with strace: the report goes to standard error. "+
		"Attached (-p), for report and explain, and with --format json, the report goes to standard output.") + "\n")
	b.WriteString(".PP\n" + roff("Tracing needs root (or CAP_BPF and CAP_PERFMON) for eBPF; without it the ptrace backend traces processes you own.") + "\n")
	b.WriteString(".SH OPTIONS\n")
	for _, f := range fl {
		b.WriteString(manFlag(f))
	}
	b.WriteString(".SH COMMANDS\n")
	for _, sc := range subcommands {
		fmt.Fprintf(&b, ".SS %s\n%s.\n", roff(subUsage(&sc)), roff(capitalise(sc.summary)))
		for _, para := range paragraphs(sc.about) {
			b.WriteString(".PP\n" + roff(strings.Join(strings.Fields(para), " ")) + "\n")
		}
		if fl := visibleFlags(flagsOf(&sc)); hasFlags(flagsOf(&sc)) {
			b.WriteString(".PP\nFlags:\n.RS\n")
			for _, f := range fl {
				if f.Name != "help" {
					b.WriteString(manFlag(f))
				}
			}
			b.WriteString(".RE\n")
		}
		b.WriteString(".PP\nExit status:\n.RS\n")
		for _, r := range sc.exits {
			fmt.Fprintf(&b, ".TP\n.B %d\n%s.\n", r.code, roff(capitalise(r.text)))
		}
		b.WriteString(".RE\n")
	}
	b.WriteString(".SH \"EXIT STATUS\"\n")
	b.WriteString(".TP\n.I COMMAND's own\nWhen launching: its exit code, or 128+N if signal N killed it.\n")
	for _, r := range traceExits {
		fmt.Fprintf(&b, ".TP\n.B %d\n%s.\n", r.code, roff(capitalise(r.text)))
	}
	b.WriteString(".PP\nEach command's own are under COMMANDS.\n")
	b.WriteString(".SH EXAMPLES\n")
	for _, ex := range []string{
		"sudo cudatrace -- python3 -c 'import torch; torch.zeros(1).cuda()'",
		"sudo cudatrace -u nobody -o report.json -- ./train",
		"sudo cudatrace -p 4242 --duration 30s",
		"cudatrace report report.json --format markdown",
		"source <(cudatrace completion bash)",
	} {
		fmt.Fprintf(&b, ".PP\n.nf\n%s\n.fi\n", roff(ex))
	}
	b.WriteString(".SH \"SEE ALSO\"\n.BR strace (1),\n.BR bpftool (8)\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func manFlag(f *pflag.Flag) string {
	name, usage := pflag.UnquoteUsage(f)
	left := "\\fB\\-\\-" + roff(f.Name) + "\\fR"
	if f.Shorthand != "" {
		left = "\\fB\\-" + roff(f.Shorthand) + "\\fR, " + left
	}
	if takesValue(f) && name != "" {
		left += " \\fI" + roff(name) + "\\fR"
	}
	if d := f.DefValue; takesValue(f) && d != "" && d != "0" && d != "0s" && d != "[]" {
		usage += fmt.Sprintf(" (default %s)", d)
	}
	return ".TP\n" + left + "\n" + roff(capitalise(usage)) + ".\n"
}

// roff escapes text for a roff line: backslashes, hyphens (so they are
// not turned into dashes or break points) and a leading control character.
func roff(s string) string {
	s = strings.NewReplacer(`\`, `\e`, "-", `\-`).Replace(s)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
