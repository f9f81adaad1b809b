package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/diagnose"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/tracer/stracelog"
)

// reportCommand re-renders a saved report and re-runs the analysis with
// this build's rules.
func reportCommand(args []string, o *options, stdout, stderr io.Writer) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if err := checkColor(o.color); err != nil {
		return err
	}
	if err := checkOutput(o, stderr); err != nil {
		return err
	}
	if len(args) != 1 {
		return fail(exitUsage, "usage: cudatrace report FILE [--format text|json|markdown|html]")
	}
	rep, err := report.LoadFile(args[0])
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return fail(exitFailure, "%v", err)
		}
		return fail(exitBadInput, "%s: %v", args[0], err)
	}
	if changed := diagnose.Reanalyse(rep); changed != "" && !o.quiet {
		// The stored finding ids come from the file: escape them.
		fmt.Fprintf(stderr, "cudatrace: note: this version's analysis differs from the stored one (%s)\n", analysis.Printable(changed))
	}
	if err := emit(rep, o, stdout, stderr, false); err != nil {
		return err
	}
	// Printed, as it is a report; but one of nothing NVIDIA-related gets
	// explain's status for a log of nothing NVIDIA-related.
	if len(render.SummaryRows(rep)) == 0 {
		return fail(exitBadInput, "%s holds no NVIDIA call: no /dev/nvidia* or CUDA/NVML call was traced", analysis.Printable(args[0]))
	}
	return nil
}

// explainCommand analyses strace output.
func explainCommand(args []string, o *options, stdout, stderr io.Writer) error {
	if err := checkFormat(o.format); err != nil {
		return err
	}
	if err := checkColor(o.color); err != nil {
		return err
	}
	if err := checkOutput(o, stderr); err != nil {
		return err
	}
	if len(args) == 0 {
		return fail(exitUsage, "usage: cudatrace explain STRACE.LOG [MORE.LOG...]")
	}
	for _, a := range args {
		if _, err := os.Stat(a); err != nil {
			return fail(exitFailure, "%v", err)
		}
	}
	log, err := stracelog.ParseFilesWith(args, diagnose.StraceLogOptions)
	if err != nil {
		return fail(exitBadInput, "%s: %v", strings.Join(args, ", "), err)
	}
	if !log.NVIDIARelated() {
		return fail(exitBadInput, "nothing NVIDIA-related in %s: no /dev/nvidia*, libcuda or driver calls (was strace run with -f on the CUDA process?)", strings.Join(args, ", "))
	}
	rep := diagnose.FromStraceLog(log, toolVersion())
	return emit(rep, o, stdout, stderr, false)
}
