package scenario

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// FakeCUDAPackage is fakecuda's import path relative to the module root.
const FakeCUDAPackage = "./testdata/fakecuda"

// FaultExecPackage is the fault helper's import path relative to the module root.
const FaultExecPackage = "./internal/scenario/faults/faultexec"

var shared struct {
	sync.Mutex
	enabled bool              // RunMain is in charge of removing dir
	dir     string            // where the per-process builds live
	paths   map[string]string // package → binary
}

// RunMain runs the tests and then removes the binaries that FakeCUDA and
// the fault helper built for the whole test binary. Call it from TestMain;
// without it, they are built once per test instead.
func RunMain(m *testing.M) {
	shared.Lock()
	shared.enabled = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir) // best-effort cleanup: nothing to do if it fails
	}
	shared.Unlock()
	os.Exit(code)
}

// FakeCUDA builds testdata/fakecuda (CGO_ENABLED=0, static) and returns the
// binary's path. Its directory is readable by every user, so scenarios with
// Env.User can run it.
func FakeCUDA(t testing.TB) string {
	t.Helper()
	return buildShared(t, FakeCUDAPackage, "fakecuda")
}

// faultExec builds the helper that sets an Env's seccomp filter and rlimit.
func faultExec(t testing.TB) string {
	t.Helper()
	return buildShared(t, FaultExecPackage, "faultexec")
}

// buildShared builds pkg once per test binary (under RunMain) into a
// directory every user can read.
func buildShared(t testing.TB, pkg, name string) string {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if p, ok := shared.paths[pkg]; ok {
		return p
	}
	var dir string
	switch {
	case shared.enabled && shared.dir != "":
		dir = shared.dir
	case shared.enabled:
		var err error
		if dir, err = os.MkdirTemp("", "cudatrace-fakecuda-"); err != nil {
			t.Fatalf("scenario: %v", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("scenario: %v", err)
		}
		shared.dir = dir
	default:
		dir = sharedTempDir(t, "cudatrace-fakecuda-")
	}
	bin := filepath.Join(dir, name)
	if p, ok := privtest.Prebuilt(t, name); ok {
		bin = p
	} else if err := Build(bin, pkg); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	if shared.enabled {
		if shared.paths == nil {
			shared.paths = map[string]string{}
		}
		shared.paths[pkg] = bin
	}
	return bin
}

// Build compiles pkg (relative to the module root) statically into bin.
func Build(bin, pkg string) error {
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

// ModuleRoot is the directory holding go.mod, from `go env GOMOD`.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("scenario: go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("scenario: not inside a Go module")
	}
	return filepath.Dir(gomod)
}
