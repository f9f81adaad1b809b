package diagnose

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/tracer"
)

func TestResolveTarget(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "prog")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "script")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)

	spec := tracer.Spec{Argv: []string{"prog", "-x"}}
	if err := ResolveTarget(&spec); err != nil {
		t.Fatalf("prog in PATH: %v", err)
	}
	if want := []string{prog, "-x"}; strings.Join(spec.Argv, " ") != strings.Join(want, " ") {
		t.Errorf("Argv %q, want %q", spec.Argv, want)
	}
	if err := ResolveTarget(&tracer.Spec{PIDs: []int{os.Getppid()}}); err != nil {
		t.Errorf("the parent's PID: %v", err)
	}

	for _, tc := range []struct {
		name string
		spec tracer.Spec
		want TargetProblem
		msg  string
	}{
		{"not in PATH", tracer.Spec{Argv: []string{"no-such-command-xyz"}}, CommandNotFound, "no-such-command-xyz: command not found"},
		{"no such file", tracer.Spec{Argv: []string{filepath.Join(dir, "absent")}}, CommandNotFound, "absent: command not found"},
		{"not executable", tracer.Spec{Argv: []string{notExec}}, CommandNotExecutable, notExec + ": permission denied"},
		{"zero", tracer.Spec{PIDs: []int{0}}, InvalidPID, "invalid PID 0"},
		{"negative", tracer.Spec{PIDs: []int{-3}}, InvalidPID, "invalid PID -3"},
		{"self", tracer.Spec{PIDs: []int{os.Getpid()}}, InvalidPID, "cannot trace cudatrace itself"},
		{"gone", tracer.Spec{PIDs: []int{os.Getppid(), 2147483646}}, NoSuchProcess, "no such process: 2147483646"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ResolveTarget(&tc.spec)
			te, ok := errors.AsType[*TargetError](err)
			if !ok {
				t.Fatalf("error %v, want a *TargetError", err)
			}
			if te.Problem != tc.want || !strings.Contains(err.Error(), tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("problem %d %q, want %d containing %q on one line", te.Problem, err, tc.want, tc.msg)
			}
		})
	}
}
