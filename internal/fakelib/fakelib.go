// Package fakelib builds testdata/fakelib for tests: a stand-in
// libcuda.so.1 and libnvidia-ml.so.1 with the entry points cudatrace
// probes, and an app that dlopens them. Tests of the backends and of the
// command share it.
package fakelib

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

var (
	once sync.Once
	dir  string
	err  error
)

// Build compiles them once per test binary, with gcc, into a directory
// every user can read, and returns it (libcuda.so.1, libnvidia-ml.so.1,
// app, and forkrace: tracer/ptrace's fork-race target). Without gcc the
// test is skipped, unless privileged tests are required.
func Build(t testing.TB) string {
	t.Helper()
	if pre, ok := privtest.Prebuilt(t, "fakelib"); ok {
		return pre
	}
	once.Do(func() { dir, err = build() })
	if err != nil {
		if privtest.Required() {
			t.Fatalf("build testdata/fakelib: %v", err)
		}
		t.Skipf("build testdata/fakelib (needs gcc): %v", err)
	}
	return dir
}

func build() (string, error) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		return "", err
	}
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "..", "testdata", "fakelib")
	out, err := os.MkdirTemp("", "cudatrace-fakelib-")
	if err != nil {
		return "", err
	}
	// MkdirTemp makes it 0700: a target running as another user must reach it.
	if err := os.Chmod(out, 0o755); err != nil {
		_ = os.RemoveAll(out) // best-effort cleanup of an empty temp dir
		return "", err
	}
	for _, b := range [][]string{
		{"-shared", "-fPIC", "-O1", "-o", filepath.Join(out, "libcuda.so.1"), filepath.Join(src, "libcuda.c")},
		{"-shared", "-fPIC", "-O1", "-o", filepath.Join(out, "libnvidia-ml.so.1"), filepath.Join(src, "libnvidia-ml.c")},
		{"-O1", "-o", filepath.Join(out, "app"), filepath.Join(src, "app.c"), "-ldl", "-pthread"},
		{"-O1", "-o", filepath.Join(out, "forkrace"), filepath.Join(src, "forkrace.c"), "-pthread"},
	} {
		if msg, err := exec.Command(cc, b...).CombinedOutput(); err != nil {
			return "", &exec.Error{Name: string(msg), Err: err}
		}
	}
	return out, nil
}
