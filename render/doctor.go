package render

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/clipperhouse/displaywidth"

	"github.com/cudatrace/cudatrace/doctor"
)

// Doctor writes a doctor result as a table (text), JSON or Markdown.
// Every string in res is already escaped by doctor.Run.
func Doctor(w io.Writer, res *doctor.Result, f Format, o Options) error {
	switch f {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	case FormatMarkdown:
		return doctorMarkdown(w, res)
	default:
		return doctorText(w, res, o)
	}
}

func doctorVerdict(res *doctor.Result) string {
	c := res.Counts
	counts := fmt.Sprintf("%d pass, %d warn, %d fail, %d skipped", c.Pass, c.Warn, c.Fail, c.Skip)
	switch res.Status {
	case doctor.Fail:
		return "CUDA cannot start here until the FAIL rows are fixed (" + counts + ")."
	case doctor.Warn:
		return "CUDA can start, with warnings (" + counts + ")."
	}
	return "Everything CUDA needs to start checks out (" + counts + ")."
}

func statusLabel(p palette, s doctor.Status) string {
	switch s {
	case doctor.Fail:
		return p.red("FAIL")
	case doctor.Warn:
		return p.yellow("WARN")
	case doctor.Pass:
		return p.green("PASS")
	}
	return p.dim("SKIP")
}

func doctorText(w io.Writer, res *doctor.Result, o Options) error {
	p := palette{o.Color}
	width := o.Width
	if width <= 0 {
		width = 100
	}
	fmt.Fprintf(w, "cudatrace doctor: %s, kernel %s, driver %s; policy of %s, permissions of %s\n\n",
		orNone(res.Host.Hostname), orNone(res.Host.Kernel), orNone(res.Host.Driver), res.Subject, res.User)

	subjW, checkW := 8, 6
	for _, c := range res.Checks {
		subjW = max(subjW, min(displaywidth.String(c.Subject), 34))
		checkW = max(checkW, displaywidth.String(c.ID))
	}
	const gap = 2
	resultW := max(width-(4+checkW+subjW)-3*gap, 30)

	var buf strings.Builder
	t := plainTable(&buf, gap)
	t.Header([]string{"STATUS", "CHECK", "SUBJECT", "RESULT"})
	// Status colours go in after the layout: escape codes inside cells
	// would throw the widths off.
	var rowStatus []doctor.Status
	for _, c := range res.Checks {
		lines := wrapWords(c.Summary, resultW)
		subj := wrapWords(c.Subject, subjW)
		n := max(len(lines), len(subj))
		for len(subj) < n {
			subj = append(subj, "")
		}
		for len(lines) < n {
			lines = append(lines, "")
		}
		for range n {
			rowStatus = append(rowStatus, c.Status)
		}
		if err := t.Append([]string{string(c.Status), c.ID, strings.Join(subj, "\n"), strings.Join(lines, "\n")}); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	out := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	for i, line := range out {
		if i >= 2 && i-2 < len(rowStatus) && p.on {
			if st := string(rowStatus[i-2]); strings.HasPrefix(line, st) {
				line = statusLabel(p, rowStatus[i-2]) + line[len(st):]
			}
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}

	first := true
	for _, c := range res.Checks {
		if c.Status != doctor.Fail && c.Status != doctor.Warn {
			continue
		}
		if first {
			fmt.Fprintf(w, "\n%s\n", p.bold("Problems and fixes"))
			first = false
		}
		fmt.Fprintf(w, "\n%s %s  %s  [%s]\n", statusLabel(p, c.Status), c.Subject, c.Summary, c.ID)
		for _, d := range c.Detail {
			for i, l := range wrapWords(d, width-6) {
				if i == 0 {
					fmt.Fprintf(w, "      %s\n", l)
				} else {
					fmt.Fprintf(w, "        %s\n", l)
				}
			}
		}
		for i, f := range strings.Split(c.Fix, "\n") {
			if f == "" {
				continue
			}
			lead := "      "
			if i == 0 {
				lead = "  Fix: "
			}
			for j, l := range wrapWords(f, width-7) {
				if j == 0 {
					fmt.Fprintf(w, "%s%s\n", lead, l)
				} else {
					fmt.Fprintf(w, "       %s\n", l)
				}
			}
		}
	}
	if len(res.Unavailable) > 0 {
		fmt.Fprintf(w, "\n%s\n", p.dim("Not read:"))
		for _, u := range res.Unavailable {
			fmt.Fprintf(w, "  %s\n", p.dim(u))
		}
	}
	fmt.Fprintf(w, "\n%s\n", p.bold(doctorVerdict(res)))
	return nil
}

func doctorMarkdown(w io.Writer, res *doctor.Result) error {
	fmt.Fprintf(w, "## cudatrace doctor: %s\n\n", mdEscape(doctorVerdict(res)))
	fmt.Fprintf(w, "Host %s, kernel %s, driver %s. Device policy of %s; permissions of %s.\n\n",
		mdCell(orNone(res.Host.Hostname)), mdCell(orNone(res.Host.Kernel)), mdCell(orNone(res.Host.Driver)), mdCell(res.Subject), mdCell(res.User))
	fmt.Fprintln(w, "| Status | Check | Subject | Result |")
	fmt.Fprintln(w, "| --- | --- | --- | --- |")
	for _, c := range res.Checks {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", c.Status, c.ID, mdCell(c.Subject), mdCell(c.Summary))
	}
	for _, c := range res.Checks {
		if c.Status != doctor.Fail && c.Status != doctor.Warn {
			continue
		}
		fmt.Fprintf(w, "\n### %s %s: %s\n\n", c.Status, mdEscape(c.Subject), mdEscape(c.Summary))
		for _, d := range c.Detail {
			fmt.Fprintf(w, "- %s\n", mdEscape(d))
		}
		if c.Fix != "" {
			fmt.Fprintln(w, "\n**Fix:**")
			for _, f := range strings.Split(c.Fix, "\n") {
				if f != "" {
					fmt.Fprintf(w, "- %s\n", mdEscape(f))
				}
			}
		}
	}
	if len(res.Unavailable) > 0 {
		fmt.Fprintln(w, "\n<details><summary>Not read</summary>")
		fmt.Fprintln(w)
		for _, u := range res.Unavailable {
			fmt.Fprintf(w, "- %s\n", mdEscape(u))
		}
		fmt.Fprintln(w, "\n</details>")
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// wrapWords breaks s into lines of at most width runes at spaces (a word
// longer than width gets a line of its own).
func wrapWords(s string, width int) []string {
	if width < 8 {
		width = 8
	}
	var lines []string
	var cur strings.Builder
	n := 0
	for _, word := range strings.Fields(s) {
		wl := displaywidth.String(word)
		if n > 0 && n+1+wl > width {
			lines = append(lines, cur.String())
			cur.Reset()
			n = 0
		}
		if n > 0 {
			cur.WriteByte(' ')
			n++
		}
		cur.WriteString(word)
		n += wl
	}
	if n > 0 || len(lines) == 0 {
		lines = append(lines, cur.String())
	}
	return lines
}
