// Command cudatrace finds the /dev/nvidia* call that makes CUDA
// initialisation fail, and explains why.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/tracer/launch"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func toolVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func main() {
	// A traced command starts as a re-executed cudatrace that waits for the
	// tracer; that copy never gets past this line.
	launch.RunLoaderIfRequested()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError carries an exit code and a one-line message to main.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Sprintf(format, args...)}
}

// run parses args and dispatches; it returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet(&o, stderr)
	fs.SetInterspersed(false) // everything after COMMAND belongs to COMMAND
	err := fs.Parse(args)
	if err == nil && !o.help && !o.version && fs.NArg() > 0 && fs.ArgsLenAtDash() != 0 {
		switch sub := fs.Arg(0); sub {
		case "doctor": // its own flags: --cgroup, and --pid taking one PID
			return doctorCommand(append(append([]string{}, args[:len(args)-fs.NArg()]...), fs.Args()[1:]...), stdout, stderr)
		case "report", "explain", "version":
			// Subcommands take flags anywhere: re-parse without the word.
			leading := args[:len(args)-fs.NArg()]
			rest := append(append([]string{}, leading...), fs.Args()[1:]...)
			o = options{}
			fs = newFlagSet(&o, stderr)
			if err = fs.Parse(rest); err == nil && !o.help {
				return finish(dispatchSub(sub, fs.Args(), &o, stdout, stderr), stderr)
			}
		}
	}
	if errors.Is(err, pflag.ErrHelp) || (err == nil && o.help) {
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, usageText, flagUsages(fs))
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "cudatrace: %v\nRun 'cudatrace --help' for usage.\n", err)
		return exitUsage
	}
	if o.version {
		fmt.Fprintln(stdout, "cudatrace", toolVersion())
		return exitOK
	}
	return finish(traceCommand(fs.Args(), &o, stdout, stderr), stderr)
}

func dispatchSub(sub string, args []string, o *options, stdout, stderr io.Writer) error {
	switch sub {
	case "version":
		fmt.Fprintln(stdout, "cudatrace", toolVersion())
		return nil
	case "report":
		return reportCommand(args, o, stdout, stderr)
	default:
		return explainCommand(args, o, stdout, stderr)
	}
}

// finish maps an error to an exit status, printing its one line.
func finish(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "cudatrace: %s\n", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "cudatrace: %v\n", err)
	return exitFailure
}
