package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/report"
)

// emit finishes every command that produces a report: redact, save (-o),
// print, and map the verdict to the exit status (3 when a call failed).
func emit(rep *report.Report, o *options, stdout, stderr io.Writer, tracing bool) error {
	if o.redact {
		report.Redact(rep)
	}
	if o.output != "" {
		if err := report.Save(o.output, rep); err != nil {
			return fail(exitFailure, "write report: %v", err)
		}
	}
	if err := render(stdout, stderr, rep, o, tracing); err != nil {
		return err
	}
	if o.output != "" && tracing && !o.quiet {
		fmt.Fprintf(stderr, "cudatrace: report written to %s\n", o.output)
	}
	if rep.Analysis.Failing != nil {
		return &exitError{code: exitFound}
	}
	return nil
}

// render prints the report: on stderr while tracing (stdout belongs to the
// target), on stdout for report and explain.
func render(stdout, stderr io.Writer, rep *report.Report, o *options, tracing bool) error {
	w := stdout
	if tracing {
		w = stderr
	}
	f := report.Format(o.format)
	if o.format == "md" {
		f = report.FormatMarkdown
	}
	ro := report.RenderOptions{AllEvents: o.allEvents, Quiet: o.quiet}
	if file, ok := w.(*os.File); ok {
		ro.Color, ro.Width = terminal(file)
	}
	if err := report.Render(w, rep, f, ro); err != nil {
		return fail(exitFailure, "print report: %v", err)
	}
	return nil
}

// terminal reports whether f is a terminal that wants colour (NO_COLOR
// unset) and its width.
func terminal(f *os.File) (color bool, width int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return false, 0
	}
	_, noColor := os.LookupEnv("NO_COLOR")
	return !noColor, int(ws.Col)
}
