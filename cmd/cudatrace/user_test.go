package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/cudatrace/cudatrace/internal/privtest"
)

// The binary itself, with /etc hidden as in a scratch image, runs the
// target as nobody for both spellings.
func TestUserInScratchLikeRoot(t *testing.T) {
	privtest.RequireRoot(t)
	needBinaries(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		privtest.Skip(t, "needs unshare (util-linux)")
	}
	for _, spec := range []string{"nobody", "65534:65534"} {
		script := `mount -t tmpfs none /etc && exec "$@"`
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh",
			cudatraceBin, "--backend", "ptrace", "-q", "-u", spec, "--", "/bin/sh", "-c", `echo "$(id -u):$(id -g)"`)
		r := runBinary(t, cmd)
		if r.code != 0 || r.stdout != "65534:65534\n" {
			t.Errorf("-u %s without /etc/passwd: exit %d, stdout %q, stderr %q", spec, r.code, r.stdout, r.stderr)
		}
	}
}

// cudatrace links no cgo package of its own. Only net's resolver (pflag's IP
// flags import net) uses cgo, so a plain go install links dynamically where
// a C compiler exists; CGO_ENABLED=0 (README, Makefile) or -tags netgo
// leaves no cgo at all, and the binary is static.
func TestNoCgoImports(t *testing.T) {
	cgoPackages := func(flags ...string) []string {
		args := append(append([]string{"list"}, flags...), "-deps", "-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", ".")
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	for _, p := range cgoPackages() {
		if p != "runtime/cgo" && p != "net" {
			t.Errorf("%s uses cgo: a plain go install would link it dynamically", p)
		}
	}
	if ps := cgoPackages("-tags", "netgo"); len(ps) > 0 {
		t.Errorf("with -tags netgo, %v still use cgo: go install -tags netgo would not be static", ps)
	}
}

func TestBuildInfoVersion(t *testing.T) {
	for _, tc := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "0123456789ab-dirty"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}}, "0123456789ab"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "unknown"},
	} {
		if got := buildInfoVersion(&tc.bi); got != tc.want {
			t.Errorf("buildInfoVersion(%+v) = %q, want %q", tc.bi, got, tc.want)
		}
	}
}

// A plain go build in this checkout stamps the git revision, not "dev".
func TestBinaryVersionFromVCS(t *testing.T) {
	rev, gitErr := exec.Command("git", "rev-parse", "HEAD").Output()
	if gitErr != nil {
		t.Skipf("not a git checkout: %v", gitErr)
	}
	top, _ := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if st, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err != nil || !st.IsDir() {
		t.Skip("a git worktree (.git is a file): go stamps no VCS info there")
	}
	// This machine's GOFLAGS may say -buildvcs=false; a plain go install
	// elsewhere stamps by default.
	bin := filepath.Join(t.TempDir(), "cudatrace")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	// A checkout's build is stamped with the revision (Go 1.24+ as a
	// pseudo-version, v0.0.0-DATE-REV[+dirty]).
	if want := string(rev[:12]); !strings.HasPrefix(string(out), "cudatrace ") || !strings.Contains(string(out), want) {
		t.Errorf("version %q, want it to name revision %q", out, want)
	}
}
