package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// repoRoot is the module's root, where the Makefile is.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatal(err)
	}
	return root
}

// makeDryRun prints the commands `make -n targets` would run, as the user
// setpriv makes (none: the caller's own).
func makeDryRun(t *testing.T, setpriv []string, targets ...string) string {
	t.Helper()
	mk, err := exec.LookPath("make")
	if err != nil {
		privtest.Skip(t, "no make (apt-get install make)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv := append(append(append([]string{}, setpriv...), mk, "-n", "-C", repoRoot(t)), targets...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "HOME=/tmp")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out.String())
	}
	return out.String()
}

// The README's first commands, make demo and make test, work as root
// without sudo (a stock root install has none) and as a user with sudo:
// then only the parts that need root go through sudo, with go's directory
// on PATH (sudo's secure_path lacks /usr/local/go/bin) and the tests'
// switches kept.
func TestMakeAsUser(t *testing.T) {
	privtest.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		privtest.Skip(t, "no setpriv (apt-get install util-linux)")
	}
	root := makeDryRun(t, nil, "demo", "test")
	for _, line := range strings.Split(root, "\n") {
		if strings.Contains(line, "sudo") {
			t.Errorf("as root, make runs sudo: %s", line)
		}
	}
	for _, want := range []string{"./scripts/demo.sh", " test "} {
		if !strings.Contains(root, want) {
			t.Errorf("as root, make -n demo test lacks %q:\n%s", want, root)
		}
	}
	user := makeDryRun(t, []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}, "demo", "test")
	var viaSudo []string
	for _, line := range strings.Split(user, "\n") {
		if strings.HasPrefix(line, "sudo ") {
			viaSudo = append(viaSudo, line)
		} else if strings.Contains(line, "build") && strings.Contains(line, "sudo") {
			t.Errorf("as a user, the build runs as root: %s", line)
		}
	}
	if len(viaSudo) != 2 || !strings.HasSuffix(viaSudo[0], "./scripts/demo.sh") || !strings.Contains(viaSudo[1], " test ") {
		t.Fatalf("as a user, want the demo and the tests through sudo; make -n printed:\n%s", user)
	}
	for _, l := range viaSudo {
		if !strings.Contains(l, "--preserve-env=CUDATRACE_REQUIRE_PRIVILEGED,CUDATRACE_TEST_TIMEOUT") || !strings.Contains(l, `PATH="`) {
			t.Errorf("sudo line keeps neither PATH nor the tests' switches: %s", l)
		}
	}
}

// make install DESTDIR=... PREFIX=... puts the binary, the man page and
// the three completions where their tools look, each what the binary
// itself prints.
func TestMakeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("make install builds cudatrace: not under -short")
	}
	mk, err := exec.LookPath("make")
	if err != nil {
		privtest.Skip(t, "no make (apt-get install make)")
	}
	needBinaries(t)
	dest, bin := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, mk, "-C", repoRoot(t), "install", "DESTDIR="+dest, "PREFIX=/opt/ct", "BIN="+bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for path, args := range map[string][]string{
		"bin/cudatrace":                                  nil,
		"share/man/man1/cudatrace.1":                     {"man"},
		"share/bash-completion/completions/cudatrace":    {"completion", "bash"},
		"share/zsh/site-functions/_cudatrace":            {"completion", "zsh"},
		"share/fish/vendor_completions.d/cudatrace.fish": {"completion", "fish"},
	} {
		full := filepath.Join(dest, "opt/ct", path)
		fi, err := os.Stat(full)
		if err != nil {
			t.Errorf("not installed: %v", err)
			continue
		}
		if args == nil {
			if fi.Mode().Perm() != 0o755 {
				t.Errorf("%s: mode %v", path, fi.Mode())
			}
			continue
		}
		got, _ := os.ReadFile(full)
		want, err := exec.Command(filepath.Join(dest, "opt/ct/bin/cudatrace"), args...).Output()
		if err != nil || !bytes.Equal(got, want) || len(got) == 0 {
			t.Errorf("%s is not what cudatrace %s prints (%v)", path, strings.Join(args, " "), err)
		}
	}
}

// make demo explains itself: it says it is a simulation and what is
// simulated; the headline gives CUDA's return code as a real run's does;
// the stand-in nodes' ENOTTY ioctls are not shown as failed calls; the
// headline and the statuses agree (the target exits 1 as a
// failed cuInit, cudatrace passes it through, and the demo says why it
// itself exits 0).
func TestDemo(t *testing.T) {
	privtest.RequireRoot(t)
	ctx := privtest.Deadline(t)
	bin := t.TempDir()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot(t), "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "BIN="+bin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{
		"demo: a SIMULATION, no GPU involved", "stand-ins in a private /dev", "real cgroup v2 device program",
		// CUDA's own return code, read by the uretprobe on the fake
		// libcuda's cuInit, as a real run shows it.
		"cuInit returned 999 (CUDA_ERROR_UNKNOWN) in fakecuda[", "by fakecuda[", "[cgroup2-denied]", "target exited 1",
		"fakecuda exited 1, and cudatrace with it", "so make demo exits 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	report := out[max(0, strings.Index(out, "cuInit returned")):]
	if strings.Contains(report, "ioctls failed") || strings.Contains(report, "ENOTTY") {
		t.Errorf("demo shows the stand-ins' ENOTTY ioctls as failures:\n%s", out)
	}
	if stdout.String() != "cuInit 999\n" {
		t.Errorf("target's stdout %q", stdout.String())
	}
}
