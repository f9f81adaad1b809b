package render

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cudatrace/cudatrace/report"
)

// errorsCell is "EPERM×3, ENOENT": the failures of a row by error.
func errorsCell(r SummaryRow) string {
	names := make([]string, 0, len(r.ByErr))
	for n := range r.ByErr {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		if c := r.ByErr[n]; c > 1 {
			names[i] = fmt.Sprintf("%s×%d", n, c)
		}
	}
	return strings.Join(names, ", ")
}

// writeSummary prints the -c table.
func writeSummary(w io.Writer, rep *report.Report, p palette) error {
	rows := SummaryRows(rep)
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "\nSummary: no NVIDIA call was traced")
		return err
	}
	nodeW, callW := len("node"), len("call")
	for _, r := range rows {
		nodeW, callW = max(nodeW, len(esc(r.Node))), max(callW, len(esc(r.Call)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nSummary: calls per node and call\n%-*s  %-*s  %8s  %6s  %s\n", nodeW, "node", callW, "call", "calls", "errors", "by error")
	var calls, errs uint64
	for _, r := range rows {
		line := fmt.Sprintf("%-*s  %-*s  %8d  %6d  %s", nodeW, esc(r.Node), callW, esc(r.Call), r.Calls, r.Errors, esc(errorsCell(r)))
		if r.Errors > 0 {
			line = p.red(line)
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
		calls += r.Calls
		errs += r.Errors
	}
	fmt.Fprintf(&b, "%-*s  %-*s  %8d  %6d\n", nodeW, "total", callW, "", calls, errs)
	_, err := io.WriteString(w, b.String())
	return err
}
