package scenario

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// FakeCUDAPackage is fakecuda's import path relative to the module root.
const FakeCUDAPackage = "./testdata/fakecuda"

var shared struct {
	sync.Mutex
	enabled bool   // RunMain is in charge of removing dir
	dir     string // where the per-process build lives
	path    string
}

// RunMain runs the tests and then removes the fakecuda binary that FakeCUDA
// built for the whole test binary. Call it from TestMain; without it,
// FakeCUDA builds once per test instead.
func RunMain(m *testing.M) {
	shared.Lock()
	shared.enabled = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	shared.Unlock()
	os.Exit(code)
}

// FakeCUDA builds testdata/fakecuda (CGO_ENABLED=0, static) and returns the
// binary's path. Its directory is readable by every user, so scenarios with
// Env.User can run it.
func FakeCUDA(t testing.TB) string {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.path != "" {
		return shared.path
	}
	var dir string
	if shared.enabled {
		var err error
		if dir, err = os.MkdirTemp("", "cudatrace-fakecuda-"); err != nil {
			t.Fatalf("scenario: %v", err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("scenario: %v", err)
		}
		shared.dir = dir
	} else {
		dir = sharedTempDir(t, "cudatrace-fakecuda-")
	}
	bin := filepath.Join(dir, "fakecuda")
	cmd := exec.Command("go", "build", "-o", bin, FakeCUDAPackage)
	cmd.Dir = ModuleRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scenario: build fakecuda: %v\n%s", err, out)
	}
	if shared.enabled {
		shared.path = bin
	}
	return bin
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
