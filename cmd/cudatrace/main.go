// Command cudatrace finds the /dev/nvidia* call that makes CUDA
// initialisation fail, and explains why.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/cudatrace/cudatrace/internal/hostns"
	"github.com/cudatrace/cudatrace/tracer/launch"
)

// mainStarted is when the package's variables were set, just before main
// runs: --debug's timings count from it (GODEBUG=inittrace=1 shows the
// packages' init before it).
var mainStarted = time.Now()

// version is set at build time with -ldflags "-X main.version=..."
// (make build); otherwise it comes from the module's build info.
var version = ""

func toolVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return buildInfoVersion(bi)
}

// buildInfoVersion is the module version (go install m@v), else the VCS
// revision go build stamps from a git checkout: 12 hex digits, "-dirty"
// when the tree had changes.
func buildInfoVersion(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

func main() {
	// A traced command starts as a re-executed cudatrace that waits for the
	// tracer; that copy never gets here (tracer/launch's init runs it).
	launch.RunLoaderIfRequested()
	// In a pod that sees the host's processes (hostPID) but has a cgroup
	// namespace of its own, every cgroup path would read relative to the
	// pod's; the node agents (watch, doctor) re-execute themselves in
	// init's namespace. A traced command keeps the namespace it was given.
	if os.Geteuid() == 0 && nodeAgent(os.Args[1:]) {
		if err := hostns.JoinInitCgroupNamespace(); err != nil {
			fmt.Fprintf(os.Stderr, "cudatrace: cgroup paths are this container's own view: %v\n", err)
		}
	}
	// A reader gone from the output pipe (`cudatrace -- job 2>&1 | head`)
	// must not kill cudatrace with SIGPIPE and replace the target's exit
	// status with 141: with SIGPIPE notified, a write there fails with
	// EPIPE instead. Notified, not ignored: an ignored signal stays ignored
	// across exec, in the target.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// nodeAgent reports whether args run watch or doctor: the first word that
// is not a flag, before any "--".
func nodeAgent(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") {
			return a == "watch" || a == "doctor"
		}
	}
	return false
}

// exitError carries an exit code and a one-line message to main.
type exitError struct {
	code int
	msg  string
	// saveFailed: the -o write failed after the report was printed;
	// printFailed: the report could not be printed (its reader gone). A
	// launched command's own exit status still wins either way.
	saveFailed, printFailed bool
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

// run parses args and dispatches; it returns the process exit status.
func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := newFlagSet(&o, stderr)
	fs.SetInterspersed(false) // everything after COMMAND belongs to COMMAND
	err := fs.Parse(args)
	if err == nil && !o.help && !o.version && fs.NArg() > 0 && fs.ArgsLenAtDash() != 0 {
		word := fs.Arg(0)
		if sc := lookupSubcommand(word); sc != nil {
			// Subcommands take their own flags anywhere: re-parse without
			// the word.
			leading := args[:len(args)-fs.NArg()]
			rest := append(append([]string{}, leading...), fs.Args()[1:]...)
			return runSubcommand(sc, rest, stdout, stderr)
		}
		if s := suggestion(word); s != "" {
			fmt.Fprintf(stderr, "cudatrace: %s: no such command or program; did you mean %q? (cudatrace help %s)\n", word, s, s)
			return exitUsage
		}
	}
	if errors.Is(err, pflag.ErrHelp) || (err == nil && o.help) {
		return finish(writeMainHelp(stdout), stderr)
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

func runSubcommand(sc *subcommand, args []string, stdout, stderr io.Writer) int {
	if sc.direct != nil {
		return sc.direct(args, stdout, stderr)
	}
	var o options
	fs := sc.flagSet(&o)
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) || (err == nil && o.help) {
		return finish(writeSubHelp(stdout, sc), stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cudatrace %s: %v\nRun 'cudatrace help %s' for usage.\n", sc.name, err, sc.name)
		return exitUsage
	}
	return finish(sc.run(fs.Args(), &o, stdout, stderr), stderr)
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
