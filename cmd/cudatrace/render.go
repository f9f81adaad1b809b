package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
)

// stdoutPath is the -o value that means standard output.
const stdoutPath = "-"

// checkOutput vets -o before anything runs: a trace may take hours, and a
// path that cannot be written should not be found after it. It also warns
// when the path looks like a format (-o json writes a file named json).
func checkOutput(o *options, stderr io.Writer) error {
	if o.output == "" || o.output == stdoutPath {
		return nil
	}
	if isFormatName(filepath.Base(o.output)) && filepath.Base(o.output) == o.output {
		if _, err := os.Lstat(o.output); err != nil {
			fmt.Fprintf(stderr, "cudatrace: warning: -o %s writes a file named %q; --format %s prints that format (-o - writes JSON to stdout)\n", o.output, o.output, o.output)
		}
	}
	out, err := report.OpenOutput(o.output)
	if err != nil {
		return fail(exitFailure, "-o %v", err)
	}
	o.out = out
	return nil
}

func isFormatName(s string) bool { return checkFormat(s) == nil }

// emit finishes every command that produces a report: redact, save (-o),
// print, and map the verdict to the exit status (3 when a call failed).
//
// Where it goes follows strace: a launched command keeps its stdout, so
// the human report goes to stderr. Everything else (report, explain,
// attach) and --format json print to stdout; -o - puts the JSON report on
// stdout, and then the human one goes to stderr.
func emit(rep *report.Report, o *options, stdout, stderr io.Writer, launched bool) error {
	if o.redact {
		report.Redact(rep)
	}
	f := render.Format(o.format)
	if o.format == "md" {
		f = render.FormatMarkdown
	}
	var saveErr error
	var movedTo string
	switch o.output {
	case "":
	case stdoutPath:
		if err := report.WriteJSON(stdout, rep); err != nil {
			return fail(exitFailure, "write report to stdout: %v", err)
		}
	default:
		if o.out == nil { // a caller that did not check first
			if saveErr = checkOutput(o, io.Discard); saveErr != nil {
				break
			}
		}
		movedTo, saveErr = o.out.Save(rep)
		o.out.Close()
	}
	w := stdout
	if (launched && f != render.FormatJSON) || o.output == stdoutPath {
		w = stderr
	}
	if !(f == render.FormatJSON && o.output == stdoutPath) {
		if err := printReport(w, rep, f, o); err != nil {
			if saveErr != nil {
				fmt.Fprintf(stderr, "cudatrace: report not saved: %v\n", saveErr)
			}
			if ee, ok := err.(*exitError); ok {
				ee.printFailed = true
			}
			return err
		}
	}
	switch {
	case saveErr != nil:
		// The report is on the screen; say what was not saved, once, last.
		fmt.Fprintf(stderr, "cudatrace: report not saved: %v\n", saveErr)
		return &exitError{code: exitFailure, saveFailed: true}
	case movedTo != "":
		fmt.Fprintf(stderr, "cudatrace: report written to %s: the directory of %s was moved while tracing\n", movedTo, o.output)
	case o.output != "" && o.output != stdoutPath && !o.quiet:
		fmt.Fprintf(stderr, "cudatrace: report written to %s\n", o.output)
	}
	if rep.Analysis.Failing != nil || (rep.Analysis.CUDA != nil && rep.Analysis.CUDA.Status == "failed") {
		return &exitError{code: exitFound}
	}
	return nil
}

// printReport prints the report in format f on w.
func printReport(w io.Writer, rep *report.Report, f render.Format, o *options) error {
	ro := render.Options{AllEvents: o.allEvents, Quiet: o.quiet, Summary: o.summary}
	ro.Width, ro.Color = terminalStyle(w, o.color)
	if err := render.Report(w, rep, f, ro); err != nil {
		if errors.Is(err, syscall.EPIPE) {
			// The reader left (`| head`): nobody to tell.
			return &exitError{code: exitFailure, printFailed: true}
		}
		return fail(exitFailure, "print report: %v", err)
	}
	return nil
}

// terminalWidth is f's width in columns, or 0 when f is not a terminal.
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// colorWhens are --color's values.
const colorWhens = "auto always never"

func checkColor(when string) error {
	switch when {
	case "auto", "always", "never":
		return nil
	}
	return fail(exitUsage, "--color %q: use auto, always or never", when)
}

// terminalStyle is w's width (0: not a terminal) and whether to colour
// what goes there: --color always or never decides; auto colours a
// terminal unless NO_COLOR or TERM=dumb says not to.
func terminalStyle(w io.Writer, when string) (width int, color bool) {
	if file, ok := w.(*os.File); ok {
		width = terminalWidth(file)
	}
	switch when {
	case "always":
		return width, true
	case "never":
		return width, false
	}
	return width, width > 0 && wantColor(os.Getenv)
}

// wantColor applies the conventions for a terminal: NO_COLOR set to
// anything but the empty string turns colour off (no-color.org), and so
// does TERM=dumb.
func wantColor(getenv func(string) string) bool {
	return getenv("NO_COLOR") == "" && getenv("TERM") != "dumb"
}
