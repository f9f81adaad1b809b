package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// runCLI calls run in-process. Only for paths that launch nothing: a
// launch re-executes the running binary, which here is the test binary.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	r := result{code: code, stdout: out.String(), stderr: errb.String()}
	noCrash(t, r.stdout+r.stderr)
	return r
}

// oneLineError checks for exactly one "cudatrace: ..." error line, plus at
// most the usage hint.
func oneLineError(t *testing.T, r result, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) == 2 && lines[1] == "Run 'cudatrace --help' for usage." {
		lines = lines[:1]
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "cudatrace: ") {
		t.Errorf("stderr is not one error line:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not mention %q", r.stderr, want)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown flag", []string{"--bogus", "--", "true"}, exitUsage, "unknown flag: --bogus"},
		{"unknown shorthand", []string{"-Z", "--", "true"}, exitUsage, "unknown shorthand flag"},
		{"no command", nil, exitUsage, "nothing to trace"},
		{"only a dash", []string{"--"}, exitUsage, "nothing to trace"},
		{"bad format", []string{"--format", "bogus", "--", "true"}, exitUsage, `unknown format "bogus"`},
		{"pid and command", []string{"-p", "1", "--", "true"}, exitUsage, "not both"},
		{"bad backend", []string{"--backend", "dtrace", "--", "true"}, exitUsage, `unknown backend "dtrace"`},
		{"pid zero", []string{"-p", "0"}, exitUsage, "invalid PID 0"},
		{"negative duration", []string{"--duration", "-1s", "--", "true"}, exitUsage, "--duration -1s: give a positive duration"},
		{"pid not a number", []string{"-p", "abc"}, exitUsage, "invalid argument"},
		{"user with pid", []string{"-u", "nobody", "-p", "1"}, exitUsage, "-u applies to a launched command"},
		{"unknown user", []string{"-u", "no-such-user-xyz", "--", "true"}, exitUsage, `unknown user "no-such-user-xyz"`},
		{"self", []string{"-p", strconv.Itoa(os.Getpid())}, exitUsage, "cannot trace cudatrace itself"},
		{"no such pid", []string{"-p", "2147483646"}, exitFailure, "no such process: 2147483646"},
		{"command not found", []string{"--", "no-such-command-xyz"}, exitNotFound, "no-such-command-xyz: command not found"},
		{"report without file", []string{"report"}, exitUsage, "usage: cudatrace report FILE"},
		{"report bad format", []string{"report", "x.json", "--format", "yaml"}, exitUsage, `unknown format "yaml"`},
		{"explain without file", []string{"explain"}, exitUsage, "usage: cudatrace explain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout should be empty, got:\n%s", r.stdout)
			}
			oneLineError(t, r, tc.want)
		})
	}
}

// The binary gives the same answers as run, and a command that exists but
// is not executable is 126.
func TestBinaryUsageErrors(t *testing.T) {
	needBinaries(t)
	t.Parallel()
	notExec := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--bogus"}, exitUsage, "unknown flag"},
		{[]string{}, exitUsage, "nothing to trace"},
		{[]string{"--", "no-such-command-xyz"}, exitNotFound, "command not found"},
		{[]string{"--", notExec}, exitNoExec, notExec},
	} {
		r := runBinary(t, exec.Command(cudatraceBin, tc.args...))
		if r.code != tc.code {
			t.Errorf("%v: exit %d, want %d; stderr:\n%s", tc.args, r.code, tc.code, r.stderr)
		}
		oneLineError(t, r, tc.want)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runCLI(t, args...)
		if r.code != exitOK {
			t.Errorf("%v: exit %d, want 0", args, r.code)
		}
		for _, want := range []string{"Usage:", "Exit status:", "127  COMMAND not found", "3    attached: a failing NVIDIA call was found", "Each command's own: cudatrace help COMMAND", "--backend", "--output"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
		// Test-only flags stay hidden.
		for _, hidden := range []string{"--proc-devices", "--device-major", "--ringbuf-size"} {
			if strings.Contains(r.stdout, hidden) {
				t.Errorf("%v: help shows hidden flag %s", args, hidden)
			}
		}
		if r.stderr != "" {
			t.Errorf("%v: stderr %q", args, r.stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-V"}} {
		r := runCLI(t, args...)
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "cudatrace ") || strings.Count(r.stdout, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
	}
}

func TestReportBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := `{"schema": 1, "tool": {"name": "cudatrace", "version": "x"}, "target": {"uid": 0}, "trace": {"source": "live"}, "events": [], "analysis": {"verdict": "", "findings": null}}`
	for _, tc := range []struct {
		name, path string
		code       int
		want       string
	}{
		{"empty", write("empty.json", nil), exitBadInput, "empty file"},
		{"blank", write("blank.json", []byte("\n \n")), exitBadInput, "empty file"},
		{"truncated", write("truncated.json", []byte(valid[:len(valid)/2])), exitBadInput, "truncated"},
		{"binary", write("binary.json", []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0xff, 0xfe}), exitBadInput, "not a cudatrace report"},
		{"other json", write("other.json", []byte(`{"hello": "world"}`)), exitBadInput, "not a cudatrace report"},
		{"future schema", write("future.json", []byte(strings.Replace(valid, `"schema": 1`, `"schema": 99`, 1))), exitBadInput, "schema 99 is newer"},
		{"missing", filepath.Join(dir, "missing.json"), exitFailure, "no such file"},
		{"directory", dir, exitBadInput, "a directory, not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "report", tc.path)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			oneLineError(t, r, tc.want)
			if r.stdout != "" {
				t.Errorf("stdout: %q", r.stdout)
			}
		})
	}
	// The minimal valid report loads and prints; it holds no NVIDIA call,
	// so it exits as explain does on a log of none (TestNothingNVIDIAExitsAlike).
	r := runCLI(t, "report", write("valid.json", []byte(valid)), "--format", "json")
	if r.code != exitBadInput || !strings.Contains(r.stdout, `"schema"`) {
		t.Errorf("valid minimal report: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

const recordings = "../../testdata/strace/h200/"

func TestExplainRecordings(t *testing.T) {
	for _, tc := range []struct {
		file, path string
	}{
		{"cuinit-deny-uvm.strace", "/dev/nvidia-uvm"},
		{"cuinit-deny-195-smi.strace", "/dev/nvidiactl"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := runCLI(t, "explain", recordings+tc.file, "--format", "json")
			if r.code != exitFound {
				t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, exitFound, r.stderr)
			}
			rep := loadReportText(t, r.stdout)
			f := rep.Analysis.Failing
			if f == nil {
				t.Fatal("no failing call")
			}
			if f.Path != tc.path || f.ErrnoName() != "EPERM" || f.Syscall != "openat" {
				t.Errorf("failing call %s %q %s, want openat %q EPERM", f.Syscall, f.Path, f.ErrnoName(), tc.path)
			}
			if rep.Trace.Source != "strace-log" || len(rep.Trace.Limits) == 0 {
				t.Errorf("trace source %q, limits %v: a log must say what it cannot tell", rep.Trace.Source, rep.Trace.Limits)
			}
			// The text form names the path and errno in its first line.
			txt := runCLI(t, "explain", recordings+tc.file)
			first, _, _ := strings.Cut(txt.stdout, "\n")
			if !strings.Contains(first, tc.path) || !strings.Contains(first, "EPERM") {
				t.Errorf("first line %q does not name %s and EPERM", first, tc.path)
			}
		})
	}
	t.Run("healthy", func(t *testing.T) {
		r := runCLI(t, "explain", recordings+"cuinit-ok-root.strace", "--format", "json")
		if r.code != exitOK {
			t.Errorf("exit %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		if rep := loadReportText(t, r.stdout); rep.Analysis.Failing != nil {
			t.Errorf("healthy recording has a failing call: %+v", rep.Analysis.Failing)
		}
	})
}

func TestExplainBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(data), 0o644)
		return p
	}
	plain := write("plain.strace", "1234  execve(\"/bin/true\", [\"true\"], 0x7ffd /* 20 vars */) = 0\n"+
		"1234  openat(AT_FDCWD, \"/etc/ld.so.cache\", O_RDONLY|O_CLOEXEC) = 3\n"+
		"1234  exit_group(0)                     = ?\n1234  +++ exited with 0 +++\n")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no NVIDIA calls", []string{plain}, exitBadInput, "nothing NVIDIA-related"},
		{"empty", []string{write("empty.strace", "")}, exitBadInput, ""},
		{"binary", []string{write("binary.strace", "\x7fELF\x02\x01\x01\x00\x00\xff\xfe\x00")}, exitBadInput, ""},
		{"missing", []string{filepath.Join(dir, "missing.strace")}, exitFailure, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"explain"}, tc.args...)...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", r.code, tc.code, r.stderr)
			}
			oneLineError(t, r, tc.want)
		})
	}
}

// Without root the eBPF backend says what is missing, in one line, and
// fails with 1 rather than silently using ptrace.
func TestEBPFWithoutRoot(t *testing.T) {
	t.Parallel()
	privtest.RequireRoot(t) // to become nobody
	needBinaries(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		privtest.Skip(t, "needs setpriv")
	}
	cmd := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", cudatraceBin, "--backend", "ebpf", "--", "true")
	r := runBinary(t, cmd)
	if r.code != exitFailure {
		t.Errorf("exit %d, want 1; stderr:\n%s", r.code, r.stderr)
	}
	oneLineError(t, r, "eBPF backend unavailable")
	if !strings.Contains(r.stderr, "CAP_") && !strings.Contains(r.stderr, "root") {
		t.Errorf("error does not name the missing privilege: %q", r.stderr)
	}
}
