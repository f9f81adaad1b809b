// Command faultexec sets a seccomp filter and RLIMIT_NOFILE on itself, then
// execs COMMAND in the same process (internal/scenario runs it at the end of
// a scenario's setup, or in front of a tracer's target):
//
//	faultexec [--seccomp-deny SYSCALL]... [--seccomp-notify SOCKET] [--nofile N] -- COMMAND [ARGS...]
//
// A failure exits with 125 and one line that starts with "scenario setup:".
package main

import (
	"os"

	"github.com/cudatrace/cudatrace/internal/scenario/faults"
)

func main() { os.Exit(faults.Main(os.Args[1:], os.Stderr)) }
