package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/report"
)

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
