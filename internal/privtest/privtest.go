// Package privtest gates tests that need root, BPF or cgroups. Locally they
// skip with a reason; in CI (CUDATRACE_REQUIRE_PRIVILEGED=1) a skip is a
// failure, so privileged tests cannot silently stop running. Each one that
// runs has a deadline (Deadline), so a hang fails that test in minutes.
package privtest

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvRequire is the variable CI sets to turn privileged skips into failures.
const EnvRequire = "CUDATRACE_REQUIRE_PRIVILEGED"

// EnvPrebuilt names a directory of binaries built beforehand (cudatrace,
// fakecuda, faultexec, and fakelib/ with testdata/fakelib's libraries and
// app): the kernel matrix (scripts/test-kernels.sh) runs the test binaries
// in a guest that has no Go or gcc to build them with.
const EnvPrebuilt = "CUDATRACE_TEST_BINARIES"

// Prebuilt is name in EnvPrebuilt's directory, when it is set; one missing
// there fails the test.
func Prebuilt(t testing.TB, name string) (string, bool) {
	t.Helper()
	dir := os.Getenv(EnvPrebuilt)
	if dir == "" {
		return "", false
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s=%s: %v", EnvPrebuilt, dir, err)
	}
	return p, true
}

// Required reports whether privileged tests must run.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Skip skips the test with reason, or fails it when privileged tests are
// required.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (and %s=1 forbids skipping)", reason, EnvRequire)
	}
	t.Skip(reason)
}

// RequireRoot skips (or fails, in CI) unless running as root, skips under
// -short (the pure tier), and arms the
// test's Deadline. Outside go test (scripts/scenario drives the same
// helpers with a testing.TB of its own) there is no test to time out.
func RequireRoot(t testing.TB) {
	t.Helper()
	// testing.Short panics outside go test (scripts/scenario, make demo).
	if testing.Testing() && testing.Short() && !Required() {
		// -short is the quick tier: pure tests only (make test-short).
		t.Skip("privileged test: skipped under -short")
	}
	if os.Geteuid() != 0 {
		Skip(t, "needs root: run the tests with sudo")
	}
	switch t.(type) {
	case *testing.T, *testing.B:
		Deadline(t)
	}
}
