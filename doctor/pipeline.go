package doctor

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cudatrace/cudatrace/snapshot"
)

// Options is whose view doctor takes: snapshot.SurveyOptions, checked.
type Options = snapshot.SurveyOptions

// RequestError is a request doctor cannot carry out as asked: no such
// process, cgroup or user. Its text is the whole message, escaped.
type RequestError struct{ msg string }

func (e *RequestError) Error() string { return e.msg }

// Host is the doctor pipeline: it checks what opts names exists, surveys
// the host (the one step that reads the system) and runs the checks. A
// *RequestError says the request was wrong; another error, that the
// subject's root or its /etc/passwd could not be read for opts.User.
func Host(opts Options) (*Result, error) {
	if opts.PID > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", opts.PID)); err != nil {
			return nil, &RequestError{fmt.Sprintf("no process %d", opts.PID)}
		}
	}
	if cg := opts.Cgroup; cg != "" {
		if strings.Contains(cg, "..") {
			return nil, &RequestError{fmt.Sprintf("--cgroup %q: .. is not allowed", cg)}
		}
		if err := snapshot.CheckCgroup(cg); err != nil {
			return nil, &RequestError{fmt.Sprintf("--cgroup %s: %v", Escape(cg), err)}
		}
	}
	sv := snapshot.SurveyHost(opts)
	if opts.User != "" && sv.User == nil {
		msg := "-u " + Escape(opts.User) + ": no such user"
		if sv.UserError != nil {
			msg = "-u " + Escape(opts.User) + ": " + sv.UserError.Error()
		}
		if sv.UserError == nil || errors.Is(sv.UserError, snapshot.ErrNoSuchUser) {
			return nil, &RequestError{msg}
		}
		return nil, errors.New(msg)
	}
	return Run(sv), nil
}
