package faults

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// SetupFailed is the exit status of Main when it cannot set the faults up
// (scenario.SetupFailed).
const SetupFailed = 125

// Usage is Main's command line.
const Usage = "[--seccomp-deny SYSCALL]... [--seccomp-action ACTION] [--seccomp-notify SOCKET | --seccomp-prctl] [--nofile N] [--as BYTES] -- COMMAND [ARGS...]"

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// Main is the fault helper's command line (Usage): it sets the faults and
// execs COMMAND, or returns an exit status after one line on stderr that
// starts with "scenario setup:". faultexec and scripts/scenario's faultexec
// mode run it.
func Main(args []string, stderr io.Writer) int {
	var deny list
	fs := flag.NewFlagSet("faultexec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&deny, "seccomp-deny", "refuse this syscall with EPERM (repeatable): "+strings.Join(Specs(), ", "))
	actionName := fs.String("seccomp-action", "", "what the filter does to a denied call: errno (EPERM, the default), kill-process, kill-thread, trap")
	notify := fs.String("seccomp-notify", "", "refuse through SECCOMP_RET_USER_NOTIF, answered by the supervisor at this socket")
	nofile := fs.Uint64("nofile", 0, "RLIMIT_NOFILE (soft and hard)")
	as := fs.Uint64("as", 0, "RLIMIT_AS in bytes (soft and hard), as `ulimit -v` sets it")
	viaPrctl := fs.Bool("seccomp-prctl", false, "install the filter with prctl(PR_SET_SECCOMP) instead of seccomp(2)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	err := func() error {
		if fs.NArg() == 0 {
			return errors.New("faultexec: no command (usage: faultexec " + Usage + ")")
		}
		denies, err := ParseDenies(deny)
		if err != nil {
			return err
		}
		if *notify != "" && len(denies) == 0 {
			return errors.New("--seccomp-notify needs --seccomp-deny")
		}
		if *notify != "" && *actionName != "" {
			return errors.New("--seccomp-notify and --seccomp-action exclude each other")
		}
		if _, err := ParseAction(*actionName); err != nil {
			return err
		}
		return Exec(Spec{Deny: denies, NotifySocket: *notify, NoFile: *nofile, AS: *as, ViaPrctl: *viaPrctl, Action: *actionName}, fs.Args())
	}()
	fmt.Fprintf(stderr, "scenario setup: %v\n", err)
	return SetupFailed
}

// Args is the helper's arguments for spec's settings, up to and including
// the "--" before the command.
func Args(deny []string, action, notifySocket string, nofile, as uint64) []string {
	var out []string
	for _, d := range deny {
		out = append(out, "--seccomp-deny", d)
	}
	if action != "" {
		out = append(out, "--seccomp-action", action)
	}
	if notifySocket != "" {
		out = append(out, "--seccomp-notify", notifySocket)
	}
	if nofile > 0 {
		out = append(out, "--nofile", fmt.Sprint(nofile))
	}
	if as > 0 {
		out = append(out, "--as", fmt.Sprint(as))
	}
	return append(out, "--")
}
