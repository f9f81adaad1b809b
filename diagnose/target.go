package diagnose

import (
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/cudatrace/cudatrace/tracer"
)

// TargetProblem says what is wrong with a trace's target; the command maps
// each to its exit status (strace's 126 and 127 for a command).
type TargetProblem int

const (
	CommandNotFound      TargetProblem = iota + 1 // not in PATH, or no such file
	CommandNotExecutable                          // found, but cannot be executed
	InvalidPID                                    // not a process ID, or cudatrace's own
	NoSuchProcess                                 // no /proc/PID
)

// TargetError is a trace target that cannot be traced as given.
type TargetError struct {
	Problem TargetProblem
	msg     string
}

func (e *TargetError) Error() string { return e.msg }

// ResolveTarget checks spec's target before anything starts: a launched
// command (spec.Argv) is looked up in PATH and its Argv[0] becomes the
// path found; each PID to attach to (spec.PIDs) must name a live process
// other than cudatrace itself. A problem is a *TargetError.
func ResolveTarget(spec *tracer.Spec) error {
	if len(spec.Argv) > 0 {
		name := spec.Argv[0]
		path, err := exec.LookPath(name)
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				return &TargetError{CommandNotFound, fmt.Sprintf("%s: command not found", name)}
			}
			return &TargetError{CommandNotExecutable, fmt.Sprintf("%s: %v", name, errors.Unwrap(err))}
		}
		spec.Argv = append([]string{path}, spec.Argv[1:]...)
	}
	for _, pid := range spec.PIDs {
		if pid <= 0 {
			return &TargetError{InvalidPID, fmt.Sprintf("invalid PID %d", pid)}
		}
		if pid == os.Getpid() {
			return &TargetError{InvalidPID, fmt.Sprintf("cannot trace cudatrace itself (PID %d)", pid)}
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return &TargetError{NoSuchProcess, fmt.Sprintf("no such process: %d", pid)}
		}
	}
	return nil
}
